"""Teachers: any chat model that answers a list of messages with text.

A teacher is a callable ``(messages) -> str`` taking OpenAI-style ``{"role", "content"}``
messages. `as_teacher` adapts, by duck typing and without importing them, a LangChain chat
model (``.invoke``), a LlamaIndex LLM (``.complete``) or a plain callable; `OpenAITeacher` calls
an OpenAI-compatible endpoint through the ``openai`` SDK (``pip install openai``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..exceptions import UserError

__all__ = ["Teacher", "as_teacher", "OpenAITeacher"]

Teacher = Callable[[list[dict[str, str]]], str]


def as_teacher(model: Any) -> Teacher:
    """A teacher from a LangChain chat model, a LlamaIndex LLM, or a callable."""
    if hasattr(model, "invoke") and hasattr(model, "bind_tools"):  # LangChain BaseChatModel
        return lambda messages: _langchain_text(model.invoke(messages))
    if hasattr(model, "chat") and hasattr(model, "complete") and hasattr(model, "metadata"):  # LlamaIndex LLM
        def llamaindex(messages: list[dict[str, str]]) -> str:
            from llama_index.core.base.llms.types import ChatMessage  # noqa: PLC0415 - only LlamaIndex users have it

            reply = model.chat([ChatMessage(role=m["role"], content=m["content"]) for m in messages])
            return str(reply.message.content or "")

        return llamaindex
    if callable(model):
        return model
    raise UserError("a teacher is a callable (messages -> text), a LangChain chat model or a LlamaIndex LLM")


def _langchain_text(reply: Any) -> str:
    text = getattr(reply, "text", None)  # the text blocks of any provider's content format
    if isinstance(text, str):  # a property in langchain-core 1.x (a method before)
        return str(text)
    return str(text()) if callable(text) else str(reply.content)


class OpenAITeacher:
    """A model behind an OpenAI-compatible endpoint (``openai`` SDK), JSON answers requested."""

    def __init__(self, model: str, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float = 60.0, max_tokens: int = 1024, retries: int = 2) -> None:
        try:
            import openai  # noqa: PLC0415 - optional dependency
        except ImportError as exc:
            raise UserError("OpenAITeacher needs the openai SDK: pip install openai") from exc
        self.model, self.max_tokens = model, max_tokens
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
                                    timeout=timeout, max_retries=retries)

    def __call__(self, messages: list[dict[str, str]]) -> str:
        reply = self.client.chat.completions.create(model=self.model, messages=messages,  # type: ignore[arg-type]
                                                    max_tokens=self.max_tokens, temperature=0.0)
        return reply.choices[0].message.content or ""
