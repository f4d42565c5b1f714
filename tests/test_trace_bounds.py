"""Traces record oversized meta-action calls cut, as their events are; other tool calls whole."""

from __future__ import annotations

import json

from evoharness_bpe import ModelCall, Trace
from evoharness_bpe.actions import MAX_ARGUMENT_CHARS
from evoharness_bpe.testing.hostile import nested, oversized


def _call(name: str, arguments: object) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}


def test_oversized_meta_action_arguments_are_cut_in_messages_and_prompts() -> None:
    big = json.dumps(oversized("dict-string", 200_000))
    message = _call("note", big)
    trace = Trace(messages=[message], model_calls=[ModelCall(messages=[message], response=message)])
    line = trace.model_dump_json()
    assert len(line) < 4 * 2_100 + 2_000
    recorded = trace.messages[0]["tool_calls"][0]["function"]["arguments"]
    assert recorded.startswith(big[:100]) and f"[cut: {len(big)} characters]" in recorded
    assert trace.model_calls[0].response["tool_calls"][0]["function"]["arguments"] == recorded
    assert message["tool_calls"][0]["function"]["arguments"] == big      # the caller's message is left alone
    deep = Trace(messages=[_call("track", nested(5_000))])
    assert "not recorded" in deep.messages[0]["tool_calls"][0]["function"]["arguments"]


def test_calls_within_the_limit_and_other_tools_are_recorded_whole() -> None:
    ok = json.dumps({"text": "x" * (MAX_ARGUMENT_CHARS - 20)})
    own_tool = json.dumps({"content": "y" * 100_000})
    trace = Trace(messages=[_call("note", ok), _call("write_file", own_tool), _call("note", {"text": "a dict"})])
    assert [m["tool_calls"][0]["function"]["arguments"] for m in trace.messages] == [ok, own_tool, {"text": "a dict"}]
    assert Trace.model_validate_json(trace.model_dump_json()) == trace
