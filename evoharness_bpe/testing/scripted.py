"""`ScriptedPolicy`: a policy that plays back prepared assistant messages (for tests and demos)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from ..lab.policy import ChatMessage

__all__ = ["ScriptedPolicy", "tool_call"]


def tool_call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> ChatMessage:
    """An assistant message with one tool call (arguments given as a dict or a raw string)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id or f"call_{name}", "type": "function", "function": {"name": name, "arguments": args}}],
    }


class ScriptedPolicy:
    """Returns the scripted replies in order, then a final text answer; records what it saw.

    Each script item is an assistant message, a plain string (a final answer), or a callable
    ``(messages, tools) -> message`` for replies that depend on the conversation.
    """

    def __init__(self, script: Iterable[ChatMessage | str | Callable[[list[ChatMessage], list[dict[str, Any]]], ChatMessage]], *, final: str = "Done.") -> None:
        self.script = list(script)
        self.final = final
        self.calls: list[list[ChatMessage]] = []
        self.tools_seen: list[list[dict[str, Any]]] = []

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        self.calls.append(copy.deepcopy(messages))
        self.tools_seen.append(copy.deepcopy(tools))
        index = len(self.calls) - 1
        if index >= len(self.script):
            return {"role": "assistant", "content": self.final}
        item = self.script[index]
        if callable(item):
            item = item(messages, tools)
        if isinstance(item, str):
            return {"role": "assistant", "content": item}
        reply = copy.deepcopy(item)
        for n, call in enumerate(reply.get("tool_calls") or []):
            call.setdefault("id", f"call_{index}_{n}")
            call.setdefault("type", "function")
        return reply
