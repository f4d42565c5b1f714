"""Recorded traces as OpenTelemetry GenAI spans, out over OTLP/HTTP and back from OTLP JSON.

`export_traces` sends each episode of a JSONL trace file as one OTel trace: an ``invoke_agent``
span (the episode: task, framework, harness, outcome, the ledger's figures under
``evoharness.*``) with a ``chat`` inference span per model call (``gen_ai.usage.input_tokens``
the recorded prompt tokens, ``gen_ai.usage.output_tokens`` counted on the reply), a memory span
per meta-action (as `evoharness_bpe.telemetry` names them live) and an ``evoharness.dashboard``
event per dashboard. Headers, timeout and compression come from the standard
``OTEL_EXPORTER_OTLP_*`` variables, read by OpenTelemetry's own exporter.

Prompts, replies, tool definitions and meta-action arguments travel only with content on
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`` or ``content=True``), as
``gen_ai.input.messages`` / ``gen_ai.output.messages`` in the conventions' parts format, with
credentials masked (`evoharness_bpe.telemetry.redact`). With content on, `read_otlp_json` turns
what a collector's file exporter wrote back into `Trace` objects whose SFT rows equal those of
the JSONL trace.

Needs the ``otel`` extra: ``pip install 'evoharness-bpe[otel]'``.
"""

from __future__ import annotations

import base64
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from . import telemetry as tm
from .exceptions import UserError
from .trace import DashboardSnapshot, MetaActionEvent, ModelCall, Outcome, Trace, read_traces

__all__ = ["INSTALL", "to_genai_messages", "from_genai_messages", "traces_endpoint", "trace_spans", "export_traces",
           "read_otlp_json"]

INSTALL = "pip install 'evoharness-bpe[otel]'"
_EPISODE = "evoharness.episode.id"
_INDEX = "evoharness.model_call.index"
_ORDER = "evoharness.order"
_OPERATIONS = {"track": "upsert_memory", "commit": "upsert_memory", "recall": "search_memory", "note": "create_memory"}
_STORES = {"track": "belief", "commit": "progress"}


def _require_sdk() -> Any:
    try:
        from opentelemetry.sdk import trace as sdk_trace
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise UserError(f"exporting to OpenTelemetry needs the otel extra: {INSTALL}") from exc
    return sdk_trace


# -- messages: OpenAI chat format <-> GenAI parts ---------------------------------------------
def _masked(value: Any) -> Any:
    return tm.redact(value, None) if isinstance(value, str) else value


def to_genai_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages in the GenAI conventions' parts format (credentials masked).

    >>> to_genai_messages([{"role": "user", "content": "hi"}])
    [{'role': 'user', 'parts': [{'type': 'text', 'content': 'hi'}]}]
    """
    out = []
    for message in messages:
        role = message.get("role")
        parts: list[dict[str, Any]] = []
        content = message.get("content")
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": message.get("tool_call_id"), "response": _masked(content)})
        elif isinstance(content, list):
            for part in content:
                text = part.get("text", "") if isinstance(part, dict) else str(part)
                parts.append({"type": "text", "content": _masked(text)})
        elif content is not None:
            parts.append({"type": "text", "content": _masked(str(content))})
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            parts.append({"type": "tool_call", "id": call.get("id"), "name": fn.get("name"), "arguments": _masked(fn.get("arguments"))})
        converted: dict[str, Any] = {"role": role, "parts": parts}
        if message.get("name") is not None:
            converted["name"] = message["name"]
        out.append(converted)
    return out


def from_genai_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """GenAI parts-format messages back in the OpenAI chat format (the inverse of `to_genai_messages`)."""
    out = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise UserError(f"a GenAI message needs a role and parts, not {str(message)[:80]!r}")
        converted: dict[str, Any] = {"role": message["role"]}
        texts, calls = [], []
        for part in message.get("parts") or ():
            kind = part.get("type")
            if kind == "text":
                texts.append(part.get("content") or "")
            elif kind == "tool_call":
                calls.append({"id": part.get("id"), "type": "function",
                              "function": {"name": part.get("name"), "arguments": part.get("arguments")}})
            elif kind == "tool_call_response":
                converted["tool_call_id"] = part.get("id")
                converted["content"] = part.get("response")
        if texts:
            converted["content"] = texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
        elif "content" not in converted:
            converted["content"] = None
        if calls:
            converted["tool_calls"] = calls
        if message.get("name") is not None:
            converted["name"] = message["name"]
        out.append(converted)
    return out


def _tool_definitions(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI tool specs as the conventions' flat definitions (``{type, name, description, parameters}``)."""
    out = []
    for tool in tools:
        if set(tool) == {"type", "function"} and tool.get("type") == "function" and isinstance(tool["function"], dict):
            out.append({"type": "function", **tool["function"]})
        else:
            out.append(tool)
    return out


