"""`OpenAICompatiblePolicy`: any OpenAI-compatible chat endpoint with tool calling.

Works with vLLM's and llama.cpp's servers and hosted APIs through the ``openai`` SDK
(``pip install 'evoharness-bpe[openai]'``): ``POST {base_url}/chat/completions`` with the
messages, the tools and ``tool_choice="auto"``, a reply-length cap and a timeout on every call
(see `evoharness_bpe.endpoint.EndpointSettings`). A reply whose tool calls arrive as Hermes text
is parsed; a reply that cannot be parsed comes back as text (the runner counts it as an invalid
action). Connection errors, timeouts, 429 and 5xx are retried with backoff; what still fails
raises `PolicyError`. The server's ``usage`` is kept and is the prompt-token count of the trace.
"""

from __future__ import annotations

import json
from typing import Any

from ...endpoint import EndpointSettings
from ...exceptions import EvoHarnessError
from ..policy import ChatMessage
from .toolcalls import parse_tool_calls

__all__ = ["OpenAICompatiblePolicy", "PolicyError"]


class PolicyError(EvoHarnessError, RuntimeError):
    """The model endpoint could not be reached or answered with an error."""


class OpenAICompatiblePolicy:
    """Chat completions from `base_url` (e.g. ``http://127.0.0.1:8000/v1``) for `model`.

    Unset arguments come from `EndpointSettings.from_env` (``OPENAI_API_KEY``,
    ``OPENAI_TIMEOUT``, ``OPENAI_MAX_TOKENS``, ``EVOHARNESS_NULL_CONTENT``, ...), or pass
    `settings` whole. ``null_content=False`` is for servers that refuse ``content: null`` next
    to tool calls (llama-cpp-python).
    """

    def __init__(self, model: str | None = None, base_url: str | None = None, *, api_key: str | None = None,
                 temperature: float | None = None, max_tokens: int | None = None, timeout: float | None = None,
                 retries: int | None = None, tool_choice: str | None = None, null_content: bool | None = None,
                 settings: EndpointSettings | None = None) -> None:
        changes = {"model": model, "base_url": base_url.rstrip("/") if base_url else None, "api_key": api_key,
                   "temperature": temperature, "max_tokens": max_tokens, "timeout": timeout, "retries": retries,
                   "tool_choice": tool_choice, "null_content": null_content}
        self.settings = settings.with_(**changes) if settings is not None else EndpointSettings.from_env(**changes)
        self.model = self.settings.model
        self.base_url = self.settings.base_url or "https://api.openai.com/v1"
        self.usage: list[dict[str, Any]] = []
        self._client: Any = None
        self._last_prompt: tuple[str, int] | None = None

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            self._client = self.settings.client()  # a UserError with the install line without the SDK
        import openai  # noqa: PLC0415 - optional, imported on first use

        try:
            raw = self._client.chat.completions.with_raw_response.create(**body)
        except openai.APIStatusError as exc:
            detail = exc.response.text[:300] if exc.response is not None else str(exc)
            raise PolicyError(f"{self.base_url} answered {exc.status_code}: {detail}") from exc
        except openai.APIError as exc:  # connection errors and timeouts, after the SDK's retries
            raise PolicyError(f"{self.base_url} failed after {self.settings.retries + 1} attempts: {exc}") from exc
        try:
            data = json.loads(raw.text)
        except ValueError:
            return {"unparsed": raw.text[:500]}
        return data if isinstance(data, dict) else {"unparsed": data}

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        data = self._post(self.settings.chat_body(messages, tools))
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
