"""OpenTelemetry spans of a run, on the GenAI semantic conventions; a no-op without a tracer.

Nothing here imports OpenTelemetry. A tracer provider can only be configured by code that has
imported ``opentelemetry.trace``, so each hook first looks it up in `sys.modules`: without it,
or while the global provider is still the API's proxy (or a no-op one), a hook returns at once
and no span is made. With a provider set, the `Workspace` (and so `BPEMiddleware`, `with_bpe`
and the MCP server, which drive it) emits:

- ``invoke_agent`` (INTERNAL) for a run: one per `EpisodeRecorder`, started by the run's first
  workspace and ended by `Workspace.finish`, with the cost ledger's figures (``evoharness.*``).
- ``execute_tool {name}`` for each environment tool the adapter observes (`Workspace.wrap`
  runs the tool inside the span; `Workspace.observe` alone records a point-in-time span).
- a memory span per meta-action: ``track`` → ``upsert_memory`` on the ``belief`` store
  (``delete_memory`` when it retracts), ``commit`` → ``upsert_memory`` on ``progress``,
  ``recall`` → ``search_memory`` and ``note`` → ``create_memory`` on the experience store; a
  note that consolidation merged or that replaced older entries gets child ``update_memory`` /
  ``delete_memory`` spans; the model consolidator's edits get their own spans.
- an ``evoharness.dashboard`` event with its token count each time a dashboard is rendered.

A span nests under the caller's current span (an OpenInference LlamaIndex span, say), or the
span a host framework's registered source names (`add_span_source`: the LangGraph integration's
finds OpenInference's LangChain spans), and otherwise under the run's ``invoke_agent``. Message and memory content (arguments,
results, queries, records, dashboard text) is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true, and passes `redact` first.

Attribute names follow open-telemetry/semantic-conventions-genai at commit 002c8a6
(``model/gen-ai/spans.yaml``: ``gen_ai.memory.client``, ``gen_ai.invoke_agent.internal``,
``gen_ai.execute_tool.internal``; ``docs/registry/attributes/gen-ai.md``). The conventions
are in Development status: names may move, and they are pinned here.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ledger import LedgerSummary
    from .recorder import EpisodeRecorder
    from .workspace import Workspace

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "SCOPE",
    "capture_content",
    "redact",
    "tracer",
    "add_span_source",
    "configure_from_env",
    "ledger_attributes",
    "OPERATION",
    "MEMORY_STORE_ID",
    "MEMORY_RECORD_ID",
    "MEMORY_RECORD_COUNT",
    "MEMORY_QUERY_TEXT",
    "MEMORY_RECORDS",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The standard opt-in to message and memory content on spans (off by default)."""
SCOPE = "evoharness_bpe"
"""The instrumentation scope name of every span this project emits."""

# GenAI semantic conventions (commit 002c8a6 of open-telemetry/semantic-conventions-genai).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
AGENT_NAME = "gen_ai.agent.name"
AGENT_ID = "gen_ai.agent.id"
CONVERSATION_ID = "gen_ai.conversation.id"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
MEMORY_STORE_ID = "gen_ai.memory.store.id"
MEMORY_RECORD_ID = "gen_ai.memory.record.id"
MEMORY_RECORD_COUNT = "gen_ai.memory.record.count"
MEMORY_QUERY_TEXT = "gen_ai.memory.query.text"
MEMORY_RECORDS = "gen_ai.memory.records"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
REQUEST_MODEL = "gen_ai.request.model"
USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
ERROR_TYPE = "error.type"

# The project's own attributes.
RECORD_IDS = "evoharness.memory.record.ids"
"""Every record id an operation touched (the conventions' record id holds one)."""
META_ACTION = "evoharness.meta_action.name"
DASHBOARD_EVENT = "evoharness.dashboard"

_TRUE = frozenset({"true", "1", "yes", "on", "span_only", "span_and_event"})
_CONTENT_CHARS = 4_000
_SECRET_RE = re.compile(
    r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"  # Authorization header values
    r"|\b(sk|pk|rk|ghp|gho|github_pat|xox[abpr]|lsv2_[a-z]{2})[-_][A-Za-z0-9_-]{12,}"  # well-known key prefixes
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key ids
    r"|(\"?(?:api[_-]?key|apikey|password|passwd|secret|token|access[_-]?token|authorization|x-api-key)\"?\s*[:=]\s*)"
    r"((?i:bearer|basic)\s+[^\s,;&}]+|\"[^\"]*\"|'[^']*'|[^\s,;&}]+)"
)


def capture_content() -> bool:
    """Whether ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` asks for content (read each time)."""
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in _TRUE


