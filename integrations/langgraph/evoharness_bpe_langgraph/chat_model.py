"""`PolicyChatModel`: any core `Policy` as a LangChain chat model.

The policy receives the prompt in the OpenAI chat format and the bound tools as OpenAI
function specs, and answers with one assistant message; tool calls whose arguments are not a
JSON object come back as `invalid_tool_calls`, which LangChain reports to the model.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.policy import Policy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict

from .callbacks import to_openai

__all__ = ["PolicyChatModel", "message_from_openai"]


def message_from_openai(reply: dict[str, Any]) -> AIMessage:
    """An OpenAI-format assistant message as an `AIMessage` (bad arguments → invalid calls)."""
    tool_calls: list[dict[str, Any]] = []
    invalid: list[dict[str, Any]] = []
    for n, call in enumerate(reply.get("tool_calls") or []):
        fn = call.get("function") or {}
        name, raw, call_id = fn.get("name"), fn.get("arguments"), call.get("id") or f"call_{n}"
        try:
            args = raw if isinstance(raw, dict) else json.loads(raw or "{}")
        except (TypeError, ValueError) as exc:
            invalid.append({"name": name, "args": raw, "id": call_id, "error": f"arguments are not JSON: {exc}", "type": "invalid_tool_call"})
            continue
        if not isinstance(args, dict) or not isinstance(name, str):
            invalid.append({"name": name, "args": str(raw), "id": call_id, "error": "arguments must be a JSON object", "type": "invalid_tool_call"})
            continue
        tool_calls.append({"name": name, "args": args, "id": call_id, "type": "tool_call"})
    return AIMessage(reply.get("content") or "", tool_calls=tool_calls, invalid_tool_calls=invalid)


class PolicyChatModel(BaseChatModel):
    """Wraps a `Policy` (`complete(messages, tools) -> assistant message`) as a chat model."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    policy: Any
    """The wrapped `evoharness_bpe.lab.policy.Policy`."""

    def __init__(self, *, policy: Any, **kwargs: Any) -> None:
        if not isinstance(policy, Policy):
            raise UserError(f"policy must have complete(messages, tools), got {type(policy).__name__}")
        super().__init__(policy=policy, **kwargs)

    @property
    def _llm_type(self) -> str:
        return "evoharness-policy"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> ChatResult:
        reply = self.policy.complete(to_openai(messages), list(tools or []))
        return ChatResult(generations=[ChatGeneration(message=message_from_openai(reply))])

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> ChatResult:
        return await asyncio.to_thread(self._generate, messages, stop, None, tools, **kwargs)
