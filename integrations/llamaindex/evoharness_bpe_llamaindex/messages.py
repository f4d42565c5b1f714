"""Conversion between LlamaIndex chat messages and OpenAI chat messages (the trace format).

Traces, policies and training data speak the OpenAI chat format: assistant ``tool_calls`` with
JSON-string ``arguments`` and ``tool`` messages carrying a ``tool_call_id``. LlamaIndex keeps
tool calls as `ToolCallBlock`s (or, for some providers, in ``additional_kwargs["tool_calls"]``)
and the id of a tool result in ``additional_kwargs["tool_call_id"]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection

__all__ = ["RAW_ARGUMENTS", "to_openai_message", "to_openai_messages", "from_openai_message", "tool_selection", "message_text"]

RAW_ARGUMENTS = "__raw_arguments__"
"""Key under which tool-call arguments that are not a JSON object travel as the raw text."""

_ROLES = {"chatbot": "assistant", "model": "assistant", "developer": "system", "function": "tool"}


def message_text(message: ChatMessage) -> str:
    """The text of a message: its text blocks joined (other blocks are not text)."""
    return "\n".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def _arguments_text(kwargs: Any) -> str:
    if isinstance(kwargs, str):
        return kwargs
    if isinstance(kwargs, dict) and set(kwargs) == {RAW_ARGUMENTS}:
        return str(kwargs[RAW_ARGUMENTS])
    return json.dumps(kwargs, ensure_ascii=False, default=str)


def _call(call_id: str | None, name: str, kwargs: Any) -> dict[str, Any]:
    return {"id": call_id or "", "type": "function", "function": {"name": name, "arguments": _arguments_text(kwargs)}}


def _tool_calls(message: ChatMessage) -> list[dict[str, Any]]:
    calls = [_call(b.tool_call_id, b.tool_name, b.tool_kwargs) for b in message.blocks if isinstance(b, ToolCallBlock)]
    if calls:
        return calls
    for raw in message.additional_kwargs.get("tool_calls") or ():
        if isinstance(raw, ToolSelection):
            calls.append(_call(raw.tool_id, raw.tool_name, raw.tool_kwargs))
            continue
        data = raw.model_dump() if hasattr(raw, "model_dump") else raw
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            fn = data["function"]
            calls.append(_call(data.get("id"), str(fn.get("name", "")), fn.get("arguments", "")))
    return calls


def to_openai_message(message: ChatMessage) -> dict[str, Any]:
    """One LlamaIndex message as an OpenAI chat message."""
    role = message.role.value
    role = _ROLES.get(role, role)
    text = message_text(message)
    if role == "assistant":
        calls = _tool_calls(message)
        out: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            out["tool_calls"] = calls
        return out
    if role == "tool":
        call_id = message.additional_kwargs.get("tool_call_id")
        return {"role": "tool", "tool_call_id": str(call_id or ""), "content": text}
    return {"role": role, "content": text}


def to_openai_messages(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """LlamaIndex messages as OpenAI chat messages, in order."""
    return [to_openai_message(m) for m in messages]


def from_openai_message(message: dict[str, Any]) -> ChatMessage:
    """An OpenAI chat message as a LlamaIndex message; tool-call arguments keep their raw text."""
    role = message.get("role", "assistant")
    content = message.get("content")
    blocks: list[Any] = []
    if isinstance(content, str) and content:
        blocks.append(TextBlock(text=content))
    elif isinstance(content, Sequence) and not isinstance(content, str):
        blocks.extend(TextBlock(text=str(p.get("text", ""))) for p in content if isinstance(p, dict) and p.get("type") == "text")
    for n, call in enumerate(message.get("tool_calls") or ()):
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        blocks.append(
            ToolCallBlock(
                tool_call_id=str(call.get("id") or f"call_{n}"),
                tool_name=str(fn.get("name", "")),
                tool_kwargs=args if isinstance(args, (str, dict)) else json.dumps(args),
            )
        )
    extra: dict[str, Any] = {}
    if role == "tool" and message.get("tool_call_id") is not None:
        extra["tool_call_id"] = message["tool_call_id"]
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=extra)


def tool_selection(block: ToolCallBlock) -> ToolSelection:
    """A tool-call block as the `ToolSelection` the agent runs.

    Arguments that are not a JSON object reach the tool whole, under `RAW_ARGUMENTS`, so the tool
    can answer with an error the model reads instead of being called with nothing.
    """
    raw = block.tool_kwargs
    if isinstance(raw, dict):
        kwargs = raw
    else:
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):  # too deep to parse: the tool refuses it readably
            parsed = None
        kwargs = parsed if isinstance(parsed, dict) else {RAW_ARGUMENTS: raw}
    return ToolSelection(tool_id=block.tool_call_id or "", tool_name=block.tool_name, tool_kwargs=kwargs)
