"""An oversized meta-action call through `create_agent` leaves a bounded trace line."""

from __future__ import annotations

import json

import pytest
from evoharness_bpe.actions import MAX_ARGUMENT_CHARS
from evoharness_bpe.testing.hostile import nested_arguments, oversized
from evoharness_bpe_langgraph import BPEMiddleware, TraceCallbackHandler
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage


@pytest.mark.parametrize("args", [oversized("dict-string", 1_000_000), oversized("dict-keys", 400_000),
                                  nested_arguments("in-field", 150)], ids=["1MB-fields", "50k-keys", "nested"])
def test_the_trace_line_is_bounded(args, tmp_path) -> None:
    call = AIMessage("", tool_calls=[{"name": "note", "args": args, "id": "big", "type": "tool_call"}])
    model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "seed", "value": "1"}), call, "done"])
    mw = BPEMiddleware(subgoals=["a"])
    path = tmp_path / "trace.jsonl"
    create_agent(model, [], middleware=[mw]).invoke({"messages": [HumanMessage("go")]},
                                                     {"callbacks": [TraceCallbackHandler(path, middleware=mw)]})
    line = path.read_text()
    assert len(line) < 6 * MAX_ARGUMENT_CHARS
    trace = json.loads(line)
    recorded = [c["function"]["arguments"] for m in trace["messages"] for c in m.get("tool_calls") or [] if c["function"]["name"] == "note"]
    assert recorded and all(len(a) <= 2_100 for a in recorded)
