"""Traces → `evoharness export otel` → a real OTLP/HTTP receiver → OTLP JSON → `Trace` → the same SFT rows."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="the otel extra is not installed")

from evoharness_bpe import TraceWriter
from evoharness_bpe.lab.cli import main
from evoharness_bpe.otlp import read_otlp_json
from evoharness_bpe.testing.otlp import OTLPReceiver
from evoharness_bpe_training.datasets import trace_rows, traces_to_sft_dataset


@pytest.fixture
def episodes(run_expert, workspace_trace):
    """Real episodes of three runners: core (lockers), LangGraph and LlamaIndex (crm-migration)."""
    return [workspace_trace, run_expert("langgraph", 0), run_expert("llamaindex", 2)]


def test_sft_rows_survive_the_otlp_round_trip(episodes, tmp_path, monkeypatch, capsys) -> None:
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        for trace in episodes:
            writer.write(trace)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=lsv2_pt_not-a-real-key,Langsmith-Project=evo")
    with OTLPReceiver() as receiver:
        assert main(["export", "otel", str(path), "--endpoint", receiver.url, "--content"]) == 0
        spans = receiver.spans()
        collected = tmp_path / "otlp.json"
        collected.write_text(receiver.otlp_json())
    assert "sent" in capsys.readouterr().out
    assert receiver.headers[0]["x-api-key"] == "lsv2_pt_not-a-real-key"
    assert "not-a-real-key" not in json.dumps(spans)  # headers never become attributes
    roots = [s for s in spans if s["name"] == "invoke_agent evoharness"]
    assert len(roots) == len(episodes) and len({s["trace_id"] for s in roots}) == len(episodes)
    for trace, root in zip(episodes, roots):
        chats = sorted((s for s in spans if s["parent"] == root["span_id"] and s["attributes"].get("gen_ai.operation.name") == "chat"),
                       key=lambda s: s["attributes"]["evoharness.model_call.index"])
        assert [s["attributes"]["gen_ai.usage.input_tokens"] for s in chats] == [c.prompt_tokens for c in trace.model_calls]
        assert all(s["attributes"]["gen_ai.usage.output_tokens"] > 0 for s in chats)
        memory = [s for s in spans if s["parent"] == root["span_id"] and "evoharness.meta_action.name" in s["attributes"]]
        assert len(memory) == len(trace.meta_actions)

    back = read_otlp_json(collected)
    assert [t.episode_id for t in back] == [t.episode_id for t in episodes]
    for original, read in zip(episodes, back):
        assert trace_rows(read) == trace_rows(original)
        assert (read.framework, read.harness, read.env, read.outcome.success) == (
            original.framework, original.harness, original.env, original.outcome.success)
        assert read.ledger == original.ledger
        assert [e.model_dump() for e in read.meta_actions] == [e.model_dump() for e in original.meta_actions]
        assert read.dashboards == original.dashboards
    from_jsonl = traces_to_sft_dataset(path, eval_fraction=0.0)
    from_otlp = traces_to_sft_dataset(back, eval_fraction=0.0)
    assert from_otlp["train"].to_list() == from_jsonl["train"].to_list() and len(from_jsonl["train"]) > 0


def test_without_content_no_prompt_leaves_and_no_rows_come_back(workspace_trace, tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    with TraceWriter(path) as writer:
        writer.write(workspace_trace)
    with OTLPReceiver() as receiver:
        assert main(["export", "otel", str(path), "--endpoint", receiver.url + "/v1/traces"]) == 0
        spans = receiver.spans()
        collected = tmp_path / "otlp.json"
        collected.write_text(receiver.otlp_json())
    assert spans and not any("gen_ai.input.messages" in s["attributes"] for s in spans)
    (read,) = read_otlp_json(collected)
    assert read.episode_id == workspace_trace.episode_id and read.ledger == workspace_trace.ledger
    assert trace_rows(read) == [] and trace_rows(workspace_trace) != []
