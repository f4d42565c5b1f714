"""A real OTLP/HTTP traces receiver on loopback, for tests: decodes protobuf with ``opentelemetry-proto``.

>>> with OTLPReceiver() as receiver:  # doctest: +SKIP
...     export_traces("traces.jsonl", receiver.url)
...     [s["name"] for s in receiver.spans()]

Needs the ``otel`` extra (``opentelemetry-proto``); nothing is imported until a request arrives
or `spans` / `otlp_json` is called.
"""

from __future__ import annotations

import base64
import gzip
import json
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OTLPReceiver", "tracing_to"]


class OTLPReceiver:
    """Accepts ``POST /v1/traces`` (``application/x-protobuf``, gzip or deflate), keeps each request.

    `status` is the HTTP status it answers with (set 401 to play a receiver that refuses).
    """

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces" or receiver.status != 200:
                    self.send_response(404 if self.path != "/v1/traces" else receiver.status)
                    self.end_headers()
                    return
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with receiver._lock:
                    receiver.requests.append(request)
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        """The base URL (the exporter adds ``/v1/traces``)."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.headers.clear()

    def spans(self) -> list[dict[str, Any]]:
        """Every span received, flattened: name, hex ids, parent, kind, attributes, events, status, scope."""
        from google.protobuf.json_format import MessageToDict

        out = []
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        out.append({
                            "name": span.name,
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent": span.parent_span_id.hex() or None,
                            "kind": span.kind,
                            "scope": scope.scope.name,
                            "attributes": {a.key: _any(MessageToDict(a.value)) for a in span.attributes},
                            "events": [{"name": e.name, "attributes": {a.key: _any(MessageToDict(a.value)) for a in e.attributes}}
                                       for e in span.events],
                            "status": span.status.code,
                            "start": span.start_time_unix_nano,
                        })
        return out

    def otlp_json(self) -> str:
        """The requests as a collector's file exporter writes them: OTLP JSON, one request a line, hex ids."""
        from google.protobuf.json_format import MessageToDict

        lines = []
        with self._lock:
            requests = list(self.requests)
        for request in requests:
            doc = MessageToDict(request, use_integers_for_enums=True)
            for resource in doc.get("resourceSpans", ()):
                for scope in resource.get("scopeSpans", ()):
                    for span in scope.get("spans", ()):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if span.get(key):
                                span[key] = base64.b64decode(span[key]).hex()
            lines.append(json.dumps(doc))
        return "\n".join(lines) + "\n"


def _any(value: dict[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any(v) for v in value["arrayValue"].get("values", ())]
    return value


_switch: Any = None


@contextmanager
def tracing_to(receiver: OTLPReceiver) -> Iterator[Any]:
    """Spans of the global tracer provider go to `receiver` (OTLP/HTTP, one request a span) in the block.

    The process's global SDK `TracerProvider` is set on first use (OpenTelemetry allows it once);
    outside a block its spans go nowhere. Yields the provider.
    """
    global _switch
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    if _switch is None:
        class Switch(SpanProcessor):
            target: Any = None

            def on_start(self, span: Any, parent_context: Any = None) -> None:
                if self.target is not None:
                    self.target.on_start(span, parent_context)

            def on_end(self, span: Any) -> None:
                if self.target is not None:
                    self.target.on_end(span)

        provider = TracerProvider()
        _switch = Switch()
        provider.add_span_processor(_switch)
        trace.set_tracer_provider(provider)
    processor = SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url + "/v1/traces"))
    _switch.target = processor
    try:
        yield trace.get_tracer_provider()
    finally:
        _switch.target = None
        processor.shutdown()
