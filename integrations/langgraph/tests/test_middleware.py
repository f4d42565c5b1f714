"""`BPEMiddleware` in a real `create_agent` run with a scripted model."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from evoharness_bpe import BPEState, MemoryExperienceStore
from evoharness_bpe.exceptions import UserError
from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage


def _script():
    return [
        ai_tool_call("track", {"key": "api.rate_limit", "value": "5 requests/s"}),
        ai_tool_call("commit", {"subgoal": "fetch data", "status": "done"}),
        ai_tool_call("note", {"text": "The weather API allows five requests per second"}),
        ai_tool_call("lookup", {"city": "Paris"}),
        "All done.",
    ]


def _agent(lookup_tool, **options):
    model = ScriptedChatModel(responses=_script())
    mw = BPEMiddleware(subgoals=["fetch data", "write report"], **options)
    agent = create_agent(model, [lookup_tool], system_prompt="You are a careful agent.", middleware=[mw])
    return agent, model, mw


def _check_prompts(model: ScriptedChatModel) -> None:
    assert len(model.calls) == 5
    first, second = model.calls[0][0], model.calls[1][0]
    assert first.type == "system" and first.text.startswith("You are a careful agent.")
    assert "<bpe-dashboard" in first.text and "api.rate_limit" not in first.text
    assert "api.rate_limit" in second.text and "5 requests/s" in second.text
    third = model.calls[2][0].text
    assert "1 done" in third and "[todo] fetch-data" not in third
    last = model.calls[4][0].text
    assert "sunny in Paris" in last  # the ordinary tool's result was observed
    assert model.bound_tools[0] == ["lookup", "track", "commit", "recall", "note"]  # the agent's tools, then the harness's


def _check_state(state: dict) -> None:
    bpe = BPEState.model_validate(state["bpe"])
    assert bpe.belief.facts["api.rate_limit"].value == "5 requests/s"
    assert bpe.progress.subgoals["fetch-data"].status == "done"
    assert bpe.belief.facts["tool:lookup:last"].value == "sunny in Paris"
    assert len(bpe.experience.noted) == 1
    assert state["messages"][-1].content == "All done."


def test_invoke_injects_tracked_fact_and_committed_subgoal(lookup_tool) -> None:
    agent, model, _ = _agent(lookup_tool)
    out = agent.invoke({"messages": [HumanMessage("Report the weather")]})
    _check_prompts(model)
    _check_state(out)


def test_ainvoke_matches_invoke(lookup_tool) -> None:
    agent, model, _ = _agent(lookup_tool)
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("Report the weather")]}))
    _check_prompts(model)
    _check_state(out)


def test_astream_matches_invoke(lookup_tool) -> None:
    agent, model, _ = _agent(lookup_tool)

    async def run() -> dict:
        last = {}
        async for chunk in agent.astream({"messages": [HumanMessage("Report the weather")]}, stream_mode="values"):
            last = chunk
        return last

    state = asyncio.run(run())
    _check_prompts(model)
    _check_state(state)


def test_goal_comes_from_first_user_message(lookup_tool) -> None:
    agent, model, _ = _agent(lookup_tool)
    agent.invoke({"messages": [HumanMessage("Report the weather in Paris")]})
    assert "GOAL: «Report the weather in Paris»" in model.calls[0][0].text


def test_malformed_meta_action_is_an_error_message_and_changes_nothing(lookup_tool) -> None:
    model = ScriptedChatModel(
        responses=[
            ai_tool_call("track", {"key": "k", "value": "v"}),
            ai_tool_call("commit", {"subgoal": "fetch data", "status": "finished!!"}),
            ai_tool_call("track", {"value": "no key"}),
            ai_tool_call("lookup", {"city": "Rome"}),
            "ok",
        ]
    )
    mw = BPEMiddleware(subgoals=["fetch data"])
    agent = create_agent(model, [lookup_tool], middleware=[mw])
    states = []
    for chunk in agent.stream({"messages": [HumanMessage("go")]}, stream_mode="values"):
        states.append(chunk)
    out = states[-1]
    errors = [m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert [m.name for m in errors] == ["commit", "track"]
    assert "status" in errors[0].text and "key" in errors[1].text
    # the model read both errors, and the run went on to the ordinary tool and the answer
    assert any("status" in str(m.content) for m in model.calls[2] if isinstance(m, ToolMessage))
    assert out["messages"][-1].content == "ok"
    bpe = BPEState.model_validate(out["bpe"])
    assert bpe.progress.subgoals["fetch-data"].status == "todo"
    assert list(bpe.belief.facts) == ["k", "tool:lookup:last"]
    # the state after the first error equals the state before it
    after_track = next(s["bpe"] for s in states if any(getattr(m, "name", None) == "track" for m in s["messages"]))
    after_error = next(s["bpe"] for s in states if any(getattr(m, "status", None) == "error" for m in s["messages"]))
    assert after_error == after_track


def test_parallel_meta_actions_in_one_turn_all_land(lookup_tool) -> None:
    turn = AIMessage(
        "",
        tool_calls=[
            {"name": "track", "args": {"key": "a", "value": "1"}, "id": "t1"},
            {"name": "track", "args": {"key": "b", "value": "2"}, "id": "t2"},
            {"name": "commit", "args": {"subgoal": "fetch data", "status": "doing"}, "id": "t3"},
            {"name": "lookup", "args": {"city": "Oslo"}, "id": "t4"},
        ],
    )
    model = ScriptedChatModel(responses=[turn, "done"])
    agent = create_agent(model, [lookup_tool], middleware=[BPEMiddleware(subgoals=["fetch data"])])
    out = agent.invoke({"messages": [HumanMessage("go")]})
    bpe = BPEState.model_validate(out["bpe"])
    assert {"a", "b", "tool:lookup:last"} <= set(bpe.belief.facts)
    assert bpe.progress.subgoals["fetch-data"].status == "doing"
    assert bpe.step == 4


def test_tool_error_message_reaches_belief_and_progress(lookup_tool) -> None:
    model = ScriptedChatModel(responses=[ai_tool_call("lookup", {"town": "Paris"}), ai_tool_call("lookup", {"city": "Rome"}), "ok"])
    agent = create_agent(model, [lookup_tool], middleware=[BPEMiddleware()])
    states = list(agent.stream({"messages": [HumanMessage("go")]}, stream_mode="values"))
    with_error = next(s for s in states if s.get("bpe", {}).get("progress", {}).get("exceptions"))
    assert "tool:lookup" in with_error["bpe"]["progress"]["exceptions"]
    assert "open exception" in model.calls[1][0].text.lower() or "tool:lookup" in model.calls[1][0].text
    final = BPEState.model_validate(states[-1]["bpe"])
    assert final.progress.exceptions == {}  # the later success resolved it


def test_raising_tool_is_observed_and_still_raises(lookup_tool) -> None:
    model = ScriptedChatModel(responses=[ai_tool_call("lookup", {"city": "Atlantis"}), "ok"])
    agent = create_agent(model, [lookup_tool], middleware=[BPEMiddleware()])
    with pytest.raises(ValueError, match="no such city"):
        agent.invoke({"messages": [HumanMessage("go")]})


def test_raising_tool_is_observed_in_async_runs(lookup_tool) -> None:
    from evoharness_bpe_langgraph import TraceCallbackHandler

    mw = BPEMiddleware()
    handler = TraceCallbackHandler(middleware=mw)
    agent = create_agent(ScriptedChatModel(responses=[ai_tool_call("lookup", {"city": "Atlantis"}), "ok"]), [lookup_tool], middleware=[mw])
    with pytest.raises(ValueError, match="no such city"):
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]}))
    (trace,) = handler.traces
    state = BPEState.model_validate(trace.metadata["bpe_state"])
    assert state.progress.exceptions["tool:lookup"].message == "ValueError: no such city"
    assert state.belief.facts["tool:lookup:error"].source == "lookup" and state.step == 1


@dataclass
class Ctx:
    user: str


def test_namespace_from_context_and_store_option(lookup_tool) -> None:
    store = MemoryExperienceStore()
    model = ScriptedChatModel(responses=[ai_tool_call("note", {"text": "Alice prefers metric units"}), "ok"])
    mw = BPEMiddleware(store=store, namespace=lambda rt: ("users", rt.context.user))
    agent = create_agent(model, [lookup_tool], middleware=[mw], context_schema=Ctx)
    agent.invoke({"messages": [HumanMessage("go")]}, context=Ctx(user="alice"))
    assert [e.text for e in store.list(("users", "alice"))] == ["Alice prefers metric units"]
    assert store.count(("default",)) == 0


def test_inject_off_and_budget(lookup_tool) -> None:
    agent, model, _ = _agent(lookup_tool, inject="off")
    agent.invoke({"messages": [HumanMessage("go")]})
    assert all("<bpe-dashboard" not in call[0].text for call in model.calls)
    agent, model, _ = _agent(lookup_tool, inject="summary")
    agent.invoke({"messages": [HumanMessage("go")]})
    assert "<bpe-dashboard" in model.calls[1][0].text and "NEXT:" in model.calls[1][0].text
    assert "BELIEFS" not in model.calls[1][0].text and "api.rate_limit" not in model.calls[1][0].text
    agent, model, _ = _agent(lookup_tool, dashboard_tokens=80)
    agent.invoke({"messages": [HumanMessage("go " * 200)]})
    from evoharness_bpe.text import approx_tokens

    for call in model.calls:
        dashboard = call[0].text.split("You are a careful agent.\n\n", 1)[1]
        assert approx_tokens(dashboard) <= 80


def test_window_keeps_recent_messages_and_first_user_turn(lookup_tool) -> None:
    script = [ai_tool_call("lookup", {"city": f"c{i}"}) for i in range(6)] + ["done"]
    model = ScriptedChatModel(responses=script)
    agent = create_agent(model, [lookup_tool], middleware=[BPEMiddleware(window=4)])
    agent.invoke({"messages": [HumanMessage("tour")]})
    last = model.calls[-1]
    assert last[1].content == "tour"
    assert len(last) <= 1 + 1 + 4 and last[2].type != "tool"


def test_finish_credits_recalled_lessons_in_background(lookup_tool) -> None:
    store = MemoryExperienceStore()
    store_ns = ("default",)
    from evoharness_bpe.experience import consolidate_note

    lesson = consolidate_note(store, store_ns, "Check the weather API rate limit first").entry
    model = ScriptedChatModel(responses=[ai_tool_call("recall", {"query": "weather rate limit"}), "done"])
    mw = BPEMiddleware(store=store, finish_in_background=True)
    agent = create_agent(model, [lookup_tool], middleware=[mw])
    out = agent.invoke({"messages": [HumanMessage("weather")]})
    mw.flush(timeout=10)
    credited = store.get(store_ns, lesson.id)
    assert credited is not None and credited.uses == 1 and credited.wins == 1
    assert out["bpe"]["experience"]["recalled"] == []  # a resumed thread will not credit it again


def test_bad_options_fail_early() -> None:
    with pytest.raises(UserError):
        BPEMiddleware(dashboard_tokens=5)
    with pytest.raises(UserError):
        BPEMiddleware(inject="loud")
    with pytest.raises(UserError):
        BPEMiddleware(namespace=("a/b",))
    with pytest.raises(UserError):
        BPEMiddleware(store=object())


def test_unparseable_meta_action_is_answered_and_the_run_continues(lookup_tool) -> None:
    broken = AIMessage("", invalid_tool_calls=[{"name": "track", "args": '{"key": "a", "value"', "id": "bad1", "error": "bad json", "type": "invalid_tool_call"}])
    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "k", "value": "v"}), broken, "recovered"])
    mw = BPEMiddleware()
    agent = create_agent(model, [lookup_tool], middleware=[mw])
    states = list(agent.stream({"messages": [HumanMessage("go")]}, stream_mode="values"))
    out = states[-1]
    error = next(m for m in out["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "bad1")
    assert error.status == "error" and "JSON" in error.text
    assert out["messages"][-1].content == "recovered" and len(model.calls) == 3
    assert list(out["bpe"]["belief"]["facts"]) == ["k"]
    assert mw.episode(out["bpe_run"]).ledger.summary().invalid_calls == 1
