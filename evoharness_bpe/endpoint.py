"""`EndpointSettings`: how to talk to an OpenAI-compatible chat server, and its quirks.

One object for every client of such a server in the project (`OpenAICompatiblePolicy`, the
consolidator's `OpenAITeacher`) and for the frameworks' own clients (LangChain's ``ChatOpenAI``,
LlamaIndex's ``OpenAILike``): the endpoint, a timeout and a reply-length cap on every call,
retries with backoff on connection errors, 429 and 5xx (the ``openai`` SDK's), and
``tool_choice="auto"`` whenever tools are sent. Servers differ in what they accept, so
`compatible_body` rewrites a request body for them:

- llama.cpp-based servers leave the tools out of the prompt unless ``tool_choice`` is set;
- llama-cpp-python answers 500 to an assistant message whose ``content`` is ``null`` next to
  ``tool_calls`` (``null_content=False`` sends ``""`` instead);
- llama-cpp-python ignores ``max_completion_tokens`` (what langchain-openai sends), so the cap is
  also sent as ``max_tokens``.

For the frameworks' clients the same rewrite runs in an ``httpx`` transport (`http_client`,
`async_http_client`), since they build their request bodies themselves. Everything here imports
``openai``/``httpx`` lazily: ``pip install 'evoharness-bpe[openai]'``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .exceptions import UserError

__all__ = ["EndpointSettings", "compatible_body", "reported_prompt_tokens"]

_INSTALL = "the openai SDK is needed: pip install 'evoharness-bpe[openai]'"


@dataclass(frozen=True)
class EndpointSettings:
    """An OpenAI-compatible chat endpoint and the settings every call to it uses.

    `from_env` reads ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``,
    ``OPENAI_TIMEOUT``, ``OPENAI_MAX_TOKENS``, ``EVOHARNESS_TOOL_CHOICE`` and
    ``EVOHARNESS_NULL_CONTENT`` (``keep`` or ``empty``).
    """

    model: str = field(metadata={"help": "model name as the server knows it (e.g. its --model_alias)"})
    base_url: str | None = field(default=None, metadata={"help": "e.g. http://127.0.0.1:8090/v1; None: the SDK's default"})
    api_key: str | None = field(default=None, metadata={"help": "sent as a bearer token; default $OPENAI_API_KEY"})
    timeout: float = field(default=60.0, metadata={"help": "seconds one call may take, all of it"})
    max_tokens: int = field(default=512, metadata={"help": "cap on each reply's length in tokens"})
    retries: int = field(default=2, metadata={"help": "retries after a connection error, timeout, 429 or 5xx (with backoff)"})
    temperature: float = field(default=0.0, metadata={"help": "sampling temperature"})
    tool_choice: str | None = field(default="auto", metadata={"help": "sent whenever tools are; None leaves it to the server"})
    null_content: bool = field(default=True, metadata={"help": "False sends '' instead of null as the content of an assistant message with tool calls"})
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = field(
        default="max_tokens", metadata={"help": "the field the cap goes in; OpenAI's reasoning models need max_completion_tokens"}
    )

    def __post_init__(self) -> None:
        if self.timeout <= 0 or self.max_tokens < 1 or self.retries < 0:
            raise UserError("EndpointSettings needs timeout > 0, max_tokens >= 1 and retries >= 0")
        if self.max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise UserError("max_tokens_field is 'max_tokens' or 'max_completion_tokens'")

    @classmethod
    def from_env(cls, **overrides: Any) -> EndpointSettings:
        """Settings from the environment variables above; `overrides` (not None) win."""
        env = os.environ
        values: dict[str, Any] = {
            "model": env.get("OPENAI_MODEL", "default"),
            "base_url": env.get("OPENAI_BASE_URL") or None,
            "api_key": env.get("OPENAI_API_KEY") or None,
        }
        try:
            if env.get("OPENAI_TIMEOUT"):
                values["timeout"] = float(env["OPENAI_TIMEOUT"])
            if env.get("OPENAI_MAX_TOKENS"):
                values["max_tokens"] = int(env["OPENAI_MAX_TOKENS"])
        except ValueError as exc:
            raise UserError(f"OPENAI_TIMEOUT and OPENAI_MAX_TOKENS must be numbers: {exc}") from None
        if "EVOHARNESS_TOOL_CHOICE" in env:
            values["tool_choice"] = env["EVOHARNESS_TOOL_CHOICE"] or None
        null = env.get("EVOHARNESS_NULL_CONTENT", "keep")
        if null not in ("keep", "empty"):
            raise UserError(f"EVOHARNESS_NULL_CONTENT is 'keep' or 'empty', not {null!r}")
        values["null_content"] = null == "keep"
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def with_(self, **changes: Any) -> EndpointSettings:
        """A copy with `changes` (None values ignored)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    # -- requests ---------------------------------------------------------------------------
    def chat_body(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The body of one ``chat/completions`` call (non-streaming), quirks applied."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                                self.max_tokens_field: self.max_tokens}
        if tools:
            body["tools"] = tools
        return compatible_body(body, self)

    def client(self) -> Any:
        """An ``openai.OpenAI`` client with this endpoint, timeout and retries."""
        openai = _openai()
        return openai.OpenAI(base_url=self.base_url, api_key=self._key(), timeout=self.timeout, max_retries=self.retries)

    def http_client(self) -> Any:
        """An ``httpx.Client`` that applies `compatible_body` to every chat request."""
        import httpx  # noqa: PLC0415 - a dependency of openai

        return httpx.Client(transport=_CompatTransport(self, httpx.HTTPTransport()), timeout=self.timeout)

    def async_http_client(self) -> Any:
        """The async twin of `http_client`."""
        import httpx  # noqa: PLC0415

        return httpx.AsyncClient(transport=_AsyncCompatTransport(self, httpx.AsyncHTTPTransport()), timeout=self.timeout)

    # -- the frameworks' clients ------------------------------------------------------------
    def langchain_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``langchain_openai.ChatOpenAI``."""
        return {"model": self.model, "base_url": self.base_url, "api_key": self._key(), "temperature": self.temperature,
                "max_tokens": self.max_tokens, "timeout": self.timeout, "max_retries": self.retries,
                "http_client": self.http_client(), "http_async_client": self.async_http_client()}

    def llamaindex_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``llama_index.llms.openai_like.OpenAILike`` (a chat, tool-calling model)."""
        return {"model": self.model, "api_base": self.base_url, "api_key": self._key(), "temperature": self.temperature,
                "max_tokens": self.max_tokens, "timeout": self.timeout, "max_retries": self.retries,
                "is_chat_model": True, "is_function_calling_model": True, "context_window": 8192,
                "http_client": self.http_client(), "async_http_client": self.async_http_client()}

    def _key(self) -> str:
        return self.api_key or os.environ.get("OPENAI_API_KEY") or "none"


def compatible_body(body: dict[str, Any], settings: EndpointSettings) -> dict[str, Any]:
    """`body` (a chat-completions request) rewritten for servers with the quirks above; a copy.

    >>> s = EndpointSettings("m", null_content=False)
    >>> out = compatible_body({"messages": [{"role": "assistant", "content": None, "tool_calls": [{}]}],
    ...                        "tools": [{}], "max_completion_tokens": 64}, s)
    >>> out["messages"][0]["content"], out["tool_choice"], out["max_tokens"]
    ('', 'auto', 64)
    """
    out = dict(body)
    if out.get("tools") and "tool_choice" not in out and settings.tool_choice:
        out["tool_choice"] = settings.tool_choice
    if settings.max_tokens_field == "max_tokens" and "max_completion_tokens" in out and "max_tokens" not in out:
        out["max_tokens"] = out["max_completion_tokens"]
    if not settings.null_content and isinstance(out.get("messages"), list):
        out["messages"] = [
            {**m, "content": ""} if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None else m
            for m in out["messages"]
        ]
    return out


def reported_prompt_tokens(reply: Any) -> int | None:
    """The prompt tokens a server reported for one reply, if it did.

    Reads an OpenAI ``usage`` mapping (or an object or response carrying one: a raw chat
    completion, a LlamaIndex ``ChatResponse.raw``) or a LangChain message's ``usage_metadata``.
    """
    for candidate in (reply, getattr(reply, "raw", None), getattr(reply, "usage_metadata", None), getattr(reply, "response_metadata", None)):
        tokens = _usage_tokens(candidate)
        if tokens is not None:
            return tokens
    return None


def _usage_tokens(obj: Any) -> int | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        obj = getattr(obj, "model_dump", lambda: None)() if hasattr(obj, "model_dump") else None
        if not isinstance(obj, dict):
            return None
    for key in ("prompt_tokens", "input_tokens"):
        if isinstance(obj.get(key), int) and not isinstance(obj.get(key), bool):
            return int(obj[key])
    for key in ("usage", "token_usage"):
        if obj.get(key) is not None:
            return _usage_tokens(obj[key])
    return None


def _openai() -> Any:
    try:
        import openai  # noqa: PLC0415 - optional dependency
    except ImportError as exc:
        raise UserError(_INSTALL) from exc
    return openai


def _rewritten(request: Any, settings: EndpointSettings) -> Any:
    if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
        return request
    try:
        body = json.loads(request.content)
    except (ValueError, RuntimeError):  # a streamed upload or not JSON: leave it as it is
        return request
    if not isinstance(body, dict):
        return request
    fixed = compatible_body(body, settings)
    if fixed == body:
        return request
    import httpx  # noqa: PLC0415

    headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
    return httpx.Request(request.method, request.url, headers=headers, content=json.dumps(fixed).encode("utf-8"),
                         extensions=request.extensions)


class _CompatTransport:
    def __init__(self, settings: EndpointSettings, inner: Any) -> None:
        self.settings, self.inner = settings, inner

    def handle_request(self, request: Any) -> Any:
        return self.inner.handle_request(_rewritten(request, self.settings))

    def close(self) -> None:
        self.inner.close()


class _AsyncCompatTransport:
    def __init__(self, settings: EndpointSettings, inner: Any) -> None:
        self.settings, self.inner = settings, inner

    async def handle_async_request(self, request: Any) -> Any:
        return await self.inner.handle_async_request(_rewritten(request, self.settings))

    async def aclose(self) -> None:
        await self.inner.aclose()
