"""GRPO's rollout policy hands memory back at every optimizer step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest


def test_a_new_snapshot_of_the_policy_releases_the_last_one_first(tiny_dir, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Continuations play from a fresh inference copy after every optimizer step; the heap the last
    copy and its rollouts used is returned before the next copy is made (a 12-update CPU run
    otherwise grew from 12 to 23 GB resident)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evoharness_bpe_training import stages
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_training import SnapshotPolicy

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), model=AutoModelForCausalLM.from_pretrained(tiny_dir))
    snapshot = SnapshotPolicy(trainer, tokenizer, load_reproduce_preset("tiny", out=str(tmp_path)), "fp32")
    released: list[object] = []
    monkeypatch.setattr(stages, "release_memory", lambda: released.append(snapshot._policy))
    first = snapshot.current()
    assert snapshot.current() is first and released == [None]  # one copy a step
    trainer.state.global_step = 1
    second = snapshot.current()
    assert second is not first and released == [None, None]  # the last copy was dropped before releasing
