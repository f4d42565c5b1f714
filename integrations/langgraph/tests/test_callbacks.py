"""`TraceCallbackHandler` writes core traces that read back with `read_traces`."""

from __future__ import annotations

import asyncio

from evoharness_bpe import read_traces
from evoharness_bpe_langgraph import BPEMiddleware, TraceCallbackHandler
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver


def _script():
    return [
        ai_tool_call("track", {"key": "order", "value": "#991"}),
        ai_tool_call("commit", {"subgoal": "nope", "status": "sideways"}),
        ai_tool_call("lookup", {"city": "Berlin"}),
        "Shipped.",
    ]


def test_traces_hold_injected_dashboard_calls_and_costs(tmp_path, lookup_tool) -> None:
    path = tmp_path / "traces.jsonl"
    mw = BPEMiddleware(subgoals=["ship order"])
    handler = TraceCallbackHandler(path, middleware=mw, metadata={"suite": "test"})
    model = ScriptedChatModel(responses=_script())
    agent = create_agent(model, [lookup_tool], system_prompt="Ship it.", middleware=[mw], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Ship order 991")]}, {"configurable": {"thread_id": "A"}, "callbacks": [handler]})
    model.reset()
    asyncio.run(
        agent.ainvoke({"messages": [HumanMessage("again")]}, {"configurable": {"thread_id": "B"}, "callbacks": [handler]})
    )

    async def stream() -> None:
        async for _ in agent.astream({"messages": [HumanMessage("stream")]}, {"configurable": {"thread_id": "C"}, "callbacks": [handler]}):
            pass

    model.reset()
    asyncio.run(stream())
    handler.writer.close()

    traces = list(read_traces(path))
    assert [t.metadata["thread_id"] for t in traces] == ["A", "B", "C"]
    assert all(len(t.model_calls) == 4 and len(t.dashboards) == 4 for t in traces[1:])
    trace = traces[0]
    assert trace.framework == "langgraph" and trace.task == "Ship order 991"
    assert len(trace.model_calls) == 4
    system = trace.model_calls[1].messages[0]
    assert system["role"] == "system" and system["content"].startswith("Ship it.\n\n<bpe-dashboard")
    assert "#991" in system["content"]
    assert trace.model_calls[0].response["tool_calls"][0]["function"]["name"] == "track"
    assert trace.model_calls[0].prompt_tokens > 0
    assert [d.text for d in trace.dashboards] == [c.messages[0]["content"].split("\n\n", 1)[1] for c in trace.model_calls]
    assert [(e.name, e.ok) for e in trace.meta_actions] == [("track", True), ("commit", False)]
    assert trace.meta_actions[0].cost.tokens_in > 0
    assert trace.ledger is not None and trace.ledger.meta_action_calls == 2 and trace.ledger.invalid_calls == 1
    roles = [m["role"] for m in trace.messages]
    assert roles[:3] == ["system", "user", "assistant"] and roles.count("tool") == 3
    assert trace.outcome.success is False  # the subgoal was never committed done
    assert trace.metadata["suite"] == "test" and trace.metadata["bpe_state"]["belief"]["facts"]["order"]["value"] == "#991"


def test_failed_run_is_recorded_as_failure(tmp_path, lookup_tool) -> None:
    handler = TraceCallbackHandler(tmp_path / "t.jsonl")
    agent = create_agent(ScriptedChatModel(responses=[ai_tool_call("lookup", {"city": "Atlantis"})]), [lookup_tool], middleware=[BPEMiddleware()])
    try:
        agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]})
    except ValueError:
        pass
    (trace,) = list(read_traces(tmp_path / "t.jsonl"))
    assert trace.outcome.success is False and "no such city" in trace.outcome.info["error"]
    assert trace.dashboards and trace.dashboards[0].text.startswith("<bpe-dashboard")


def test_a_raising_tool_is_observed_in_the_failed_runs_trace(tmp_path, lookup_tool) -> None:
    """The tool's exception propagates; the trace keeps the workspace that observed it."""
    mw = BPEMiddleware()
    handler = TraceCallbackHandler(tmp_path / "t.jsonl", middleware=mw)
    script = [ai_tool_call("track", {"key": "city", "value": "Atlantis"}), ai_tool_call("lookup", {"city": "Atlantis"})]
    agent = create_agent(ScriptedChatModel(responses=script), [lookup_tool], middleware=[mw])
    try:
        agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [handler]})
    except ValueError as exc:
        assert "no such city" in str(exc)
    else:
        raise AssertionError("the tool's ValueError must propagate")
    (trace,) = list(read_traces(tmp_path / "t.jsonl"))
    assert trace.outcome.success is False and "no such city" in trace.outcome.info["error"]
    bpe = trace.metadata["bpe_state"]
    assert bpe["progress"]["exceptions"]["tool:lookup"]["message"] == "ValueError: no such city"
    assert bpe["belief"]["facts"]["tool:lookup:error"]["value"] == "ValueError: no such city"
    assert bpe["belief"]["facts"]["city"]["value"] == "Atlantis"  # the state before the tool, kept
    assert [e.name for e in trace.meta_actions] == ["track"] and trace.ledger is not None
    assert mw.adapter._logs == {}  # the failed run's log was handed to the trace, not leaked


def test_invalid_json_tool_call_keeps_its_call_in_the_trace() -> None:
    from langchain_core.messages import AIMessage, ToolMessage

    from evoharness_bpe_langgraph.callbacks import to_openai

    broken = AIMessage("", invalid_tool_calls=[{"name": "track", "args": '{"key": ', "id": "c9", "error": "bad json", "type": "invalid_tool_call"}])
    answer = ToolMessage("Error: arguments are not valid JSON", tool_call_id="c9", status="error")
    assistant, tool = to_openai([broken, answer])
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [{"id": "c9", "type": "function", "function": {"name": "track", "arguments": '{"key": '}}]
    assert tool["tool_call_id"] == "c9"
