"""PolicyLLM: a core Policy as a LlamaIndex function-calling LLM; the scripted test double."""

from __future__ import annotations

import asyncio
import json

import pytest
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_llamaindex import PolicyLLM
from evoharness_bpe_llamaindex.messages import RAW_ARGUMENTS, from_openai_message, to_openai_message
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms import ChatMessage


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_policy_drives_a_function_agent_and_sees_openai_messages() -> None:
    policy = ScriptedPolicy([tool_call("add", {"a": 2, "b": 3}, call_id="c1"), "The sum is 5."])
    agent = FunctionAgent(tools=[add], llm=PolicyLLM(policy), system_prompt="Do sums.")

    async def go() -> object:
        return await agent.run(user_msg="2+3?")

    assert str(asyncio.run(go())) == "The sum is 5."
    first, second = policy.calls
    assert first == [{"role": "system", "content": "Do sums."}, {"role": "user", "content": "2+3?"}]
    assert second[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}],
    }
    assert second[3] == {"role": "tool", "tool_call_id": "c1", "content": "5"}
    (spec,) = policy.tools_seen[0]
    assert spec["function"]["name"] == "add" and spec["function"]["parameters"]["required"] == ["a", "b"]


def test_arguments_keep_raw_text_and_non_objects_travel_whole() -> None:
    llm = PolicyLLM(ScriptedPolicy([tool_call("add", '{"a": 1, "b": 2}'), tool_call("add", "{torn")]))
    for expected in ({"a": 1, "b": 2}, {RAW_ARGUMENTS: "{torn"}):
        response = llm.chat([ChatMessage(role="user", content="x")])
        (selection,) = llm.get_tool_calls_from_response(response)
        assert selection.tool_kwargs == expected
    with pytest.raises(ValueError, match="expected at least one tool call"):
        llm.get_tool_calls_from_response(llm.chat([ChatMessage(role="user", content="x")]))


def test_messages_round_trip_in_openai_format() -> None:
    message = {
        "role": "assistant",
        "content": "thinking",
        "tool_calls": [{"id": "c9", "type": "function", "function": {"name": "f", "arguments": '{"x": [1]}'}}],
    }
    assert to_openai_message(from_openai_message(message)) == message
    tool = {"role": "tool", "tool_call_id": "c9", "content": "ok"}
    assert to_openai_message(from_openai_message(tool)) == tool
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"x": [1]}


def test_completion_and_streaming_paths() -> None:
    llm = ScriptedLLM(["one", "two", "three"])
    assert llm.complete("hi").text == "one"
    assert [r.message.content for r in llm.stream_chat([ChatMessage(role="user", content="x")])] == ["two"]

    async def go() -> str:
        gen = await llm.astream_complete("x")
        return "".join([r.text async for r in gen])

    assert asyncio.run(go()) == "three"
    assert len(llm.calls) == 3 and llm.metadata.is_function_calling_model


def test_policy_must_be_a_policy() -> None:
    with pytest.raises(UserError, match="complete"):
        PolicyLLM(object())  # type: ignore[arg-type]