def _openai_tools(definitions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in definitions:
        if tool.get("type") == "function" and "function" not in tool and "name" in tool:
            out.append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
        else:
            out.append(tool)
    return out


def _split_conversation(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The agent's input (up to its first reply) and what the run added after it."""
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return messages[:first], messages[first:]


# -- export -------------------------------------------------------------------------------------
def traces_endpoint(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of `endpoint`: a base URL gets ``/v1/traces``, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` does.

    >>> traces_endpoint("https://api.smith.langchain.com/otel")
    'https://api.smith.langchain.com/otel/v1/traces'
    """
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise UserError(f"--endpoint must be an http:// or https:// URL, not {endpoint!r}")
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


def _output_tokens(response: dict[str, Any], counter: Any) -> int:
    calls = [json.dumps(c.get("function") or {}, ensure_ascii=False) for c in response.get("tool_calls") or ()]
    content = response.get("content")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False) if content else ""
    return counter("\n".join([text, *calls]).strip())


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def trace_spans(trace: Trace, tracer: Any, *, content: bool) -> None:
    """Emit one recorded episode through `tracer` (an OpenTelemetry tracer), timed from `trace.created`."""
    from opentelemetry import trace as otel
    from .text import approx_tokens

    start = int(trace.created * 1e9)
    ledger = trace.ledger
    root_attrs: dict[str, Any] = {
        tm.OPERATION: "invoke_agent", tm.AGENT_NAME: "evoharness", tm.CONVERSATION_ID: trace.episode_id,
        _EPISODE: trace.episode_id, "evoharness.trace.created": trace.created, "evoharness.framework": trace.framework,
        "evoharness.harness": trace.harness, "evoharness.env": trace.env or "",
        "evoharness.schema_version": trace.schema_version,
    }
    if trace.outcome.success is not None:
        root_attrs["evoharness.outcome.success"] = trace.outcome.success
    if trace.outcome.score is not None:
        root_attrs["evoharness.outcome.score"] = trace.outcome.score
    if ledger is not None:
        root_attrs.update(tm.ledger_attributes(ledger))
        root_attrs["evoharness.ledger"] = ledger.model_dump_json()
    if content:
        given, added = _split_conversation(trace.messages)
        root_attrs.update({"evoharness.task": tm.redact(trace.task, None), tm.INPUT_MESSAGES: _json(to_genai_messages(given)),
                           tm.OUTPUT_MESSAGES: _json(to_genai_messages(added)),
                           tm.TOOL_DEFINITIONS: _json(_tool_definitions(trace.tools)),
                           "evoharness.outcome.info": tm.redact(_json(trace.outcome.info), None),
                           "evoharness.trace.metadata": tm.redact(_json(trace.metadata), None)})
    model = str(trace.metadata.get("model") or "") if isinstance(trace.metadata, dict) else ""
    root = tracer.start_span("invoke_agent evoharness", kind=otel.SpanKind.INTERNAL, attributes=root_attrs, start_time=start)
    inner = otel.set_span_in_context(root)
    at = start
    order = 0
    for index, call in enumerate(trace.model_calls):
        attrs: dict[str, Any] = {tm.OPERATION: "chat", tm.USAGE_INPUT_TOKENS: call.prompt_tokens,
                                 tm.USAGE_OUTPUT_TOKENS: _output_tokens(call.response, approx_tokens),
                                 "evoharness.usage.output_tokens.approximate": True, _INDEX: index, _ORDER: order,
                                 "gen_ai.response.finish_reasons": ["tool_call" if call.response.get("tool_calls") else "stop"]}
        if model:
            attrs[tm.REQUEST_MODEL] = model
        if content:
            attrs[tm.INPUT_MESSAGES] = _json(to_genai_messages(call.messages))
            attrs[tm.OUTPUT_MESSAGES] = _json(to_genai_messages([{**call.response, "role": "assistant"}]))
        at += 1_000
        tracer.start_span(f"chat {model}".strip(), context=inner, kind=otel.SpanKind.CLIENT, attributes=attrs,
                          start_time=at).end(end_time=at + 1_000)
        order += 1
    for event in trace.meta_actions:
        attrs = {tm.OPERATION: _OPERATIONS.get(event.name, "execute_tool"), tm.META_ACTION: event.name, "evoharness.ok": event.ok,
                 "evoharness.step": event.step, "evoharness.cost.tokens_in": event.cost.tokens_in,
                 "evoharness.cost.tokens_out": event.cost.tokens_out, "evoharness.cost.wall_ms": event.cost.wall_ms, _ORDER: order}
        if event.name in _OPERATIONS:
            attrs[tm.MEMORY_STORE_ID] = _STORES.get(event.name, "experience")
        if event.tool_call_id:
            attrs[tm.TOOL_CALL_ID] = event.tool_call_id
        if not event.ok:
            attrs[tm.ERROR_TYPE] = "MetaActionError"
        if content:
            attrs[tm.TOOL_CALL_ARGUMENTS] = tm.redact(event.arguments, None)
            attrs[tm.TOOL_CALL_RESULT] = tm.redact(event.content, None)
        at += 1_000
        name = attrs[tm.OPERATION] if event.name in _OPERATIONS else f"execute_tool {event.name}"
        span = tracer.start_span(name, context=inner, kind=otel.SpanKind.INTERNAL, attributes=attrs, start_time=at)
        if not event.ok:
            span.set_status(otel.Status(otel.StatusCode.ERROR))
        span.end(end_time=at + max(int(event.cost.wall_ms * 1e6), 1))
        order += 1
    for snapshot in trace.dashboards:
        attrs = {"evoharness.dashboard.tokens": snapshot.tokens, "evoharness.dashboard.step": snapshot.step}
        if content:
            attrs["evoharness.dashboard.text"] = tm.redact(snapshot.text, None)
        root.add_event(tm.DASHBOARD_EVENT, attrs, timestamp=start)
    wall = int((ledger.wall_ms if ledger is not None else 0.0) * 1e6)
    root.end(end_time=max(at + 1_000, start + wall))


def export_traces(
    traces: Iterable[Trace] | str | os.PathLike[str],
    endpoint: str | None = None,
    *,
    content: bool | None = None,
    batch: int = 512,
) -> int:
    """Send traces (objects or a JSONL file) over OTLP/HTTP; return the number of spans sent.

    `endpoint` is a base URL or the full ``…/v1/traces`` one; None leaves it to
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``. `content` None
    follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. A refused or failed export
    raises `UserError` naming the endpoint; headers never appear in a message or a span.
    """
    sdk_trace = _require_sdk()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from . import __version__

    if isinstance(traces, (str, os.PathLike)):
        path = Path(traces)
        if not path.is_file():
            raise UserError(f"{path} is not a file: pass a JSONL trace file (traces.jsonl of a run)")
        traces = list(read_traces(path))
    if batch < 1:
        raise UserError("batch must be a positive number of spans")
    url = traces_endpoint(endpoint) if endpoint is not None else None
    content = tm.capture_content() if content is None else content
    collected = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider(resource=Resource.create({"service.name": "evoharness"}))
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer(tm.SCOPE, __version__)
    for trace in traces:
        trace_spans(trace, tracer, content=content)
    spans = list(collected.get_finished_spans())
    exporter = OTLPSpanExporter(endpoint=url) if url is not None else OTLPSpanExporter()
    where = url or getattr(exporter, "_endpoint", "the OTEL_EXPORTER_OTLP endpoint")
    try:
        for first in range(0, len(spans), batch):
            if exporter.export(spans[first:first + batch]) is not SpanExportResult.SUCCESS:
                raise UserError(f"the OTLP endpoint {where} refused the spans or could not be reached "
                                "(check the URL and the OTEL_EXPORTER_OTLP_HEADERS it needs)")
    finally:
        exporter.shutdown()
        provider.shutdown()
    return len(spans)


# -- OTLP JSON back to traces ----------------------------------------------------------------------
def _value(value: dict[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_value(v) for v in (value["arrayValue"].get("values") or ())]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values") or ())
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(items: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value") or {}) for item in items}


def _documents(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{number}: not OTLP JSON ({exc.msg}); expected one export request per line, "
                            "as a collector's file exporter writes") from None
        if not isinstance(doc, dict):
            raise UserError(f"{path}:{number}: not an OTLP export request (a JSON object with resourceSpans)")
        yield number, doc


def _loads(value: Any, what: str, episode: str) -> Any:
    try:
        return json.loads(value)
    except (TypeError, json.JSONDecodeError):
        raise UserError(f"episode {episode}: {what} is not JSON text") from None


def read_otlp_json(path: str | os.PathLike[str]) -> list[Trace]:
    """The episodes in an OTLP JSON file (a collector file exporter's lines) as `Trace` objects.

    Only spans written by `export_traces` with content on carry the prompts and replies; an
    episode exported without content reads back with its outcome, ledger and meta-action
    costs but no messages (and so gives no SFT rows).
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} is not a file: pass the JSON file a collector's file exporter wrote")
    spans: list[dict[str, Any]] = []
    for number, doc in _documents(path):
        if "resourceSpans" not in doc and "resource_spans" not in doc:
            raise UserError(f"{path}:{number}: not an OTLP traces export request (no resourceSpans)")
        for resource in doc.get("resourceSpans") or doc.get("resource_spans") or ():
            for scope in resource.get("scopeSpans") or resource.get("scope_spans") or ():
                spans.extend(scope.get("spans") or ())
    children: dict[str, list[dict[str, Any]]] = defaultdict(list)
    roots = []
    for span in spans:
        span["_attrs"] = _attributes(span.get("attributes") or ())
        if _EPISODE in span["_attrs"] and span["_attrs"].get(tm.OPERATION) == "invoke_agent":
            roots.append(span)
        elif span.get("parentSpanId"):
            children[span["parentSpanId"]].append(span)
    if not roots:
        raise UserError(f"{path} holds no evoharness episode (no invoke_agent span with {_EPISODE})")
    roots.sort(key=lambda s: int(s.get("startTimeUnixNano") or 0))
    return [_trace_of(root, children.get(root.get("spanId"), [])) for root in roots]


def _trace_of(root: dict[str, Any], spans: list[dict[str, Any]]) -> Trace:
    from .ledger import ActionCost, LedgerSummary

    a = root["_attrs"]
    episode = a[_EPISODE]
    messages: list[dict[str, Any]] = []
    if tm.INPUT_MESSAGES in a or tm.OUTPUT_MESSAGES in a:
        messages = from_genai_messages(_loads(a.get(tm.INPUT_MESSAGES, "[]"), "gen_ai.input.messages", episode))
        messages += from_genai_messages(_loads(a.get(tm.OUTPUT_MESSAGES, "[]"), "gen_ai.output.messages", episode))
    spans = sorted(spans, key=lambda s: s["_attrs"].get(_ORDER, 0))
    calls = []
    for span in (s for s in spans if s["_attrs"].get(tm.OPERATION) == "chat"):
        sa = span["_attrs"]
        prompt = from_genai_messages(_loads(sa.get(tm.INPUT_MESSAGES, "[]"), "a chat span's input messages", episode))
        replies = from_genai_messages(_loads(sa.get(tm.OUTPUT_MESSAGES, "[]"), "a chat span's output messages", episode))
        if prompt and replies:
            calls.append((sa.get(_INDEX, len(calls)), ModelCall(messages=prompt, response=replies[0],
                                                                prompt_tokens=sa.get(tm.USAGE_INPUT_TOKENS, 0))))
    events = []
    for span in (s for s in spans if tm.META_ACTION in s["_attrs"]):
        sa = span["_attrs"]
        events.append(MetaActionEvent(
            step=sa.get("evoharness.step", 0), name=sa[tm.META_ACTION], arguments=sa.get(tm.TOOL_CALL_ARGUMENTS, ""),
            ok=sa.get("evoharness.ok", True), content=sa.get(tm.TOOL_CALL_RESULT, ""), tool_call_id=sa.get(tm.TOOL_CALL_ID),
            cost=ActionCost(tokens_in=sa.get("evoharness.cost.tokens_in", 0), tokens_out=sa.get("evoharness.cost.tokens_out", 0),
                            wall_ms=sa.get("evoharness.cost.wall_ms", 0.0))))
    dashboards = [
        DashboardSnapshot(step=ea.get("evoharness.dashboard.step", 0), text=ea.get("evoharness.dashboard.text", ""),
                          tokens=ea.get("evoharness.dashboard.tokens", 0))
        for ea in (_attributes(e.get("attributes") or ()) for e in root.get("events") or () if e.get("name") == tm.DASHBOARD_EVENT)
    ]
    ledger = LedgerSummary.model_validate_json(a["evoharness.ledger"]) if "evoharness.ledger" in a else None
    return Trace(
        episode_id=episode, created=a.get("evoharness.trace.created", int(root.get("startTimeUnixNano") or 0) / 1e9),
        task=a.get("evoharness.task", ""), framework=a.get("evoharness.framework", "core"),
        harness=a.get("evoharness.harness", "bpe"), env=a.get("evoharness.env") or None, messages=messages,
        model_calls=[call for _, call in sorted(calls, key=lambda c: c[0])],
        tools=_openai_tools(_loads(a[tm.TOOL_DEFINITIONS], "gen_ai.tool.definitions", episode)) if tm.TOOL_DEFINITIONS in a else [],
        meta_actions=events, dashboards=dashboards,
        outcome=Outcome(success=a.get("evoharness.outcome.success"), score=a.get("evoharness.outcome.score"),
                        info=_loads(a["evoharness.outcome.info"], "evoharness.outcome.info", episode) if "evoharness.outcome.info" in a else {}),
        ledger=ledger,
        metadata=_loads(a["evoharness.trace.metadata"], "evoharness.trace.metadata", episode) if "evoharness.trace.metadata" in a else {},
    )
