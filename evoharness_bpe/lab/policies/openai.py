"""`OpenAICompatiblePolicy`: any OpenAI-compatible chat endpoint with tool calling (stdlib only).

Works with vLLM's and llama.cpp's servers and hosted APIs: ``POST {base_url}/chat/completions``
with the messages and tools. A reply whose tool calls arrive as Hermes text is parsed; a reply
that cannot be parsed comes back as text (the runner counts it as an invalid action). Transport
failures raise `PolicyError` after `retries` attempts.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from typing import Any

from ...exceptions import EvoHarnessError
from ..policy import ChatMessage
from .toolcalls import parse_tool_calls

__all__ = ["OpenAICompatiblePolicy", "PolicyError"]


class PolicyError(EvoHarnessError, RuntimeError):
    """The model endpoint could not be reached or answered with an error."""


class OpenAICompatiblePolicy:
    """Chat completions from `base_url` (e.g. ``http://127.0.0.1:8000/v1``) for `model`.

    The API key defaults to the ``OPENAI_API_KEY`` environment variable (none is sent if unset).
    """

    def __init__(self, model: str, base_url: str = "http://127.0.0.1:8000/v1", *, api_key: str | None = None,
                 temperature: float = 0.0, max_tokens: int = 512, timeout: float = 60.0, retries: int = 2) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.retries = retries
        self.usage: list[dict[str, Any]] = []
        self._last_prompt: tuple[str, int] | None = None

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(f"{self.base_url}/chat/completions", data=json.dumps(body).encode("utf-8"), headers=headers, method="POST")
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the URL is the user's endpoint
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as exc:
                error = exc
                if exc.code < 500 and exc.code != 429:
                    detail = exc.read().decode("utf-8", "replace")[:300]
                    raise PolicyError(f"{self.base_url} answered {exc.code}: {detail}") from exc
            except (urllib.error.URLError, TimeoutError, ValueError) as exc:
                error = exc
            time.sleep(min(2.0, 0.2 * 2**attempt))
        raise PolicyError(f"{self.base_url} failed after {self.retries + 1} attempts: {error}") from error

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature, "max_tokens": self.max_tokens}
        if tools:
            body["tools"] = tools
        data = self._post(body)
        self._last_prompt = None
        if isinstance(data.get("usage"), dict):
            self.usage.append(data["usage"])
            if isinstance(data["usage"].get("prompt_tokens"), int):
                self._last_prompt = (_prompt_key(messages, tools), data["usage"]["prompt_tokens"])
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            return {"role": "assistant", "content": json.dumps(data)[:500]}
        content = message.get("content")
        calls = []
        for n, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function") or {}
            args = fn.get("arguments")
            calls.append({"id": call.get("id") or f"call_{n}", "type": "function",
                          "function": {"name": fn.get("name"), "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
        if not calls and isinstance(content, str):
            calls = [{"id": f"call_{n}", "type": "function", "function": c}
                     for n, c in enumerate(parse_tool_calls(content, {t["function"]["name"] for t in tools}))]
        reply: ChatMessage = {"role": "assistant", "content": content}
        if calls:
            reply["tool_calls"] = calls
        return reply

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None:
        """The prompt tokens the server reported (``usage``) for this prompt, if it was the last one sent."""
        last = self._last_prompt
        return last[1] if last is not None and last[0] == _prompt_key(messages, tools) else None


def _prompt_key(messages: list[ChatMessage], tools: list[dict[str, Any]]) -> str:
    return json.dumps([messages, tools], sort_keys=True, default=str)
