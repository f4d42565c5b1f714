"""LlamaIndex and LangGraph agents share experience, and their traces of one episode match.

Needs the LangGraph integration (installed by the root requirements-dev.txt).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe import SQLiteExperienceStore, Trace, Workspace
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.runner import run_episode as llamaindex_episode
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent

from evoharness_bpe_langgraph import BPEMiddleware
from evoharness_bpe_langgraph.runner import run_episode as langgraph_episode
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage

NAMESPACE = ("acme", "crm-agent")
FROM_LLAMAINDEX = "The CRM API answers 429 above 5 requests per second: wait for retry-after"
FROM_LANGGRAPH = "CRM exports time out above 10000 rows: export in pages of 5000"


def langgraph_run(store: SQLiteExperienceStore, script: list[Any], task: str) -> tuple[dict[str, Any], ScriptedChatModel]:
    model = ScriptedChatModel(responses=script)
    agent = create_agent(model, [], middleware=[BPEMiddleware(store=store, namespace=NAMESPACE)])
    return agent.invoke({"messages": [HumanMessage(task)]}), model


def llamaindex_run(store: SQLiteExperienceStore, script: list[Any], task: str) -> tuple[Workspace, ScriptedLLM]:
    llm = ScriptedLLM(script)
    ws = Workspace(task, store=store, namespace=NAMESPACE)
    agent = with_bpe(FunctionAgent(tools=[], llm=llm), ws)

    async def go() -> None:
        await agent.run(user_msg=task)

    asyncio.run(go())
    return ws, llm


def test_experience_flows_both_ways_through_one_store_file(tmp_path: Path) -> None:
    db = tmp_path / "experience.db"
    with_llamaindex = SQLiteExperienceStore(db)
    with_langgraph = SQLiteExperienceStore(db)  # its own connection, as another process would have
    try:
        llamaindex_run(with_llamaindex, [[("note", {"text": FROM_LLAMAINDEX, "kind": "pitfall"})], "noted"], "Upload batches")
        out, model = langgraph_run(
            with_langgraph, [ai_tool_call("recall", {"query": "CRM rate limit 429"}), "ok"], "Upload invoices to the CRM"
        )
        recalled = next(m.text for m in out["messages"] if isinstance(m, ToolMessage) and m.name == "recall")
        assert FROM_LLAMAINDEX in recalled
        assert "retry-after" in model.calls[0][0].text  # and shown as a hint before the first call

        langgraph_run(with_langgraph, [ai_tool_call("note", {"text": FROM_LANGGRAPH}), "noted"], "Export contacts")
        ws, llm = llamaindex_run(with_llamaindex, [[("recall", {"query": "CRM export rows timeout"})], "ok"], "Export the CRM contacts")
        assert FROM_LANGGRAPH in ws.events[0].content
        assert "pages of 5000" in (llm.calls[0][0].content or "")
    finally:
        with_llamaindex.close()
        with_langgraph.close()


def episode_script(harness: str) -> ScriptedPolicy:
    """A refused environment call, meta-actions (with BPE), parallel calls in one reply, success."""
    press = {"id": "c2", "type": "function", "function": {"name": "press", "arguments": '{"times": 1}'}}
    commit = {"id": "c3", "type": "function", "function": {"name": "commit", "arguments": '{"subgoal": "press", "status": "doing"}'}}
    meta = harness == "bpe"
    return ScriptedPolicy(
        [
            tool_call("press", {"times": "two"}, call_id="c0"),
            tool_call("track", {"key": "counter", "value": "0"}, call_id="c1") if meta else tool_call("press", {"count": 1}, call_id="c1"),
            {"role": "assistant", "content": None, "tool_calls": [press, commit] if meta else [press]},
            tool_call("press", {"times": 2}, call_id="c4"),
        ]
    )


def conversation(trace: Trace) -> list[Any]:
    """What training reads from a trace: no system prompt (each runner has its own), and an
    empty assistant content read as none (LangGraph writes "", LlamaIndex null)."""
    out = []
    for m in trace.messages:
        if m["role"] == "system":
            continue
        calls = [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in m.get("tool_calls") or []]
        out.append((m["role"], m.get("tool_call_id"), calls, m.get("content") or None))
    return out


@pytest.mark.parametrize("harness", ["none", "bpe"])
def test_the_same_episode_gives_interchangeable_traces(harness: str, counter_env: type) -> None:
    config = EpisodeConfig(harness=harness)
    lg_policy, li_policy = episode_script(harness), episode_script(harness)
    lg = langgraph_episode(counter_env(), lg_policy, None, config)
    li = llamaindex_episode(counter_env(), li_policy, None, config)

    assert (li.framework, lg.framework) == ("llamaindex", "langgraph")
    assert conversation(li) == conversation(lg)
    assert li.outcome.success == lg.outcome.success is True
    for key in ("steps", "invalid_actions"):
        assert li.outcome.info[key] == lg.outcome.info[key]
    assert len(li.model_calls) == len(lg.model_calls) == len(li_policy.calls) == len(lg_policy.calls)
    for a, b in zip(li.model_calls, lg.model_calls, strict=True):
        assert [m["role"] for m in a.messages] == [m["role"] for m in b.messages]
        assert {**a.response, "content": a.response.get("content") or None} == {**b.response, "content": b.response.get("content") or None}
    assert sorted(t["function"]["name"] for t in li.tools) == sorted(t["function"]["name"] for t in lg.tools)
    if harness == "bpe":
        assert [(e.name, e.ok, e.tool_call_id) for e in li.meta_actions] == [(e.name, e.ok, e.tool_call_id) for e in lg.meta_actions]
        assert len(li.dashboards) == len(lg.dashboards) == len(li.model_calls)
