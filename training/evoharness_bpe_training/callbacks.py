"""Trainer callbacks: the training log written to the output folder as JSONL."""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import TrainerCallback

__all__ = ["MetricsFileCallback"]


class MetricsFileCallback(TrainerCallback):
    """Appends every logged dict (with its step) to a JSONL file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
        if logs and state.is_world_process_zero:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"step": state.global_step, **logs}, default=float) + "\n")
