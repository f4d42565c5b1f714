"""`TraceRecorder`: a LlamaIndex agent run as a framework-neutral `Trace`.

Two sources, because neither has everything:

- the agent's event stream (`AgentInput`, `AgentOutput`, `ToolCallResult`, `StopEvent`) gives
  the conversation: user messages, assistant replies with their tool calls, tool results;
- instrumentation (`LLMChatStartEvent` / `LLMChatEndEvent`) gives each model call exactly as
  sent — system message, injected dashboard, windowing and all — and the reply.

Both are written in OpenAI chat format, so a LlamaIndex trace and a LangGraph trace of the same
episode train alike. Meta-action events, dashboards and the ledger come from the workspace.
"""

from __future__ import annotations

import contextvars
import json
import warnings
from collections.abc import Sequence
from typing import Any

from evoharness_bpe import ModelCall, Outcome, Trace, Workspace
from evoharness_bpe.endpoint import reported_prompt_tokens
from evoharness_bpe.harness import PromptTokenCounter, count_prompt_tokens
from llama_index.core.agent.workflow import AgentInput, AgentOutput, ToolCallResult
from llama_index.core.bridge.pydantic import ConfigDict
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
from llama_index.core.workflow import StopEvent

from .llm import openai_tool_specs
from .messages import RAW_ARGUMENTS, to_openai_message, to_openai_messages

__all__ = ["TraceRecorder"]

_active: contextvars.ContextVar[TraceRecorder | None] = contextvars.ContextVar("evoharness_bpe_recorder", default=None)


class _ModelCallEvents(BaseEventHandler):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    recorder: Any = None

    @classmethod
    def class_name(cls) -> str:
        return "EvoHarnessTraceRecorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if _active.get() is not self.recorder:
            return  # another run in this process
        try:
            self.recorder._on_model_event(event)
        except Exception as exc:  # the dispatcher would swallow it; keep it for trace()
            self.recorder.errors.append(exc)


