"""`ScriptedChatModel`: a chat model that plays back prepared replies, for tests and offline demos.

>>> model = ScriptedChatModel(responses=[ai_tool_call("track", {"key": "k", "value": "v"}), "Done."])
>>> model.invoke("hi").tool_calls[0]["name"]
'track'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

__all__ = ["ScriptedChatModel", "ai_tool_call", "Reply"]

Reply = AIMessage | str | Callable[[list[BaseMessage]], AIMessage | str]
"""A scripted reply: a message, a final text, or a function of the messages the model was sent."""


def ai_tool_call(name: str, args: dict[str, Any], call_id: str | None = None, *, content: str = "") -> AIMessage:
    """An assistant message with one tool call."""
    return AIMessage(content, tool_calls=[{"name": name, "args": args, "id": call_id or f"call_{name}", "type": "tool_call"}])


class ScriptedChatModel(BaseChatModel):
    """Plays back `responses` in order, then `final`; records every prompt and bound tool list.

    `bind_tools` works (the tool names are recorded in `bound_tools`), so it drives
    `create_agent` and `ToolNode` graphs. `calls[i]` is exactly what call *i* was sent,
    system message included.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    responses: list[Any] = Field(default_factory=list)
    final: str = "Done."
    calls: list[list[BaseMessage]] = Field(default_factory=list)
    bound_tools: list[list[str]] = Field(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        names = [getattr(t, "name", None) or (t.get("name") if isinstance(t, dict) else str(t)) for t in tools]
        return self.bind(tool_names=names, **kwargs)

    def reset(self) -> None:
        """Forget the recorded calls, so the script plays again from the start."""
        with self._lock:
            self.calls.clear()
            self.bound_tools.clear()

    def _next(self, messages: list[BaseMessage], tool_names: list[str] | None) -> ChatResult:
        with self._lock:
            index = len(self.calls)
            self.calls.append(list(messages))
            self.bound_tools.append(list(tool_names or []))
        reply: Any = self.responses[index] if index < len(self.responses) else self.final
        if callable(reply):
            reply = reply(list(messages))
        message = AIMessage(reply) if isinstance(reply, str) else reply.model_copy(deep=True)
        if message.tool_calls:
            message.tool_calls = [{**tc, "id": f"{tc.get('id') or 'call'}_{index}"} for tc in message.tool_calls]
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tool_names: list[str] | None = None, **kwargs: Any) -> ChatResult:
        return self._next(messages, tool_names)

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tool_names: list[str] | None = None, **kwargs: Any) -> ChatResult:
        return self._next(messages, tool_names)
