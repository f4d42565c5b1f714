"""BPE state lives in the workflow Context: saved and restored runs continue with it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from evoharness_bpe import Workspace
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent, ToolCall
from llama_index.core.workflow import Context, JsonSerializer
from workflows.context.serializers import PickleSerializer

GOAL = "Migrate the customer records"
SUBGOALS = ["batch 1", "batch 2"]
FIRST = [
    ("track", {"key": "api.rate_limit", "value": "5 requests/s"}),
    ("commit", {"subgoal": "batch 1", "status": "done"}),
]


def dashboard_of(llm: ScriptedLLM, call: int) -> str:
    (system,) = [m.content or "" for m in llm.calls[call] if m.role.value == "system"]
    return system


def test_state_is_json_in_the_context_store() -> None:
    ws = Workspace(GOAL, subgoals=SUBGOALS)
    agent = with_bpe(FunctionAgent(tools=[], llm=ScriptedLLM([FIRST, "ok"])), ws)

    async def go() -> Any:
        ctx = Context(agent)
        await agent.run(user_msg="start", ctx=ctx)
        return await ctx.store.get("bpe_state")

    data = asyncio.run(go())
    assert json.loads(data)["belief"]["facts"]["api.rate_limit"]["value"] == "5 requests/s"


@pytest.mark.filterwarnings("ignore:Skipping serialization of known unserializable key")
def test_completed_run_restored_from_json_continues_with_the_same_state() -> None:
    async def first() -> str:
        agent = with_bpe(FunctionAgent(tools=[], llm=ScriptedLLM([FIRST, "batch 1 done"])), Workspace(GOAL, subgoals=SUBGOALS))
        ctx = Context(agent)
        await agent.run(user_msg="start", ctx=ctx)
        return json.dumps(ctx.to_dict(serializer=JsonSerializer()))

    saved = asyncio.run(first())

    # another process: a new agent and a new, empty workspace for the same task
    llm = ScriptedLLM([[("commit", {"subgoal": "batch 2", "status": "doing"})], "working on batch 2"])
    ws = Workspace(GOAL, subgoals=SUBGOALS)
    agent = with_bpe(FunctionAgent(tools=[], llm=llm), ws)

    async def second() -> None:
        ctx = Context.from_dict(agent, json.loads(saved), serializer=JsonSerializer())
        await agent.run(user_msg="continue", ctx=ctx)

    asyncio.run(second())
    first_view = dashboard_of(llm, 0)
    assert "api.rate_limit" in first_view and "5 requests/s" in first_view
    assert "1 done" in first_view
    assert ws.state.belief.facts["api.rate_limit"].value == "5 requests/s"
    assert ws.state.progress.subgoals["batch-1"].status == "done"
    assert ws.state.progress.subgoals["batch-2"].status == "doing"


def test_context_saved_mid_run_resumes_with_the_same_state() -> None:
    gate_open = False

    async def upload(batch: int) -> str:
        """Upload one batch (waits for approval in the first process)."""
        while not gate_open:
            await asyncio.sleep(0.01)
        return f"batch {batch} uploaded"

    llm_a = ScriptedLLM([FIRST, [("upload", {"batch": 2})], "unreachable"])
    agent_a = with_bpe(FunctionAgent(tools=[upload], llm=llm_a), Workspace(GOAL, subgoals=SUBGOALS))

    async def first() -> str:
        handler = agent_a.run(user_msg="start")
        snapshot = None
        async for event in handler.stream_events():
            if isinstance(event, ToolCall) and event.tool_name == "upload":
                snapshot = json.dumps(handler.ctx.to_dict(serializer=PickleSerializer()))
                await handler.cancel_run()
                break
        try:
            await handler
        except Exception:
            pass  # cancelled on purpose
        assert snapshot is not None
        return snapshot

    saved = asyncio.run(first())
    assert len(llm_a.calls) == 2  # stopped inside the run, before a third model call

    gate_open = True
    llm_b = ScriptedLLM([[("commit", {"subgoal": "batch 2", "status": "done"})], "all uploaded"])
    ws_b = Workspace(GOAL, subgoals=SUBGOALS)
    agent_b = with_bpe(FunctionAgent(tools=[upload], llm=llm_b), ws_b)

    async def resume() -> Any:
        ctx = Context.from_dict(agent_b, json.loads(saved), serializer=PickleSerializer())
        return await agent_b.run(ctx=ctx)

    result = asyncio.run(resume())
    assert "all uploaded" in str(result)
    first_view = dashboard_of(llm_b, 0)
    assert "api.rate_limit" in first_view and "batch 2 uploaded" in first_view
    assert ws_b.state.belief.facts["api.rate_limit"].value == "5 requests/s"
    assert ws_b.state.progress.subgoals["batch-1"].status == "done"
    assert ws_b.state.progress.subgoals["batch-2"].status == "done"


def test_parallel_meta_actions_of_one_step_all_reach_the_context() -> None:
    calls = [("track", {"key": f"fact.{i}", "value": str(i)}) for i in range(6)]
    ws = Workspace(GOAL, subgoals=SUBGOALS)
    agent = with_bpe(FunctionAgent(tools=[], llm=ScriptedLLM([calls, "ok"])), ws)

    async def go() -> Any:
        ctx = Context(agent)
        await agent.run(user_msg="start", ctx=ctx)
        return json.loads(await ctx.store.get("bpe_state"))

    facts = asyncio.run(go())["belief"]["facts"]
    assert sorted(facts) == [f"fact.{i}" for i in range(6)]
    assert sorted(ws.state.belief.facts) == sorted(facts)
