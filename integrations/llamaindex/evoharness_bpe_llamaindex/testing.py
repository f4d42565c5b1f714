"""Test doubles: a scripted function-calling LLM that records exactly what each call received.

>>> llm = ScriptedLLM([[("track", {"key": "k", "value": "v"})], "All done."])
>>> # agent = with_bpe(FunctionAgent(llm=llm, ...), ws); await agent.run("...")
>>> # llm.calls[1] is the list of ChatMessages the second model call received.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Union

from evoharness_bpe.lab.policy import ChatMessage as OpenAIMessage
from evoharness_bpe.testing.scripted import ScriptedPolicy
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.bridge.pydantic import PrivateAttr

from .llm import PolicyLLM

__all__ = ["ScriptedLLM", "TaskScriptedLLM", "Turn", "react_action", "react_answer"]

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


def _is_tool_result(message: OpenAIMessage) -> bool:
    # A ReAct agent returns tool results as "Observation: ..." user messages.
    content = message.get("content")
    return message.get("role") == "tool" or (
        message.get("role") == "user" and isinstance(content, str) and content.startswith("Observation:")
    )


class _TaskPolicy:
    def __init__(self, scripts: Mapping[str, Sequence[Turn]], delay: float) -> None:
        if not scripts or any(not turns for turns in scripts.values()):
            raise ValueError("give every task key a non-empty script")
        self.scripts = {key: [_reply(t, i) for i, t in enumerate(turns)] for key, turns in scripts.items()}
        self.delay = delay
        self.calls: list[list[OpenAIMessage]] = []
        self._lock = threading.Lock()

    def complete(self, messages: list[OpenAIMessage], tools: list[dict[str, Any]]) -> OpenAIMessage:
        with self._lock:
            self.calls.append(copy.deepcopy(messages))
        if self.delay:
            time.sleep(self.delay)  # a worker thread: concurrent runs interleave here
        user = next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")
        key = next((k for k in self.scripts if k in user), None)
        if key is None:
            raise ValueError(f"no script for a run whose user message is {user!r}")
        script = self.scripts[key]
        step = sum(1 for m in messages if _is_tool_result(m))
        turn = script[min(step, len(script) - 1)]
        if callable(turn):
            return turn(messages, tools)
        reply = copy.deepcopy(turn)
        return reply if isinstance(reply, dict) else {"role": "assistant", "content": reply}


class TaskScriptedLLM(PolicyLLM):
    """One script per task, picked by a key found in the run's first user message.

    The reply is the script's turn number *n*, where *n* is the number of tool results in the
    prompt (``tool`` messages, or a ReAct agent's "Observation:" messages), so runs of different tasks can share one LLM — back to back or concurrently —
    without taking each other's turns. `delay` seconds are spent in a worker thread per call.
    `policy.calls` holds every prompt in OpenAI format.

    >>> llm = TaskScriptedLLM({"Paris": [[("track", {"key": "k", "value": "v"})], "Sunny."]})
    """

    def __init__(self, scripts: Mapping[str, Sequence[Turn]], *, delay: float = 0.0, **kwargs: Any) -> None:
        super().__init__(_TaskPolicy(scripts, delay), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "TaskScriptedLLM"


def react_action(tool: str, arguments: dict[str, Any], thought: str = "I should use a tool.") -> str:
    """A ReAct reply that calls `tool` with `arguments`."""
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(arguments)}"


def react_answer(answer: str, thought: str = "I can answer without using any more tools.") -> str:
    """A ReAct reply that ends the turn with `answer`."""
    return f"Thought: {thought}\nAnswer: {answer}"
