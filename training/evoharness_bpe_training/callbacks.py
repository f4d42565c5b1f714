"""Trainer callbacks: the training log and the scored samples written to the output folder as JSONL."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from transformers import TrainerCallback

from .metrics import read_jsonl

__all__ = ["MetricsFileCallback", "RecordsFileCallback", "CheckpointFiles"]


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

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if state.global_step and self.path.exists():  # resumed, the file put back with its checkpoint (`CheckpointFiles`)
            self.records[:] = read_jsonl(self.path)
            self.written = len(self.records)

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if state.is_world_process_zero and len(self.records) > self.written:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.writelines(json.dumps(record, default=float) + "\n" for record in self.records[self.written:])
            self.written = len(self.records)


class CheckpointFiles(TrainerCallback):
    """Files a training writes as it goes (logs, validation traces), saved with each checkpoint of
    ``args.output_dir`` and put back when training resumes from one: they end as an unstopped
    training's would, not with what a stopped try wrote after its last save.

    Put it before the callbacks that read those files back when training begins. A checkpoint whose
    copy finished holds `MARKER`; one stopped before that is not whole (``last_checkpoint``'s `marker`).
    """

    MARKER = "files/saved.json"

    def __init__(self, paths: Sequence[str | os.PathLike[str]]) -> None:
        self.paths = [Path(p) for p in paths]

    def _kept(self, args, step: int) -> tuple[Path, list[tuple[Path, Path]]]:  # noqa: ANN001
        """The checkpoint's folder of kept files, and each path beside its copy there."""
        folder = Path(args.output_dir) / f"checkpoint-{step}" / Path(self.MARKER).parent
        return folder, [(path, folder / f"{index}-{path.name}") for index, path in enumerate(self.paths)]

    def on_save(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        if not state.is_world_process_zero:
            return
        folder, pairs = self._kept(args, state.global_step)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for path, kept in pairs:
            _copy(path, kept)
        (folder / Path(self.MARKER).name).write_text(json.dumps([str(p) for p in self.paths]), "utf-8")  # last: whole

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        folder, pairs = self._kept(args, state.global_step)
        if not state.global_step or not (folder / Path(self.MARKER).name).exists():
            return
        for path, kept in pairs:
            _remove(path)
            _copy(kept, path)


def _copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target)
    elif source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
