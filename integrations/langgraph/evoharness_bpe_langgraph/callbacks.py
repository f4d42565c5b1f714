"""`TraceCallbackHandler`: records LangGraph/LangChain runs as core `Trace`s.

>>> handler = TraceCallbackHandler("traces.jsonl", middleware=bpe)          # doctest: +SKIP
>>> agent.invoke(inputs, config={"callbacks": [handler]})                  # doctest: +SKIP

One trace per top-level run (one `invoke`/`stream` of a thread): the exact prompt of every model
call — system message after the dashboard was injected — with its reply (`Trace.model_calls`),
the conversation in OpenAI format (`Trace.messages`), and, when given the `BPEMiddleware`, the
meta-actions with their costs, the dashboards and the ledger of the run.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from evoharness_bpe.dashboard import CLOSE_TAG, OPEN_TAG
from evoharness_bpe.endpoint import reported_prompt_tokens
from evoharness_bpe.harness import PromptTokenCounter, count_prompt_tokens
from evoharness_bpe.text import approx_tokens
from evoharness_bpe.trace import DashboardSnapshot, ModelCall, Outcome, Trace, TraceWriter
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage, convert_to_openai_messages

from .channel import BPE_KEY, RUN_KEY

__all__ = ["TraceCallbackHandler", "to_openai"]


def to_openai(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages in the OpenAI chat format, content as plain strings.

    Two differences from LangChain's own conversion, so traces match other frameworks': a tool
    call whose arguments were not valid JSON (an ``invalid_tool_call``) stays in the assistant
    message with its raw argument text, so the error result that answers it keeps its call;
    and an assistant message that only calls tools has ``content: None``, as OpenAI writes it.
    """
    converted = []
    for message in messages:
        out = convert_to_openai_messages(message, text_format="string")
        invalid = getattr(message, "invalid_tool_calls", None) or []
        if out.get("role") == "assistant":
            calls = list(out.get("tool_calls") or [])
            calls += [
                {"id": bad.get("id"), "type": "function", "function": {"name": bad.get("name") or "", "arguments": bad.get("args") or ""}}
                for bad in invalid
            ]
            if calls:
                out["tool_calls"] = calls
                if not out.get("content"):
                    out["content"] = None
        converted.append(out)
    return converted


@dataclass
class _Run:
    thread_id: str | None
    tools: list[dict[str, Any]] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    token_sources: set[str] = field(default_factory=set)
    pending: dict[UUID, list[dict[str, Any]]] = field(default_factory=dict)
    run_key: str | None = None  # the BPE run id seen in a node's state, for runs that end in an error


