"""Oversized and deeply nested meta-action arguments through a real `FunctionAgent` (per-run `with_bpe`).

The same builders as the core's and the LangGraph campaign (`evoharness_bpe.testing.hostile`):
no exception escapes the run, the model reads a short error, Belief/Progress in the run's
context are unchanged, the recorded event and the trace line stay bounded.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe import BPEState, MemoryExperienceStore
from evoharness_bpe.actions import MAX_ARGUMENT_CHARS, MAX_ARGUMENT_DEPTH
from evoharness_bpe.testing.hostile import OVERSIZED_KINDS, nested_arguments, oversized
from evoharness_bpe_llamaindex import BPETraceHandler, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context

MAX_LINE = 6 * MAX_ARGUMENT_CHARS  # a three-call run: the prompt copies of a call are cut at the argument limit

hostile = st.one_of(
    st.tuples(st.sampled_from(OVERSIZED_KINDS), st.integers(20_001, 1_000_000)).map(lambda p: oversized(*p)),
    # as objects while json.dumps can write them; deeper ones arrive as the model's raw text
    st.tuples(st.sampled_from(["top", "in-field"]), st.integers(MAX_ARGUMENT_DEPTH + 1, 150)).map(lambda p: nested_arguments(*p)),
    st.integers(MAX_ARGUMENT_DEPTH + 1, 9_000).map(lambda n: nested_arguments("json-string", n)),
    st.just(nested_arguments("json-string", 10_000)),
)


def _run(name: str, args: Any, trace_path: Path) -> tuple[str, ScriptedLLM, list[BPEState], Any]:
    llm = ScriptedLLM([[("track", {"key": "seed", "value": "1"})], [(name, args)], "done"])
    trace_path.write_text("")
    agent = with_bpe(FunctionAgent(tools=[], llm=llm), store=MemoryExperienceStore(), subgoals=["a"],
                     trace=BPETraceHandler(trace_path))
    states: list[BPEState] = []

    async def run() -> str:
        ctx = Context(agent)
        handler = agent.run(user_msg="go", ctx=ctx)
        async for event in handler.stream_events():
            if type(event).__name__ == "ToolCallResult":  # the state after each tool call
                states.append(BPEState.model_validate_json(await ctx.store.get("bpe_state")))
        return str(await handler)

    answer = asyncio.run(run())
    return answer, llm, states, json.loads(trace_path.read_text())


@settings(max_examples=max(20, settings.default.max_examples // 20), deadline=None,  # 500 in the campaign
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(name=st.sampled_from(["track", "commit", "recall", "note"]), args=hostile)
def test_oversized_and_nested_calls_through_function_agent(name: str, args: Any, tmp_path: Path) -> None:
    answer, llm, states, trace = _run(name, args, tmp_path / "trace.jsonl")  # must not raise
    assert answer.endswith("done")
    reply = [m for m in llm.policy.calls[2] if m["role"] == "tool"][-1]
    assert reply["content"].startswith("Error: ") and len(reply["content"]) < 2_000
    seeded, after = states
    assert after == seeded and "seed" in seeded.belief.facts
    event = trace["meta_actions"][-1]
    assert event["name"] == name and event["ok"] is False and len(event["arguments"]) <= 2_100
    assert len((tmp_path / "trace.jsonl").read_text()) < MAX_LINE


@pytest.mark.parametrize(("args", "says"), [
    (nested_arguments("json-string", 9_990), "nested deeper than"),       # JSON's own parser recurses: RecursionError
    (nested_arguments("json-string", 10_000), "characters long"),
])
def test_ten_thousand_levels_as_raw_text(args: str, says: str, tmp_path: Path) -> None:
    answer, llm, states, _ = _run("note", args, tmp_path / "t.jsonl")
    assert answer.endswith("done") and states[0] == states[1]
    assert says in [m for m in llm.policy.calls[2] if m["role"] == "tool"][-1]["content"]
