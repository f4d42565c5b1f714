"""Meta-action tools: real schemas, context-aware, malformed arguments answered as errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from evoharness_bpe import Workspace
from evoharness_bpe_llamaindex import meta_action_tools, with_bpe
from evoharness_bpe_llamaindex.testing import ScriptedLLM
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult


def test_tools_carry_the_workspace_schemas_and_take_the_context() -> None:
    ws = Workspace("g", subgoals=["a"])
    tools = meta_action_tools(ws)
    assert [t.metadata.name for t in tools] == ["track", "commit", "recall", "note"]
    for tool, spec in zip(tools, ws.tools, strict=True):
        assert tool.requires_context and tool.ctx_param_name == "ctx"
        assert tool.metadata.to_openai_tool() == spec.openai()


MALFORMED: list[tuple[str, Any]] = [
    ("commit", {"subgoal": "a", "status": "finished"}),  # not a status
    ("commit", {"subgoal": "zzz-unknown", "status": "bogus", "extra": 1}),  # unknown field too
    ("track", {"key": "", "value": "v"}),  # empty key
    ("track", {"value": "v"}),  # missing key
    ("track", '{"key": "k", "value": '),  # torn JSON from the model
    ("note", "[1, 2]"),  # JSON, but not an object
    ("recall", {"query": "x", "k": "three"}),  # wrong type (FunctionTool itself would accept it)
]


@pytest.mark.parametrize(("name", "args"), MALFORMED)
def test_malformed_meta_action_reaches_the_model_as_an_error_and_changes_nothing(name: str, args: Any) -> None:
    llm = ScriptedLLM([[(name, args)], "gave up"])
    ws = Workspace("g", subgoals=["a"])
    before = ws.state.model_dump_json()
    agent = with_bpe(FunctionAgent(tools=[], llm=llm), ws)
    results: list[ToolCallResult] = []

    async def go() -> None:
        handler = agent.run(user_msg="go")
        async for event in handler.stream_events():
            if isinstance(event, ToolCallResult):
                results.append(event)
        await handler

    asyncio.run(go())
    (result,) = results
    assert result.tool_output.is_error
    assert result.tool_output.content.startswith("Error:")
    tool_message = llm.policy.calls[1][-1]  # what the model read next, in OpenAI format
    assert tool_message["role"] == "tool" and tool_message["content"] == result.tool_output.content
    assert tool_message["tool_call_id"] == "call_0_0"
    assert ws.state.model_dump_json() == before
    (event,) = ws.events
    assert not event.ok and event.tool_call_id == "call_0_0"
    # the event keeps the raw argument text the model sent (the scripted model sends JSON)
    assert event.arguments == (args if isinstance(args, str) else json.dumps(args))
    assert event.name == name
    assert ws.ledger.summary().invalid_calls == 1