class TraceCallbackHandler(BaseCallbackHandler):
    """Collects each top-level run into a `Trace`; writes it with `TraceWriter` when a path is set.

    Completed traces are also kept in `traces`. Pass `middleware` (the agent's `BPEMiddleware`)
    to include meta-action costs, dashboards, the ledger and the episode's success; without it,
    dashboards are read from the system messages. Prompt tokens are counted with the tool
    section by `evoharness_bpe.harness.count_prompt_tokens`: the server's reported ``usage`` when
    the reply carries one, else exactly when `token_counter` (e.g. a policy with
    ``count_prompt_tokens``) gives a figure, else approximately
    (``metadata["prompt_token_source"]`` says which).
    """

    run_inline = True  # keep events in order under async runs

    def __init__(
        self,
        path: str | os.PathLike[str] | TraceWriter | None = None,
        *,
        middleware: Any | None = None,
        framework: str = "langgraph",
        harness: str = "bpe",
        env: str | None = None,
        metadata: dict[str, Any] | None = None,
        token_counter: PromptTokenCounter | Any | None = None,
    ) -> None:
        self.token_counter = token_counter
        self.writer = path if isinstance(path, TraceWriter) or path is None else TraceWriter(path)
        self.adapter = getattr(middleware, "adapter", middleware)
        self.framework = framework
        self.harness = harness
        self.env = env
        self.metadata = dict(metadata or {})
        self.traces: list[Trace] = []
        self._runs: dict[UUID, _Run] = {}
        self._root: dict[UUID, UUID] = {}
        self._lock = threading.Lock()

    # -- run tree ----------------------------------------------------------------------------
    def _enter(self, run_id: UUID, parent_run_id: UUID | None, metadata: dict[str, Any] | None) -> _Run | None:
        with self._lock:
            if parent_run_id is None:
                self._root[run_id] = run_id
                self._runs[run_id] = _Run(thread_id=(metadata or {}).get("thread_id"))
            else:
                root = self._root.get(parent_run_id)
                if root is None:
                    return None
                self._root[run_id] = root
            return self._runs.get(self._root[run_id])

    def _run_of(self, run_id: UUID) -> _Run | None:
        with self._lock:
            root = self._root.get(run_id)
            return self._runs.get(root) if root is not None else None

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        run = self._enter(run_id, parent_run_id, metadata)
        if run is not None and parent_run_id is not None:
            _note_run_key(run, inputs)

    def on_tool_start(self, serialized: dict[str, Any] | None, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self._enter(run_id, parent_run_id, metadata)

    def on_chat_model_start(self, serialized: dict[str, Any] | None, messages: list[list[BaseMessage]], *, run_id: UUID, parent_run_id: UUID | None = None, metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        run = self._enter(run_id, parent_run_id, metadata)
        if run is not None and messages:
            run.pending[run_id] = to_openai(messages[0])
            offered = (kwargs.get("invocation_params") or {}).get("tools")
            if offered and not run.tools:
                run.tools = list(offered)

    def on_llm_end(self, response: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        run = self._run_of(run_id)
        if run is None or run_id not in run.pending:
            return
        prompt = run.pending.pop(run_id)
        message = response.generations[0][0].message if response.generations and response.generations[0] else None
        reply = to_openai([message])[0] if message is not None else {"role": "assistant", "content": ""}
        reported = reported_prompt_tokens(message)  # the server's usage, when it sent one
        counter = self.token_counter if reported is None else (lambda m, t: reported)
        tokens = count_prompt_tokens(prompt, run.tools, counter)
        run.token_sources.add(tokens.source)
        run.model_calls.append(ModelCall(messages=prompt, response=reply, prompt_tokens=tokens.tokens))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            self._close(run_id, outputs, error=None)
        elif (run := self._run_of(run_id)) is not None:
            _note_run_key(run, outputs)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        if parent_run_id is None:
            self._close(run_id, None, error=error)

    # -- trace -------------------------------------------------------------------------------
    def _close(self, run_id: UUID, outputs: Any, error: BaseException | None) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
            self._root = {k: v for k, v in self._root.items() if v != run_id}
        if run is None:
            return
        trace = self.build(run, outputs if isinstance(outputs, dict) else {}, error)
        self.traces.append(trace)
        if self.writer is not None:
            self.writer.write(trace)

    def build(self, run: _Run, state: dict[str, Any], error: BaseException | None) -> Trace:
        messages = to_openai(state.get("messages") or [])
        system = next((m for m in (run.model_calls[-1].messages if run.model_calls else []) if m.get("role") == "system"), None)
        if system is not None:
            messages = [system, *(m for m in messages if m.get("role") != "system")]
        bpe = state.get(BPE_KEY) or {}
        run_key = state.get(RUN_KEY) or run.run_key
        log = self.adapter.pop_log(run_key) if self.adapter is not None and run_key else None
        if log is not None and log.finishing is not None:
            log.finishing.result()
        if not bpe and log is not None and log.live is not None:
            bpe = log.live[0]  # a run that raised: the workspace as last observed (a raising tool included)
        if error is not None:
            outcome = Outcome(success=False, info={"error": f"{type(error).__name__}: {error}"})
        else:
            outcome = Outcome(success=log.summary.success if log is not None and log.summary else None)
        trace = Trace(
            task=str((bpe.get("progress") or {}).get("goal") or _first_user(messages)),
            framework=self.framework,
            harness=self.harness,
            env=self.env,
            messages=messages,
            model_calls=run.model_calls,
            tools=run.tools,
            outcome=outcome,
            metadata={
                **self.metadata,
                "thread_id": run.thread_id,
                "prompt_tokens": [c.prompt_tokens for c in run.model_calls],
                "prompt_token_source": _source(run.token_sources),
            },
        )
        if log is not None:
            trace.meta_actions = list(log.recorder.events)
            trace.dashboards = list(log.recorder.snapshots)
            trace.ledger = log.recorder.summary()
        else:
            trace.dashboards = _dashboards_in(run.model_calls)
        if bpe:
            trace.metadata["bpe_state"] = bpe
        return trace


def _source(sources: set[str]) -> str | None:
    return next(iter(sources)) if len(sources) == 1 else ("mixed" if sources else None)


def _note_run_key(run: _Run, values: Any) -> None:
    if isinstance(values, dict) and isinstance(values.get(RUN_KEY), str):
        run.run_key = values[RUN_KEY]


def _first_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def _dashboards_in(calls: list[ModelCall]) -> list[DashboardSnapshot]:
    found = []
    for call in calls:
        for message in call.messages:
            text = str(message.get("content") or "") if message.get("role") == "system" else ""
            start = text.find(OPEN_TAG)
            end = text.find(CLOSE_TAG, start)
            if start >= 0 and end > start:
                snippet = text[start : end + len(CLOSE_TAG)]
                found.append(DashboardSnapshot(step=len(found), text=snippet, tokens=approx_tokens(snippet)))
    return found


