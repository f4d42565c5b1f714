"""Finding the save a training resumes from: the newest whole one, and a clear refusal otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.checkpoints import checkpoint_step, checkpoint_to_resume, last_checkpoint, saved_step


def _saves(folder: Path, steps: dict[int, bool]) -> None:
    """``checkpoint-<step>`` folders, whole (with a trainer state) where `steps` says so."""
    for step, whole in steps.items():
        save = folder / f"checkpoint-{step}"
        save.mkdir(parents=True)
        (save / "adapter_model.safetensors").write_bytes(b"")
        if whole:
            (save / "trainer_state.json").write_text(json.dumps({"global_step": step}), "utf-8")


def test_last_checkpoint_skips_a_save_stopped_halfway(tmp_path: Path) -> None:
    assert last_checkpoint(tmp_path / "none") is None
    _saves(tmp_path, {25: True, 50: True, 75: False})
    (tmp_path / "checkpoint-x").mkdir()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-50")
    assert checkpoint_step(tmp_path / "checkpoint-50") == 50 and checkpoint_step(tmp_path / "checkpoint-x") is None


def test_the_checkpoint_to_resume_is_the_one_named_or_the_newest_whole_one(tmp_path: Path) -> None:
    _saves(tmp_path, {2: True, 10: True, 12: False})
    assert checkpoint_to_resume(None, tmp_path) is None and checkpoint_to_resume(False, tmp_path) is None
    assert checkpoint_to_resume(True, tmp_path) == tmp_path / "checkpoint-10"  # numerically newest, not "2" > "10"
    assert checkpoint_to_resume(str(tmp_path / "checkpoint-2"), tmp_path) == tmp_path / "checkpoint-2"
    assert saved_step(tmp_path / "checkpoint-10") == 10


@pytest.mark.parametrize("resume", [True, "checkpoint-12", "checkpoint-99"])
def test_resuming_from_what_is_not_a_whole_save_is_refused_with_what_to_pass(tmp_path: Path, resume) -> None:
    _saves(tmp_path / "saves", {12: False})
    folder = tmp_path / "saves"
    with pytest.raises(UserError, match="checkpoint") as refusal:
        checkpoint_to_resume(resume if resume is True else str(folder / resume), folder)
    assert "trainer_state.json" in str(refusal.value)
