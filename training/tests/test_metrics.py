"""harness_metrics: annealing over steps, evolution over difficulty, plots."""

from __future__ import annotations

from evoharness_bpe_training.metrics import episode_record, harness_metrics, plot_harness_metrics


def _record(step: int, difficulty: int, calls: int, success: bool) -> dict:
    return {"step": step, "difficulty": difficulty, "success": success, "meta_calls": calls,
            "by_action": {"track": calls, "commit": 0}, "harness_tokens": 10 * calls}


def test_grouping_by_step_and_difficulty(tmp_path) -> None:
    records = [_record(1, 1, 6, True), _record(1, 3, 8, False), _record(2, 1, 2, True), _record(2, 3, 4, True)]
    m = harness_metrics(records)
    assert [r["meta_calls_per_episode"] for r in m["by_step"]] == [7.0, 3.0]
    assert [r["success_rate"] for r in m["by_step"]] == [0.5, 1.0]
    assert [(r["difficulty"], r["meta_calls_per_episode"]) for r in m["by_difficulty"]] == [(1, 4.0), (3, 6.0)]
    assert m["overall"]["meta_calls_per_type"]["track"] == 5.0
    paths = plot_harness_metrics(m, tmp_path)
    assert [p.name for p in paths] == ["harness_annealing.png", "harness_evolution.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_records_from_traces(workspace_trace) -> None:
    record = episode_record(workspace_trace, step=3)
    assert record["meta_calls"] == 1 and record["by_action"]["track"] == 1 and record["difficulty"] == 2
    assert record["success"] and record["harness_tokens"] == workspace_trace.ledger.harness_tokens
    assert harness_metrics([workspace_trace])["overall"]["episodes"] == 1
    assert harness_metrics([])["overall"] is None
