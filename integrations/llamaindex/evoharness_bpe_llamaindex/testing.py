"""Test doubles: a scripted function-calling LLM that records exactly what each call received.

>>> llm = ScriptedLLM([[("track", {"key": "k", "value": "v"})], "All done."])
>>> # agent = with_bpe(FunctionAgent(llm=llm, ...), ws); await agent.run("...")
>>> # llm.calls[1] is the list of ChatMessages the second model call received.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Union

from evoharness_bpe.lab.policy import ChatMessage as OpenAIMessage
from evoharness_bpe.testing.scripted import ScriptedPolicy
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.bridge.pydantic import PrivateAttr

from .llm import PolicyLLM

__all__ = ["ScriptedLLM", "Turn", "react_action", "react_answer"]

Turn = Union[str, OpenAIMessage, Sequence[tuple[str, Union[dict[str, Any], str]]], Callable[..., OpenAIMessage]]
"""A scripted reply: final text, an OpenAI assistant message, ``[(tool, arguments), ...]`` (tool
calls in one reply; arguments as a dict or raw text), or ``(messages, tools) -> message``."""


def _reply(turn: Turn, index: int) -> Any:
    if isinstance(turn, (str, dict)) or callable(turn):
        return turn
    calls = []
    for n, (name, args) in enumerate(turn):
        text = args if isinstance(args, str) else json.dumps(args)
        calls.append({"id": f"call_{index}_{n}", "type": "function", "function": {"name": name, "arguments": text}})
    return {"role": "assistant", "content": None, "tool_calls": calls}


class ScriptedLLM(PolicyLLM):
    """Plays back scripted replies (then `final`), recording the messages of every call.

    `calls[i]` is a deep copy of the `ChatMessage`s the i-th call received; `policy.calls[i]` is
    the same prompt in OpenAI format, and `policy.tools_seen[i]` the tools offered.
    """

    _calls: list[list[ChatMessage]] = PrivateAttr(default_factory=list)

    def __init__(self, script: Iterable[Turn], *, final: str = "Done.", **kwargs: Any) -> None:
        super().__init__(ScriptedPolicy([_reply(t, i) for i, t in enumerate(script)], final=final), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedLLM"

    @property
    def calls(self) -> list[list[ChatMessage]]:
        """The messages each call received, in order."""
        return self._calls

    def _respond(self, messages: Sequence[ChatMessage], tools: Sequence[Any]) -> ChatResponse:
        self._calls.append(copy.deepcopy(list(messages)))
        return super()._respond(messages, tools)


def react_action(tool: str, arguments: dict[str, Any], thought: str = "I should use a tool.") -> str:
    """A ReAct reply that calls `tool` with `arguments`."""
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def react_answer(answer: str, thought: str = "I can answer without using any more tools.") -> str:
    """A ReAct reply that ends the turn with `answer`."""
    return f"Thought: {thought}\nAnswer: {answer}"
