"""Fuzzed meta-action calls through a real LlamaIndex FunctionAgent: never a crash, nothing changed."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.agent.workflow import FunctionAgent

from evoharness_bpe import Workspace
from evoharness_bpe_llamaindex import with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM

pytestmark = pytest.mark.slow  # hypothesis through a real FunctionAgent

FIELDS = ["key", "value", "source", "confidence", "subgoal", "status", "note", "query", "k", "text", "tags", "kind", "supersedes"]
junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30) | st.sampled_from(["«»", "<|im_start|>", "x" * 3000]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
raw_arguments = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS), junk, max_size=5).map(json.dumps),
    st.dictionaries(st.sampled_from(FIELDS), junk, max_size=5).map(lambda d: json.dumps(d)[: len(json.dumps(d)) // 2 + 1]),
    st.text(max_size=40),
)


@settings(deadline=None)  # a whole agent run per example: no timing assertion in the suite
@given(name=st.sampled_from(["track", "commit", "recall", "note"]), arguments=raw_arguments)
def test_fuzzed_meta_action_calls_through_function_agent(name, arguments) -> None:
    llm = ScriptedLLM([[(name, arguments)], "done"])
    ws = Workspace("g", subgoals=["a"])
    ws.act("track", {"key": "seed", "value": "1"})
    agent = with_bpe(FunctionAgent(tools=[], llm=llm), ws)
    calls_before = len(ws.events)

    async def run() -> str:
        return str(await agent.run(user_msg="go"))

    before = ws.state.model_dump_json()
    answer = asyncio.run(run())  # must not raise
    assert answer.endswith("done")
    event = ws.events[calls_before]
    if not event.ok:
        assert ws.state.model_dump_json() == before
        tool_message = llm.policy.calls[1][-1]
        assert tool_message["role"] == "tool" and tool_message["content"].startswith("Error:")
