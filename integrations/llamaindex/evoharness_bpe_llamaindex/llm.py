"""`PolicyLLM`: any core `Policy` as a LlamaIndex function-calling LLM.

The policy sees OpenAI chat messages and OpenAI tool specs, exactly as in the core loop and the
LangGraph adapter, so one policy (a scripted one, a local model, a vLLM endpoint) drives every
framework. Tool-call arguments keep the policy's raw JSON text; arguments that are not a JSON
object reach the tool whole, so a malformed call is answered rather than silently dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator, Sequence
from typing import Any

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.policy import Policy
from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from .messages import from_openai_message, message_text, to_openai_messages, tool_selection

__all__ = ["PolicyLLM", "openai_tool_specs"]


def openai_tool_specs(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """LlamaIndex tools (or OpenAI specs already) as OpenAI function specs."""
    specs: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, dict):
            specs.append(tool)
        else:
            specs.append(tool.metadata.to_openai_tool(skip_length_check=True))
    return specs


class PolicyLLM(FunctionCallingLLM):
    """A function-calling LLM that asks a core `Policy` for each reply.

    Blocking policies (a local model, an HTTP client) run in a worker thread, so the event loop
    stays free for the workflow.

    >>> from evoharness_bpe.testing.scripted import ScriptedPolicy
    >>> llm = PolicyLLM(ScriptedPolicy(["Hello."]))
    >>> llm.chat([ChatMessage(role="user", content="hi")]).message.content
    'Hello.'
    """

    model_name: str = Field(default="policy", description="Name reported in the LLM metadata.")
    context_window: int = Field(default=32_768, description="Context window reported in the metadata.")
    _policy: Any = PrivateAttr()

    def __init__(self, policy: Policy, **kwargs: Any) -> None:
        if not callable(getattr(policy, "complete", None)):
            raise UserError("PolicyLLM needs a Policy: an object with complete(messages, tools) -> message")
        super().__init__(**kwargs)
        self._policy = policy

    @classmethod
    def class_name(cls) -> str:
        return "PolicyLLM"

    @property
    def policy(self) -> Policy:
        """The wrapped policy."""
        return self._policy

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            model_name=self.model_name,
            context_window=self.context_window,
            is_chat_model=True,
            is_function_calling_model=True,
        )

    # -- the one place the policy is asked ----------------------------------------------------
    def _respond(self, messages: Sequence[ChatMessage], tools: Sequence[Any]) -> ChatResponse:
        reply = self._policy.complete(to_openai_messages(messages), openai_tool_specs(tools))
        if not isinstance(reply, dict):
            raise UserError(f"the policy returned {type(reply).__name__}, not an assistant message dict")
        message = from_openai_message({**reply, "role": "assistant"})
        return ChatResponse(message=message, raw=reply, delta=message.content or "")

    # -- chat ---------------------------------------------------------------------------------
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._respond(messages, kwargs.get("tools") or ())

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await asyncio.to_thread(self._respond, messages, kwargs.get("tools") or ())

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        response = self._respond(messages, kwargs.get("tools") or ())

        def gen() -> Generator[ChatResponse, None, None]:
            yield response

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        response = await asyncio.to_thread(self._respond, messages, kwargs.get("tools") or ())

        async def gen() -> AsyncGenerator[ChatResponse, None]:
            yield response

        return gen()

    # -- completion (a single user message) ---------------------------------------------------
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = self._respond([ChatMessage(role="user", content=prompt)], ())
        return CompletionResponse(text=message_text(response.message), raw=response.raw)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = await asyncio.to_thread(self._respond, [ChatMessage(role="user", content=prompt)], ())
        return CompletionResponse(text=message_text(response.message), raw=response.raw)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        response = self.complete(prompt, formatted=formatted)

        def gen() -> Generator[CompletionResponse, None, None]:
            yield CompletionResponse(text=response.text, delta=response.text, raw=response.raw)

        return gen()

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        response = await self.acomplete(prompt, formatted=formatted)

        async def gen() -> AsyncGenerator[CompletionResponse, None]:
            yield CompletionResponse(text=response.text, delta=response.text, raw=response.raw)

        return gen()

    # -- tools --------------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            messages.append(ChatMessage(role="user", content=user_msg))
        elif user_msg is not None:
            messages.append(user_msg)
        return {"messages": messages, "tools": openai_tool_specs(tools), **kwargs}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = [tool_selection(b) for b in response.message.blocks if isinstance(b, ToolCallBlock)]
        if not calls and error_on_no_tool_call:
            raise ValueError(f"expected at least one tool call in the reply, got: {response.message.content!r}")
        return calls
