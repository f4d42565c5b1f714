"""Teachers: any chat model that answers a list of messages with text.

A teacher is a callable ``(messages) -> str`` taking OpenAI-style ``{"role", "content"}``
messages. `as_teacher` adapts, by duck typing and without importing them, a LangChain chat
model (``.invoke``), a LlamaIndex LLM (``.complete``) or a plain callable; `OpenAITeacher` calls
an OpenAI-compatible endpoint through the ``openai`` SDK (``pip install 'evoharness-bpe[openai]'``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..endpoint import EndpointSettings
from ..exceptions import ModelCallError, UserError

__all__ = ["Teacher", "as_teacher", "OpenAITeacher", "AnswerTooLarge", "MAX_ANSWER_CHARS", "MAX_ANSWER_BYTES"]

Teacher = Callable[[list[dict[str, str]]], str]

MAX_ANSWER_CHARS = 1_000_000
"""A teacher's answer longer than this is refused (decisions about a few notes take a few KB)."""
MAX_ANSWER_BYTES = 2_000_000
"""`OpenAITeacher` stops reading a response body past this many bytes (the answer and its envelope)."""


class AnswerTooLarge(ModelCallError):
    """The teacher's answer exceeded its size cap; refused, and not asked again."""


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
    """A model behind an OpenAI-compatible endpoint (``openai`` SDK), JSON answers requested.

    Calls go through `EndpointSettings` (timeout, reply cap, retries with backoff, the servers'
    quirks); unset arguments come from `EndpointSettings.from_env`. The response body is read
    in chunks and refused (`AnswerTooLarge`) once it passes `max_answer_bytes`, so a server that
    ignores the token cap costs at most that much memory. The server's ``usage`` of each call
    is kept in `usage`.
    """

    def __init__(self, model: str | None = None, base_url: str | None = None, *, api_key: str | None = None,
                 timeout: float | None = None, max_tokens: int | None = 1024, retries: int | None = None,
                 null_content: bool | None = None, settings: EndpointSettings | None = None,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        if max_answer_bytes < 1:
            raise UserError("max_answer_bytes must be at least 1")
        self.max_answer_bytes = max_answer_bytes
        changes = {"model": model, "base_url": base_url, "api_key": api_key, "timeout": timeout,
                   "max_tokens": max_tokens, "retries": retries, "null_content": null_content}
        self.settings = settings.with_(**changes) if settings is not None else EndpointSettings.from_env(**changes)
        self.model, self.max_tokens = self.settings.model, self.settings.max_tokens
        self.client = self.settings.client()  # a UserError naming the install line without the SDK
        self.usage: list[dict[str, Any]] = []

    def __call__(self, messages: list[dict[str, str]]) -> str:
        cap = self.max_answer_bytes
        body = self.settings.chat_body(list(messages))
        with self.client.chat.completions.with_streaming_response.create(**body) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > cap:
                raise AnswerTooLarge(f"the teacher's answer is {int(declared):,} bytes, more than the cap of {cap:,}")
            chunks, size = [], 0
            for chunk in response.iter_bytes(65_536):
                size += len(chunk)
                if size > cap:
                    raise AnswerTooLarge(f"the teacher's answer passed the cap of {cap:,} bytes; reading stopped")
                chunks.append(chunk)
        try:
            data = json.loads(b"".join(chunks))
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelCallError(f"the teacher's answer is not a chat completion ({type(exc).__name__})") from exc
        if isinstance(data.get("usage"), dict):
            self.usage.append(data["usage"])
        return content if isinstance(content, str) else ""
