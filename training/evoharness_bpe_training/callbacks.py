"""Trainer callbacks: the training log and the scored samples written to the output folder as JSONL."""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import TrainerCallback

__all__ = ["MetricsFileCallback", "RecordsFileCallback"]


class MetricsFileCallback(TrainerCallback):
    """Appends every logged dict (with its step) to a JSONL file.

    A training resumed from a checkpoint starts the file again from the checkpoint's own log: the
    steps after the checkpoint, logged by the stopped try, are trained and logged again.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if state.global_step and state.is_world_process_zero:  # resumed: the checkpoint's log comes with its state
            with self.path.open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps({"step": entry["step"], **entry}, default=float) + "\n" for entry in state.log_history)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
        if logs and state.is_world_process_zero:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": state.global_step, **logs}, default=float) + "\n")


class RecordsFileCallback(TrainerCallback):
    """Appends the records a reward function has added to `records` (its log) since the last
    optimizer step to a JSONL file after every step: a stopped run keeps the samples it scored."""

    def __init__(self, records: list[dict], path: str | os.PathLike[str]) -> None:
        self.records, self.path, self.written = records, Path(path), 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # the records of this training only

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if state.is_world_process_zero and len(self.records) > self.written:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(record, default=float) + "\n" for record in self.records[self.written:])
            self.written = len(self.records)
