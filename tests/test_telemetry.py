"""OpenTelemetry GenAI spans of the core Workspace, received by a real OTLP/HTTP server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from evoharness_bpe import Workspace
from evoharness_bpe.telemetry import CAPTURE_CONTENT_ENV, redact
from evoharness_bpe.testing.otlp import OTLPReceiver, tracing_to


@pytest.fixture
def receiver():
    with OTLPReceiver() as r, tracing_to(r):
        yield r


def _episode() -> Workspace:
    ws = Workspace("Migrate 40 customer records", subgoals=["batch 1"], namespace=("acme", "crm"))
    ws.act("track", {"key": "api.rate_limit", "value": "5 requests/s"}, tool_call_id="call_1")
    ws.act("commit", {"subgoal": "batch 1", "status": "doing"})
    ws.act("note", {"text": "retry a 429 after the Retry-After delay", "tags": ["api"]})
    ws.act("note", {"text": "retry a 429 after the Retry-After delay", "tags": ["api"]})
    ws.act("recall", {"query": "429 retry"})
    ws.act("commit", {"subgoal": "batch 9", "status": "nope"})
    ws.act("track", {"key": "api.rate_limit", "value": None})
    ws.dashboard()
    ws.wrap(lambda n: n * 2, name="double")(21)
    ws.observe("fetch_page", error="HTTP 503")
    ws.finish(True)
    return ws


def _by_name(spans):
    out: dict[str, list[dict]] = {}
    for span in spans:
        out.setdefault(span["name"], []).append(span)
    return out


def test_spans_names_parentage_and_memory_attributes(receiver: OTLPReceiver) -> None:
    ws = _episode()
    spans = receiver.spans()
    named = _by_name(spans)
    (agent,) = named["invoke_agent evoharness"]
    assert agent["parent"] is None and agent["attributes"]["gen_ai.operation.name"] == "invoke_agent"
    assert {s["trace_id"] for s in spans} == {agent["trace_id"]}
    assert sorted(named) == ["create_memory", "delete_memory", "execute_tool double", "execute_tool fetch_page",
                             "invoke_agent evoharness", "search_memory", "update_memory", "upsert_memory"]
    upserts = named["upsert_memory"]
    track = next(s for s in upserts if s["attributes"]["evoharness.meta_action.name"] == "track")
    assert track["attributes"]["gen_ai.memory.store.id"] == "belief"
    assert track["attributes"]["gen_ai.memory.record.id"] == "api.rate_limit"
    assert track["attributes"]["gen_ai.tool.call.id"] == "call_1"
    commit_ok, commit_bad = [s for s in upserts if s["attributes"]["evoharness.meta_action.name"] == "commit"]
    assert commit_ok["attributes"]["gen_ai.memory.store.id"] == "progress"
    assert commit_ok["attributes"]["gen_ai.memory.record.id"] == "batch-1"
    assert commit_bad["attributes"]["error.type"] == "MetaActionError" and commit_bad["status"] == 2  # STATUS_CODE_ERROR
    (retract,) = named["delete_memory"]
    assert retract["attributes"]["gen_ai.memory.record.id"] == "api.rate_limit"
    added, merged = named["create_memory"]
    entry = ws.state.experience.noted[0]
    assert [s["attributes"]["evoharness.note.action"] for s in (added, merged)] == ["added", "merged"]
    assert added["attributes"]["gen_ai.memory.store.id"] == "experience/acme/crm"
    assert added["attributes"]["gen_ai.memory.record.id"] == entry
    (update,) = named["update_memory"]  # the merge, under the note that caused it
    assert update["parent"] == merged["span_id"] and update["attributes"]["gen_ai.memory.record.id"] == entry
    (search,) = named["search_memory"]
    assert search["attributes"]["gen_ai.memory.record.count"] == 1
    assert search["attributes"]["evoharness.memory.record.ids"] == [entry]
    for span in spans:
        if span is not agent and span is not update:
            assert span["parent"] == agent["span_id"], span["name"]
    (failed,) = named["execute_tool fetch_page"]
    assert failed["attributes"]["gen_ai.tool.name"] == "fetch_page" and failed["status"] == 2
    assert named["execute_tool double"][0]["attributes"]["evoharness.observed"] is True
    (event,) = agent["events"]
    assert event["name"] == "evoharness.dashboard"
    assert event["attributes"]["evoharness.dashboard.tokens"] == ws.snapshots[0].tokens > 0
    summary = ws.ledger.summary()
    assert agent["attributes"]["evoharness.ledger.meta_action_calls"] == summary.meta_action_calls == 7
    assert agent["attributes"]["evoharness.ledger.invalid_calls"] == 1
    assert agent["attributes"]["evoharness.ledger.harness_tokens"] == summary.harness_tokens
    assert agent["attributes"]["evoharness.outcome.success"] is True


_CONTENT_KEYS = ("gen_ai.memory.query.text", "gen_ai.memory.records", "gen_ai.tool.call.arguments",
                 "gen_ai.tool.call.result", "evoharness.dashboard.text", "evoharness.task")


def _content_keys(spans) -> set[str]:
    keys = set()
    for span in spans:
        keys |= {k for k in span["attributes"] if k in _CONTENT_KEYS}
        for event in span["events"]:
            keys |= {k for k in event["attributes"] if k in _CONTENT_KEYS}
    return keys


def test_content_is_off_by_default(receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE_CONTENT_ENV, raising=False)
    _episode()
    spans = receiver.spans()
    assert spans and _content_keys(spans) == set()
    assert "retry a 429" not in json.dumps(spans)


def test_content_when_asked_with_credentials_masked(receiver: OTLPReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    ws = Workspace("Call the API", namespace=("acme",))
    ws.act("track", {"key": "api.key", "value": "token=s3cr3t-value-123"})
    ws.act("note", {"text": "send the header Authorization: Bearer abcdefghijklmnop1234 on every call"})
    ws.act("recall", {"query": "header"})
    ws.dashboard()
    ws.finish(True)
    spans = receiver.spans()
    assert _content_keys(spans) == set(_CONTENT_KEYS)
    search = next(s for s in spans if s["name"] == "search_memory")
    assert search["attributes"]["gen_ai.memory.query.text"] == "header"
    records = json.loads(search["attributes"]["gen_ai.memory.records"])
    assert records[0]["id"] == ws.state.experience.noted[0] and "Authorization: [redacted] on" in records[0]["content"]
    text = json.dumps(spans)
    assert "s3cr3t" not in text and "abcdefghijklmnop1234" not in text


def test_spans_nest_under_the_callers_span(receiver: OTLPReceiver) -> None:
    from opentelemetry import trace

    tracer = trace.get_tracer("host")
    with tracer.start_as_current_span("host run"):
        ws = Workspace("Nest")
        with tracer.start_as_current_span("host tool") as tool:
            ws.act("track", {"key": "k", "value": "v"})
        ws.finish(True)
    named = _by_name(receiver.spans())
    assert named["upsert_memory"][0]["parent"] == format(tool.get_span_context().span_id, "016x")
    assert named["invoke_agent evoharness"][0]["parent"] == named["host run"][0]["span_id"]


def test_consolidator_edits_are_memory_spans(receiver: OTLPReceiver) -> None:
    from evoharness_bpe import telemetry
    from evoharness_bpe.consolidator.decisions import parse_decisions

    batch = parse_decisions(json.dumps({"decisions": [{"op": "merge", "id": "a1", "into": "b2"}, {"op": "delete", "id": "c3"}]}))
    telemetry.consolidation("experience/acme", {"merge": 1, "delete": 1}, batch)
    spans = [(s["name"], s["attributes"]["gen_ai.memory.record.id"]) for s in receiver.spans()]
    assert spans == [("update_memory", "b2"), ("delete_memory", "a1"), ("delete_memory", "c3")]


def test_redact_masks_common_credentials() -> None:
    assert redact('{"api_key": "abc123", "q": "ok"}') == '{"api_key": [redacted], "q": "ok"}'
    assert redact("key sk-proj-abcdefghijklmnop and AKIAABCDEFGHIJKLMNOP") == "key [redacted] and [redacted]"
    assert redact("x" * 10, limit=4) == "xxxx…"


_NO_PROVIDER = textwrap.dedent("""
    import sys
    from evoharness_bpe import Workspace
    from evoharness_bpe.testing.otlp import OTLPReceiver

    def episode():
        ws = Workspace("g")
        ws.act("track", {"key": "k", "value": "v"})
        ws.act("note", {"text": "a lesson"})
        ws.dashboard()
        ws.wrap(lambda: 1, name="t")()
        ws.finish(True)

    episode()
    print("loaded:", sorted(m for m in sys.modules if m.startswith("opentelemetry")))
    from opentelemetry import trace  # imported, but no provider set: still nothing
    from evoharness_bpe import telemetry
    episode()
    print("tracer:", telemetry.tracer())
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    with OTLPReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")))
        provider.force_flush()
        print("before:", len(receiver.spans()))
        trace.set_tracer_provider(provider)
        episode()  # the same pipeline, now with a provider
        print("after:", len(receiver.spans()) > 0)
""")


def test_no_span_and_no_import_without_a_provider() -> None:
    out = subprocess.run([sys.executable, "-c", _NO_PROVIDER], capture_output=True, text=True, check=True,
                         env={**os.environ, "OTEL_SDK_DISABLED": ""})
    assert out.stdout.splitlines() == ["loaded: []", "tracer: None", "before: 0", "after: True"]