class TraceRecorder:
    """Records one episode of a LlamaIndex agent (or `AgentWorkflow`) as a `Trace`.

    Runs started inside ``with recorder:`` (or ``async with``) have their model calls recorded;
    feed the stream events to `on_event`, or let `run` do both:

    >>> recorder = TraceRecorder(workspace)                                   # doctest: +SKIP
    >>> result = await recorder.run(agent, user_msg="Migrate the records")    # doctest: +SKIP
    >>> TraceWriter("traces.jsonl").write(recorder.trace(outcome=Outcome(success=True)))  # doctest: +SKIP
    """

    def __init__(self, workspace: Workspace | None = None, *, token_counter: PromptTokenCounter | Any | None = None) -> None:
        self.workspace = workspace
        self.token_counter = token_counter
        self.token_sources: set[str] = set()
        self.messages: list[dict[str, Any]] = []
        self.model_calls: list[ModelCall] = []
        self.tools: list[dict[str, Any]] = []
        self.errors: list[Exception] = []
        self._pending: dict[str | None, list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]] = {}
        self._new_run = True
        self._handler = _ModelCallEvents(recorder=self)
        self._tokens: list[contextvars.Token[TraceRecorder | None]] = []

    # -- capture ------------------------------------------------------------------------------
    def __enter__(self) -> TraceRecorder:
        root = get_dispatcher()
        if self._handler not in root.event_handlers:
            root.add_event_handler(self._handler)
        self._tokens.append(_active.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _active.reset(self._tokens.pop())
        if not self._tokens:
            root = get_dispatcher()
            # The dispatcher has no way to remove a handler but editing its list.
            root.event_handlers[:] = [h for h in root.event_handlers if h is not self._handler]

    async def __aenter__(self) -> TraceRecorder:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__(*exc)

    async def run(self, agent: Any, **run_kwargs: Any) -> Any:
        """``agent.run(**run_kwargs)`` recorded end to end; returns the run's result."""
        with self:
            handler = agent.run(**run_kwargs)
            async for event in handler.stream_events():
                self.on_event(event)
            return await handler

    # -- the event stream ---------------------------------------------------------------------
    def on_event(self, event: Any) -> None:
        """Record one event of a run's stream (``handler.stream_events()``)."""
        if isinstance(event, AgentInput):
            if self._new_run:
                self._new_run = False
                self.messages.extend(self._new_inputs(event.input))
        elif isinstance(event, AgentOutput):
            if event.retry_messages:
                return
            message = to_openai_message(event.response)
            if event.tool_calls and "tool_calls" not in message:
                message["tool_calls"] = [_selection_call(s) for s in event.tool_calls]
                message["content"] = message.get("content") or None
            self.messages.append(message)
        elif isinstance(event, ToolCallResult):
            self.messages.append(
                {"role": "tool", "tool_call_id": event.tool_id, "content": event.tool_output.content or ""}
            )
        elif isinstance(event, StopEvent):
            self._new_run = True

    def _new_inputs(self, messages: Sequence[Any]) -> list[dict[str, Any]]:
        converted = [m for m in to_openai_messages(messages) if m["role"] != "system"]
        if not self.messages:
            return converted
        start = len(converted)
        while start > 0 and converted[start - 1]["role"] == "user":
            start -= 1
        return converted[start:]

    # -- instrumentation ----------------------------------------------------------------------
    def _on_model_event(self, event: BaseEvent) -> None:
        # Start and end of one call share the span of the decorated chat method.
        if isinstance(event, LLMChatStartEvent):
            prompt = to_openai_messages(event.messages)
            if any(p == prompt for queue in self._pending.values() for p, _ in queue):
                return  # a chat method calling another: one model call
            offered = openai_tool_specs(event.additional_kwargs.get("tools") or ())
            self._pending.setdefault(event.span_id, []).append((prompt, offered))
            self._add_tools(offered)
        elif isinstance(event, LLMChatEndEvent):
            queue = self._pending.get(event.span_id)
            if not queue:
                return
            prompt, offered = queue.pop(0)
            if not queue:
                del self._pending[event.span_id]
            if event.response is None:
                return
            reported = reported_prompt_tokens(event.response)  # the server's usage, when it sent one
            counter = self.token_counter if reported is None else (lambda m, t: reported)
            tokens = count_prompt_tokens(prompt, offered, counter)
            self.token_sources.add(tokens.source)
            self.model_calls.append(
                ModelCall(
                    messages=prompt,
                    response=to_openai_message(event.response.message),
                    prompt_tokens=tokens.tokens,
                )
            )

    @property
    def prompt_token_source(self) -> str | None:
        """``exact``, ``approximate`` or ``mixed``: how the recorded prompts were counted."""
        sources = self.token_sources
        return next(iter(sources)) if len(sources) == 1 else ("mixed" if sources else None)

    def record_model_call(self, messages: Sequence[Any], response: Any, tools: Sequence[Any] = (),
                          reported_tokens: int | None = None) -> None:
        """Record one model call as sent (`messages`, `tools`) with its reply message.

        For code that sees the call itself (the BPE agents' model-call hook) rather than the
        instrumentation events. `reported_tokens`: the prompt tokens the server reported.
        """
        prompt = to_openai_messages(messages)
        specs = openai_tool_specs(tools or ())
        self._add_tools(specs)
        counter = self.token_counter if reported_tokens is None else (lambda m, t: reported_tokens)
        tokens = count_prompt_tokens(prompt, specs, counter)
        self.token_sources.add(tokens.source)
        self.model_calls.append(
            ModelCall(
                messages=prompt,
                response=to_openai_message(response),
                prompt_tokens=tokens.tokens,
            )
        )

    def _add_tools(self, specs: Sequence[dict[str, Any]]) -> None:
        known = {t.get("function", {}).get("name") for t in self.tools}
        for spec in specs:
            name = spec.get("function", {}).get("name")
            if name not in known:
                known.add(name)
                self.tools.append(spec)

    # -- result -------------------------------------------------------------------------------
    def trace(
        self,
        *,
        task: str | None = None,
        outcome: Outcome | None = None,
        env: str | None = None,
        harness: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Trace:
        """The recorded episode; meta-actions, dashboards and ledger come from the workspace.

        `tools` defaults to the OpenAI specs the model was offered (as seen in its calls).
        """
        offered = list(tools) if tools is not None else list(self.tools)
        if self.errors:
            warnings.warn(
                f"{len(self.errors)} model-call event(s) could not be recorded: {self.errors[0]!r}",
                RuntimeWarning,
                stacklevel=2,
            )
        if task is None:
            task = next((m["content"] for m in self.messages if m["role"] == "user" and m.get("content")), "")
        if self.workspace is not None:
            trace = self.workspace.trace(
                task=task,
                messages=self.messages,
                outcome=outcome,
                framework="llamaindex",
                harness=harness or "bpe",
                env=env,
                tools=offered or None,
                metadata=metadata,
            )
        else:
            trace = Trace(
                task=task,
                framework="llamaindex",
                harness=harness or "none",
                env=env,
                messages=list(self.messages),
                tools=offered,
                outcome=outcome or Outcome(),
                metadata=dict(metadata or {}),
            )
        trace.model_calls = list(self.model_calls)
        return trace


def _selection_call(selection: Any) -> dict[str, Any]:
    kwargs = selection.tool_kwargs
    if isinstance(kwargs, dict) and set(kwargs) == {RAW_ARGUMENTS}:
        arguments = str(kwargs[RAW_ARGUMENTS])
    else:
        arguments = json.dumps(kwargs, ensure_ascii=False, default=str)
    return {"id": selection.tool_id, "type": "function", "function": {"name": selection.tool_name, "arguments": arguments}}

