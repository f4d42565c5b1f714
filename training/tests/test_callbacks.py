"""Trainer callbacks that write what training produced as it goes."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerControl, TrainerState, TrainingArguments


def test_scored_records_reach_the_file_after_every_step_each_once(tmp_path: Path) -> None:
    from evoharness_bpe_training.callbacks import RecordsFileCallback

    path = tmp_path / "grpo" / "rewards.jsonl"
    path.parent.mkdir()
    path.write_text('{"stale": true}\n', "utf-8")  # an earlier training's records are not kept
    records: list[dict] = []
    callback = RecordsFileCallback(records, path)
    args, state, control = TrainingArguments(output_dir=str(tmp_path)), TrainerState(), TrainerControl()
    assert not path.exists()
    records.extend([{"step": 0, "reward": 0.7}, {"step": 0, "reward": 0.1}])
    callback.on_step_end(args, state, control)
    assert [json.loads(line) for line in path.read_text("utf-8").splitlines()] == records
    callback.on_step_end(args, state, control)  # nothing new: nothing written twice
    records.append({"step": 1, "reward": -0.05, "success": True})
    callback.on_step_end(args, state, control)
    assert [json.loads(line) for line in path.read_text("utf-8").splitlines()] == records
