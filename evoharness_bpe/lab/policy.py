"""The `Policy` contract: anything that answers a chat with an assistant message.

Messages and tools are in the OpenAI chat format, the lingua franca of local models, vLLM's
server and hosted APIs. Framework adapters wrap a policy as their own chat-model type, so one
policy drives the core loop, LangGraph and LlamaIndex alike.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Policy", "ChatMessage"]

ChatMessage = dict[str, Any]
"""An OpenAI chat message: ``{"role": ..., "content": ..., "tool_calls": [...]}``."""


@runtime_checkable
class Policy(Protocol):
    """Produces the next assistant message.

    `complete` receives the conversation so far (system, user, assistant and ``tool`` messages)
    and the tools offered (OpenAI function specs), and returns one assistant message:
    ``{"role": "assistant", "content": str | None, "tool_calls": [{"id", "type": "function",
    "function": {"name", "arguments": <JSON string>}}]}``. A reply without tool calls ends the
    turn. A policy never raises for a reply it cannot parse: it returns the raw text as content
    (and the runner counts it as an invalid action).
    """

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage: ...
