"""`run_grpo` stopped after a checkpoint and resumed from it: the updates after the save run again,
and the episode log and metrics end as an unstopped training's."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import TrainerCallback

from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.metrics import read_jsonl
from evoharness_bpe_training.presets import get_preset


class _Steps(TrainerCallback):
    """Records each finished update; with `stop_at`, Ctrl-C as that update ends (before its save)."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.stop_at = stop_at
        self.steps: list[int] = []

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001 - transformers' signature
        self.steps.append(state.global_step)
        if state.global_step == self.stop_at:
            raise KeyboardInterrupt


def _episodes_by_step(out: Path) -> dict[int, list[tuple]]:
    by_step: dict[int, list[tuple]] = {}
    for record in read_jsonl(out / "episodes.jsonl"):
        by_step.setdefault(record["step"], []).append((record["difficulty"], record["success"], record["by_action"]))
    return by_step


@pytest.mark.slow
def test_a_resumed_grpo_runs_the_updates_after_its_save_and_logs_each_once(tiny_dir, tmp_path, locker_env_cls) -> None:
    from evoharness_bpe_training.grpo import run_grpo
    from evoharness_bpe_training.models import load_model_and_tokenizer

    def train(name: str, steps: _Steps, **saving):
        config = get_preset("tiny").grpo_config(output_dir=str(tmp_path / name), difficulties="1,2", seeds=3, max_steps=3,
                                                seed=0, **saving)
        model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
        return run_grpo(config, env_factory=locker_env_cls, model=model, tokenizer=tokenizer, plots=False, callbacks=[steps])

    whole = train("whole", _Steps())
    saving = {"save_strategy": "steps", "save_steps": 1}
    with pytest.raises(KeyboardInterrupt):
        train("stopped", _Steps(stop_at=2), **saving)
    stopped = tmp_path / "stopped"
    assert 2 in _episodes_by_step(stopped)  # update 2's rollouts were logged before the stop
    assert not (stopped / "checkpoint-2").exists() and (stopped / "checkpoint-1").is_dir()

    resumed_steps = _Steps()
    resumed = train("stopped", resumed_steps, resume_from_checkpoint=True, **saving)
    assert resumed_steps.steps == [2, 3]  # update 1 came from the save
    assert _episodes_by_step(stopped) == _episodes_by_step(whole.output_dir)  # update 2's first try is gone
    assert [r["step"] for r in read_jsonl(stopped / "metrics.jsonl") if "reward" in r] == [1, 2, 3]
    assert [s["step"] for s in resumed.metrics["harness"]["by_step"]] == [1, 2, 3]
    assert (resumed.adapter_dir / "adapter_config.json").exists()


def test_resuming_needs_a_whole_checkpoint_and_says_so_before_loading_a_model(tmp_path, locker_env_cls) -> None:
    from evoharness_bpe_training.grpo import run_grpo

    half = tmp_path / "checkpoint-4"
    half.mkdir()  # a save stopped before its trainer state
    for resume in (True, str(half), str(tmp_path / "checkpoint-9")):
        config = get_preset("tiny").grpo_config(output_dir=str(tmp_path), resume_from_checkpoint=resume)
        with pytest.raises(UserError, match="checkpoint"):
            run_grpo(config, env_factory=locker_env_cls, model=None, tokenizer=None)
    assert not (tmp_path / "episodes.jsonl").exists()  # nothing written before the refusal
