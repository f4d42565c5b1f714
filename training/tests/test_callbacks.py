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


def test_checkpoint_files_put_back_what_a_resumed_training_had_at_its_save(tmp_path: Path) -> None:
    from evoharness_bpe_training.callbacks import CheckpointFiles, RecordsFileCallback
    from evoharness_bpe_training.checkpoints import last_checkpoint

    out, checkpoints = tmp_path / "grpo", tmp_path / "checkpoints"
    rewards, traces = out / "rewards.jsonl", out / "validation"
    args, control = TrainingArguments(output_dir=str(checkpoints)), TrainerControl()
    records: list[dict] = []
    kept, writer = CheckpointFiles([rewards, traces, out / "never-written.json"]), RecordsFileCallback(records, rewards)
    state = TrainerState()
    state.global_step = 1
    records.append({"step": 0, "reward": 0.5})
    writer.on_step_end(args, state, control)
    traces.mkdir()
    (traces / "update-0.jsonl").write_text("{}\n", "utf-8")
    (checkpoints / "checkpoint-1").mkdir(parents=True)  # the trainer's own save, then the callbacks'
    (checkpoints / "checkpoint-1" / "trainer_state.json").write_text("{}", "utf-8")
    kept.on_save(args, state, control)
    state.global_step = 2  # a later update, and a save stopped before its files were copied
    records.append({"step": 1, "reward": -0.25})
    writer.on_step_end(args, state, control)
    (traces / "update-2.jsonl").write_text("{}\n", "utf-8")
    (checkpoints / "checkpoint-2").mkdir()
    (checkpoints / "checkpoint-2" / "trainer_state.json").write_text("{}", "utf-8")
    assert last_checkpoint(checkpoints) == str(checkpoints / "checkpoint-2")
    assert last_checkpoint(checkpoints, marker=CheckpointFiles.MARKER) == str(checkpoints / "checkpoint-1")

    resumed: list[dict] = []
    state.global_step = 1  # resumed from checkpoint-1: files as they were at its save, records taken up
    reader = RecordsFileCallback(resumed, rewards)
    for callback in (kept, reader):
        callback.on_train_begin(args, state, control)
    assert resumed == [{"step": 0, "reward": 0.5}]
    assert sorted(p.name for p in traces.iterdir()) == ["update-0.jsonl"]
    assert not (out / "never-written.json").exists()
    resumed.append({"step": 1, "reward": 0.75})
    reader.on_step_end(args, state, control)
    assert [json.loads(line) for line in rewards.read_text("utf-8").splitlines()] == resumed  # each record once
