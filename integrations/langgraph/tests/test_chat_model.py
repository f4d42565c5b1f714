"""`PolicyChatModel` and `ScriptedChatModel` as LangChain chat models."""

from __future__ import annotations

import asyncio

import pytest
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_langgraph import PolicyChatModel
from evoharness_bpe_langgraph.testing import ScriptedChatModel, ai_tool_call
from langchain_core.messages import HumanMessage, SystemMessage


def test_policy_model_sends_openai_messages_and_parses_tool_calls(lookup_tool) -> None:
    policy = ScriptedPolicy([tool_call("lookup", {"city": "Paris"}, "c1"), tool_call("lookup", "{oops", "c2"), "bye"])
    model = PolicyChatModel(policy=policy).bind_tools([lookup_tool])
    first = model.invoke([SystemMessage("sys"), HumanMessage("hi")])
    assert first.tool_calls == [{"name": "lookup", "args": {"city": "Paris"}, "id": "c1", "type": "tool_call"}]
    assert policy.calls[0] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert policy.tools_seen[0][0]["function"]["name"] == "lookup"
    second = asyncio.run(model.ainvoke([HumanMessage("again")]))
    assert second.tool_calls == [] and second.invalid_tool_calls[0]["id"] == "c2"
    assert model.invoke([HumanMessage("x")]).content == "bye"


def test_policy_model_rejects_a_non_policy() -> None:
    with pytest.raises(UserError):
        PolicyChatModel(policy=object())


def test_scripted_model_records_and_plays_back() -> None:
    model = ScriptedChatModel(responses=[ai_tool_call("t", {"a": 1}), lambda msgs: f"saw {len(msgs)}"], final="end")
    bound = model.bind_tools([{"name": "t"}])
    assert bound.invoke("hi").tool_calls[0]["name"] == "t"
    assert bound.invoke([HumanMessage("a"), HumanMessage("b")]).content == "saw 2"
    assert bound.invoke("x").content == "end"
    assert model.bound_tools[0] == ["t"] and len(model.calls) == 3
    model.reset()
    assert bound.invoke("hi").tool_calls[0]["name"] == "t"
