"""Trainer checkpoints on disk: which save to resume from, and the step it holds.

transformers names each save ``checkpoint-<step>`` and writes ``trainer_state.json`` last (before it
removes older saves), so a save stopped halfway lacks it and is passed over for the one before.
"""

from __future__ import annotations

import json
from pathlib import Path

from evoharness_bpe.exceptions import UserError

__all__ = ["TRAINER_STATE", "checkpoint_step", "last_checkpoint", "checkpoint_to_resume", "saved_step"]

TRAINER_STATE = "trainer_state.json"


def checkpoint_step(path: Path) -> int | None:
    """The step of a ``checkpoint-<step>`` folder (transformers' naming), or None for another name."""
    step = path.name.removeprefix("checkpoint-")
    return int(step) if step.isdigit() and path.name != step else None


def last_checkpoint(folder: Path, marker: str = TRAINER_STATE) -> str | None:
    """The newest whole checkpoint in `folder`, or None. A checkpoint is whole once it holds `marker`,
    the file its save writes last: the trainer state by default, so a save stopped halfway is passed
    over for the one before it."""
    whole = {step: path for path in Path(folder).glob("checkpoint-*")
             if (step := checkpoint_step(path)) is not None and (path / marker).is_file()}
    return str(whole[max(whole)]) if whole else None


def checkpoint_to_resume(resume_from_checkpoint: str | bool | None, output_dir: Path) -> Path | None:
    """The checkpoint a training resumes from, as transformers reads ``resume_from_checkpoint``: a
    checkpoint folder, or True for the newest whole one in `output_dir`; None or False for none.

    Raises `UserError` when there is nothing whole to resume from (checked before a model loads)."""
    if resume_from_checkpoint in (None, False, ""):
        return None
    if resume_from_checkpoint is True:
        found = last_checkpoint(output_dir)
        if found is None:
            raise UserError(f"resume_from_checkpoint: no whole checkpoint in {output_dir} (checkpoint-<step> with {TRAINER_STATE})")
        return Path(found)
    path = Path(str(resume_from_checkpoint))
    if not (path / TRAINER_STATE).is_file():
        raise UserError(f"resume_from_checkpoint {path}: not a whole checkpoint (no {TRAINER_STATE}); pass a "
                        f"checkpoint-<step> folder the training saved (save_strategy, save_steps)")
    return path


def saved_step(checkpoint: Path) -> int:
    """The optimizer steps a checkpoint's training had done (its trainer state's ``global_step``)."""
    return int(json.loads((checkpoint / TRAINER_STATE).read_text("utf-8"))["global_step"])