def redact(text: str, limit: int | None = _CONTENT_CHARS) -> str:
    """`text` with credentials masked (keys, bearer tokens, ``password=…``), cut to `limit` characters (None: whole).

    >>> redact('login with password=hunter2 and key sk-abcdefghijklmnopqrstu')
    'login with password=[redacted] and key [redacted]'
    """
    def mask(match: re.Match[str]) -> str:
        return f"{match.group(3)}[redacted]" if match.group(3) is not None else "[redacted]"

    if limit is None:
        return _SECRET_RE.sub(mask, text)
    out = _SECRET_RE.sub(mask, text[: limit * 2])
    return out if len(out) <= limit else out[:limit] + "…"


def _trace_module() -> Any:
    return sys.modules.get("opentelemetry.trace")


_cached: tuple[Any, Any] | None = None


def tracer() -> Any:
    """The project's tracer when a real tracer provider is set, else None (nothing is imported)."""
    global _cached
    trace = _trace_module()
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    from . import __version__

    made = provider.get_tracer(SCOPE, __version__)
    _cached = (provider, made)
    return made


def configure_from_env(service: str = "evoharness") -> Callable[[], None] | None:
    """Set a global tracer provider exporting over OTLP/HTTP when ``OTEL_EXPORTER_OTLP_*ENDPOINT`` asks.

    For servers the project starts itself (``evoharness mcp``): with
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, no provider set
    yet and ``OTEL_SDK_DISABLED`` not true, spans go to that endpoint in batches (headers from
    ``OTEL_EXPORTER_OTLP_HEADERS``; ``OTEL_SERVICE_NAME`` overrides `service`). Returns the
    function that flushes and shuts the provider down, or None when nothing was set up.
    """
    if not (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")):
        return None
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        from .exceptions import UserError

        raise UserError("OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not installed: "
                        "pip install 'evoharness-bpe[otel]' (or unset the variable)") from None
    if tracer() is not None:
        return None  # the host configured its own
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider.shutdown


# -- where a span starts -----------------------------------------------------------------------
_sources: list[Callable[[bool], Any]] = []


def add_span_source(source: Callable[[bool], Any]) -> None:
    """Register how to find a host framework's span when OpenTelemetry's context has none.

    `source(root)` returns the framework's current span (``root=False``: where a meta-action or
    a tool runs) or the span of its whole run (``root=True``: the ``invoke_agent`` parent), or
    None. An integration whose framework keeps spans outside the OTel context (OpenInference's
    LangChain tracer does) registers one; a source that raises is skipped.
    """
    if source not in _sources:
        _sources.append(source)


def _host_span(root: bool) -> Any:
    for source in _sources:
        try:
            span = source(root)
        except Exception:  # a host's lookup must not break the run it observes
            continue
        if span is not None and span.get_span_context().is_valid:
            return span
    return None


# -- the run span ---------------------------------------------------------------------------
_runs: weakref.WeakKeyDictionary[EpisodeRecorder, Any] = weakref.WeakKeyDictionary()


def _run_span(t: Any, ws: Workspace) -> Any:
    """The ``invoke_agent`` span of the workspace's run, started on first use."""
    span = _runs.get(ws.recorder)
    if span is None:
        trace = _trace_module()
        attributes = {OPERATION: "invoke_agent", AGENT_NAME: "evoharness", "evoharness.namespace": list(ws.namespace)}
        if capture_content():
            attributes["evoharness.task"] = redact(ws.state.progress.goal)
        host = None if trace.get_current_span().get_span_context().is_valid else _host_span(True)
        span = t.start_span("invoke_agent evoharness", context=trace.set_span_in_context(host) if host is not None else None,
                            kind=trace.SpanKind.INTERNAL, attributes=attributes)
        _runs[ws.recorder] = span
    return span


def _parent(t: Any, ws: Workspace) -> Any:
    """The context a span of `ws` starts in: the caller's span, or the run's ``invoke_agent``."""
    trace = _trace_module()
    if trace.get_current_span().get_span_context().is_valid:
        _run_span(t, ws)  # the run is still counted from its first event
        return None
    run = _run_span(t, ws)
    return trace.set_span_in_context(_host_span(False) or run)


def start(ws: Workspace) -> None:
    """Begin the run's ``invoke_agent`` span now (in the caller's context), if tracing is on."""
    t = tracer()
    if t is not None:
        _run_span(t, ws)


def ledger_attributes(summary: LedgerSummary, prefix: str = "evoharness.ledger.") -> dict[str, Any]:
    """The ledger's figures as span attributes under the project's prefix."""
    return {
        f"{prefix}meta_action_calls": summary.meta_action_calls,
        f"{prefix}invalid_calls": summary.invalid_calls,
        f"{prefix}meta_action_tokens": summary.meta_action_tokens,
        f"{prefix}dashboard_renders": summary.dashboard_renders,
        f"{prefix}dashboard_tokens": summary.dashboard_tokens,
        f"{prefix}harness_tokens": summary.harness_tokens,
        f"{prefix}wall_ms": round(summary.wall_ms, 3),
        **{f"{prefix}calls.{name}": tally.calls for name, tally in summary.by_action.items()},
    }


def finished(ws: Workspace, success: bool, credited: int) -> None:
    """End the run's ``invoke_agent`` span with the outcome and the ledger's figures."""
    span = _runs.pop(ws.recorder, None)
    if span is None:
        t = tracer()
        if t is None:
            return
        span = _run_span(t, ws)
        _runs.pop(ws.recorder, None)
    summary = ws.ledger.summary()
    span.set_attributes({"evoharness.outcome.success": success, "evoharness.credited": credited, **ledger_attributes(summary)})
    span.end()


# -- meta-actions -----------------------------------------------------------------------------
def meta_action(ws: Workspace, name: Any, args: Any, ok: bool, content: str, raw: str, wall_ms: float,
                tool_call_id: str | None, detail: Any) -> None:
    """One meta-action call as a memory span (with consolidation children for a note)."""
    t = tracer()
    if t is None:
        return
    trace = _trace_module()
    ended = time.time_ns()
    started_ns = ended - int(wall_ms * 1e6)
    experience = "experience/" + "/".join(ws.namespace)
    label = name if isinstance(name, str) else "unknown"
    operation, store = {"track": ("upsert_memory", "belief"), "commit": ("upsert_memory", "progress"),
                        "recall": ("search_memory", experience), "note": ("create_memory", experience)}.get(
        label, ("execute_tool", None))
    attributes: dict[str, Any] = {OPERATION: operation, META_ACTION: label[:64], "evoharness.ok": ok}
    if store is not None:
        attributes[MEMORY_STORE_ID] = store
    if tool_call_id:
        attributes[TOOL_CALL_ID] = tool_call_id
    content_on = capture_content()
    records: list[dict[str, Any]] | None = None
    children: list[tuple[str, list[str]]] = []
    if ok and label == "track":
        key, value = getattr(args, "key", None), getattr(args, "value", None)
        if value is None:
            attributes[OPERATION] = operation = "delete_memory"
        attributes.update({MEMORY_RECORD_ID: key, MEMORY_RECORD_COUNT: 1})
        records = [{"id": key, "content": value}]
    elif ok and label == "commit":
        sub = ws.state.progress.find(getattr(args, "subgoal", ""))
        if sub is not None:
            attributes.update({MEMORY_RECORD_ID: sub.id, MEMORY_RECORD_COUNT: 1})
            records = [{"id": sub.id, "content": {"title": sub.title, "status": sub.status, "note": sub.note}}]
    elif ok and label == "recall":
        hits = detail or []
        ids = [h.entry.id for h in hits]
        attributes.update({MEMORY_RECORD_COUNT: len(ids), RECORD_IDS: ids, "gen_ai.request.top_k": getattr(args, "k", 0)})
        if content_on:
            attributes[MEMORY_QUERY_TEXT] = redact(getattr(args, "query", ""))
        records = [{"id": h.entry.id, "content": h.entry.text, "score": round(h.score, 6)} for h in hits]
    elif ok and label == "note" and detail is not None:
        entry_id = detail.entry.id
        attributes.update({MEMORY_RECORD_ID: entry_id, MEMORY_RECORD_COUNT: 1, "evoharness.note.action": detail.action})
        records = [{"id": entry_id, "content": detail.entry.text}]
        if detail.action == "merged":
            children.append(("update_memory", [entry_id]))
        if detail.replaced:
            children.append(("delete_memory", list(detail.replaced)))
    if not ok:
        attributes[ERROR_TYPE] = "MetaActionError" if content.startswith("Error: ") and "failed (" not in content else "_OTHER"
    if content_on:
        attributes[TOOL_CALL_ARGUMENTS] = redact(raw)
        attributes[TOOL_CALL_RESULT] = redact(content)
        if records is not None:
            attributes[MEMORY_RECORDS] = redact(json.dumps(records, ensure_ascii=False, default=str))
    span = t.start_span(operation if store is not None else f"execute_tool {label[:64]}", context=_parent(t, ws),
                        kind=trace.SpanKind.INTERNAL, attributes=attributes, start_time=started_ns)
    if not ok:
        span.set_status(trace.Status(trace.StatusCode.ERROR, redact(content, 200) if content_on else None))
    if children:
        inner = trace.set_span_in_context(span)
        for child_op, ids in children:
            child = t.start_span(child_op, context=inner, kind=trace.SpanKind.INTERNAL, start_time=started_ns, attributes={
                OPERATION: child_op, MEMORY_STORE_ID: store, MEMORY_RECORD_COUNT: len(ids), RECORD_IDS: ids,
                **({MEMORY_RECORD_ID: ids[0]} if len(ids) == 1 else {}), "evoharness.consolidation": "note"})
            child.end(end_time=ended)
    span.end(end_time=ended)


def consolidation(store_id: str, counts: dict[str, int], batch: Any) -> None:
    """The model consolidator's applied edits: one ``update_memory`` / ``delete_memory`` / ``create_memory`` span each."""
    t = tracer()
    if t is None:
        return
    trace = _trace_module()
    for decision in getattr(batch, "decisions", ()):
        kind = type(decision).__name__.lower()
        if kind == "merge":
            ops = [("update_memory", [decision.into]), ("delete_memory", [decision.id])]
        elif kind == "replace":
            ops = [("delete_memory", [decision.id]), ("update_memory", [decision.by])]
        elif kind == "delete":
            ops = [("delete_memory", [decision.id])]
        elif kind == "add":
            ops = [("create_memory", [])]
        else:
            continue
        for operation, ids in ops:
            attributes: dict[str, Any] = {OPERATION: operation, MEMORY_STORE_ID: store_id, MEMORY_RECORD_COUNT: max(len(ids), 1),
                                          RECORD_IDS: ids, "evoharness.consolidation": kind}
            if len(ids) == 1:
                attributes[MEMORY_RECORD_ID] = ids[0]
            t.start_span(operation, kind=trace.SpanKind.INTERNAL, attributes=attributes).end()


# -- dashboard and environment tools -----------------------------------------------------------
def dashboard(ws: Workspace, step: int, tokens: int, text: str) -> None:
    """The dashboard injection as an ``evoharness.dashboard`` event with its token count."""
    t = tracer()
    if t is None:
        return
    trace = _trace_module()
    current = trace.get_current_span()
    span = current if current.is_recording() else _run_span(t, ws)
    attributes: dict[str, Any] = {"evoharness.dashboard.tokens": tokens, "evoharness.dashboard.step": step,
                                  "evoharness.dashboard.mode": ws.inject}
    if capture_content():
        attributes["evoharness.dashboard.text"] = redact(text)
    span.add_event(DASHBOARD_EVENT, attributes)




@contextmanager
def tool_span(ws: Workspace, tool: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> Iterator[Any]:
    """Run a wrapped environment tool inside ``execute_tool {tool}``; yields the span or None."""
    t = tracer()
    if t is None:
        yield None
        return
    trace = _trace_module()
    attributes: dict[str, Any] = {OPERATION: "execute_tool", TOOL_NAME: tool, TOOL_TYPE: "function"}
    if capture_content() and (args or kwargs):
        attributes[TOOL_CALL_ARGUMENTS] = redact(json.dumps({"args": list(args), **(kwargs or {})}, default=str, ensure_ascii=False))
    span = t.start_span(f"execute_tool {tool}", context=_parent(t, ws), kind=trace.SpanKind.INTERNAL, attributes=attributes)
    with trace.use_span(span, end_on_exit=True, record_exception=True, set_status_on_exception=True):
        yield span


def observed(ws: Workspace, tool: str, result: Any, error: BaseException | str | None) -> None:
    """An observed tool outcome: on the wrapping span, or as a point-in-time ``execute_tool`` span."""
    t = tracer()
    if t is None:
        return
    trace = _trace_module()
    current = trace.get_current_span()
    content_on = capture_content()
    attributes: dict[str, Any] = {"evoharness.observed": True}
    if error is not None:
        attributes[ERROR_TYPE] = type(error).__name__ if isinstance(error, BaseException) else "ToolError"
    elif content_on:
        attributes[TOOL_CALL_RESULT] = redact(result if isinstance(result, str) else json.dumps(result, default=str, ensure_ascii=False))
    wrapping = current.is_recording() and getattr(current, "name", None) == f"execute_tool {tool}"
    if wrapping:
        current.set_attributes(attributes)
        return
    now = time.time_ns()
    span = t.start_span(f"execute_tool {tool}", context=_parent(t, ws), kind=trace.SpanKind.INTERNAL, start_time=now,
                        attributes={OPERATION: "execute_tool", TOOL_NAME: tool, TOOL_TYPE: "function", **attributes})
    if error is not None:
        message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        span.set_status(trace.Status(trace.StatusCode.ERROR, redact(message, 200) if content_on else None))
    span.end(end_time=now)
