"""`evoharness export otel` and `read_otlp_json`: bad input gets a clear error; messages convert both ways."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")

from evoharness_bpe import Trace, TraceWriter
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.cli import main
from evoharness_bpe.otlp import from_genai_messages, read_otlp_json, to_genai_messages, traces_endpoint
from evoharness_bpe.testing.otlp import OTLPReceiver


@pytest.fixture
def traces(tmp_path):
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(Trace(task="t", messages=[{"role": "user", "content": "hi"}]))
    return path


def test_a_refusing_endpoint_is_a_one_line_error(traces, capsys) -> None:
    with OTLPReceiver(status=401) as receiver:
        assert main(["export", "otel", str(traces), "--endpoint", receiver.url]) == 1
    err = capsys.readouterr().err
    assert "refused the spans or could not be reached" in err and receiver.url in err


@pytest.mark.parametrize("argv, message", [
    (["--endpoint", "ftp://collector:4318"], "must be an http:// or https:// URL"),
    (["--endpoint", "http://127.0.0.1:9"], None),
])
def test_bad_endpoints_and_paths(traces, tmp_path, capsys, monkeypatch, argv, message) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    assert main(["export", "otel", str(traces), *argv]) == 1
    assert (message or "could not be reached") in capsys.readouterr().err
    assert main(["export", "otel", str(tmp_path / "missing.jsonl"), "--endpoint", "http://127.0.0.1:9"]) == 1
    assert "is not a file" in capsys.readouterr().err


def test_traces_endpoint() -> None:
    assert traces_endpoint("http://localhost:4318/") == "http://localhost:4318/v1/traces"
    assert traces_endpoint("http://localhost:4318/v1/traces") == "http://localhost:4318/v1/traces"


def test_read_otlp_json_refuses_what_is_not_an_export(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": []}\nnot json\n')
    with pytest.raises(UserError, match="bad.json:2: not OTLP JSON"):
        read_otlp_json(bad)
    empty = tmp_path / "empty.json"
    empty.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "x", "attributes": []}]}]}]}')
    with pytest.raises(UserError, match="no evoharness episode"):
        read_otlp_json(empty)
    other = tmp_path / "other.json"
    other.write_text('{"resourceMetrics": []}')
    with pytest.raises(UserError, match="no resourceSpans"):
        read_otlp_json(other)


def test_messages_convert_both_ways() -> None:
    messages = [
        {"role": "system", "content": "You fetch."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "fetch", "arguments": '{"page":  1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "fetch", "content": "page 1"},
        {"role": "assistant", "content": "done"},
    ]
    parts = to_genai_messages(messages)
    assert parts[2]["parts"] == [{"type": "tool_call", "id": "c1", "name": "fetch", "arguments": '{"page":  1}'}]
    assert parts[3] == {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "page 1"}], "name": "fetch"}
    assert from_genai_messages(parts) == messages
    with pytest.raises(UserError, match="needs a role"):
        from_genai_messages([{"parts": []}])
