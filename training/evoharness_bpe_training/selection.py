"""Keep the best of periodic validations: a training run ends with the weights that scored highest
on validation episodes (the weights it started from among them), not merely its last update's.

RL on a few states is noisy: a policy can anneal for a while and then collapse into a shortcut
(finishing at once, say) within a few updates. `BestOnValidation` scores the policy greedily before
the first update and every `every` updates, keeps a copy of the trained weights whenever the score
is strictly higher than every earlier one, and puts the best copy back when training ends.

What "best" means is a rule (`SELECTION_RULES`): ``score``, the validation's mean reward, or
``fewest-calls``, the fewest meta-action calls per episode among the validations whose success is
within a margin of the first one's (the weights training started from): the annealing target
itself, consult less at the same success.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from evoharness_bpe.exceptions import UserError

from .metrics import read_jsonl

__all__ = ["BestOnValidation", "SelectionKey", "by_score", "fewest_calls", "selection_key", "SELECTION_RULES"]

Validate = Callable[[Any, int], dict[str, Any]]
"""``validate(model, step)``: play the validation episodes with `model`; a dict with ``score`` (higher is better)
and, for ``fewest-calls``, ``success`` and ``meta_calls`` per episode."""

SelectionKey = Callable[[dict[str, Any], dict[str, Any]], tuple[float, ...]]
"""``key(result, first)``: how good a validation `result` is (higher is better), `first` the one before any update."""

SELECTION_RULES: tuple[str, ...] = ("score", "fewest-calls")


def by_score(result: dict[str, Any], first: dict[str, Any]) -> tuple[float, ...]:
    """The validation's score: its mean reward."""
    return (float(result["score"]),)


def fewest_calls(margin: float) -> SelectionKey:
    """Fewer meta-calls per episode is better among validations whose success is at least the first's
    less `margin`; one below that ranks under every one within it (the first always is)."""
    if not 0.0 <= margin < 1.0:
        raise UserError(f"a success margin is a fraction in [0, 1), got {margin}")

    def key(result: dict[str, Any], first: dict[str, Any]) -> tuple[float, ...]:
        within = float(result["success"]) >= float(first["success"]) - margin - 1e-9
        return (float(within), -float(result["meta_calls"]), float(result["success"]))

    return key


def selection_key(rule: str, margin: float = 0.05) -> SelectionKey:
    """The key of `rule` (one of `SELECTION_RULES`)."""
    if rule == "score":
        return by_score
    if rule == "fewest-calls":
        return fewest_calls(margin)
    raise UserError(f"a selection rule is {' or '.join(SELECTION_RULES)}, not {rule!r}")


class BestOnValidation(TrainerCallback):
    """A `transformers.TrainerCallback`: validate before the first update, every `every` updates and
    after the last; restore the best trainable weights (by `key`, the score by default) at the end of training.

    Ties keep the earlier weights (fewer updates away from the start). Each validation is a record in
    `records` (and a line of `path`, when given): its step, what `validate` returned, and the best
    step so far. With `weights_path` the best weights are written there too whenever they change
    (and removed once put back at the end), so that a training resumed from a checkpoint (`path` and
    `weights_path` put back as they were then) goes on with its validations and best weights
    instead of validating afresh.
    """

    def __init__(self, validate: Validate, every: int, *, path: str | os.PathLike[str] | None = None,
                 weights_path: str | os.PathLike[str] | None = None, log: Callable[[str], Any] | None = None,
                 key: SelectionKey = by_score) -> None:
        if every < 1:
            raise UserError(f"validation every {every} updates: it takes a count of at least 1")
        self.validate, self.every, self.log, self.key = validate, every, log, key
        self.path = Path(path) if path is not None else None
        self.weights_path = Path(weights_path) if weights_path is not None else None
        self.records: list[dict[str, Any]] = []
        self.best_step: int | None = None
        self.best_score = float("-inf")
        self._best_key: tuple[float, ...] | None = None
        self._best: dict[str, Any] = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201 - transformers' signature
        self.records, self.best_step, self.best_score, self._best_key, self._best = [], None, float("-inf"), None, {}
        if state.global_step and self._restore():
            return
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.unlink(missing_ok=True)  # the records of this training only
        self._check(model, int(state.global_step))

    def on_step_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        step = int(state.global_step)
        if step % self.every == 0 or step >= int(state.max_steps):
            self._check(model, step)

    def on_train_end(self, args, state, control, model=None, **kwargs):  # noqa: ANN001, ANN201
        if model is None or not self._best:
            return
        parameters = dict(model.named_parameters())
        for name, saved in self._best.items():
            parameters[name].data.copy_(saved)
        if self.weights_path is not None:  # kept for a resumed training; the trained model now holds them
            self.weights_path.unlink(missing_ok=True)
        if self.log is not None:
            self.log(f"[select] kept the weights of update {self.best_step} (validation score {self.best_score:.3f})")

    def _restore(self) -> bool:
        """Take up a resumed training's validations and best weights so far from `path` and
        `weights_path`, as its checkpoint put them back (`callbacks.CheckpointFiles`); False where
        either is missing (the validations then start again with the weights training resumes from)."""
        if self.path is None or self.weights_path is None or not (self.path.exists() and self.weights_path.exists()):
            return False
        from safetensors.torch import load_file

        self.records = read_jsonl(self.path)
        if not self.records:
            return False
        self.best_step = self.records[-1]["best_step"]
        best = next(record for record in self.records if record["step"] == self.best_step)
        self.best_score, self._best_key = float(best["score"]), self.key(best, self.records[0])
        self._best = load_file(str(self.weights_path))
        if self.log is not None:
            self.log(f"[select] resumed with {len(self.records)} validations (best: update {self.best_step})")
        return True

    def _check(self, model: Any, step: int) -> None:
        if model is None:
            return
        result = dict(self.validate(model, step))
        score = float(result["score"])
        rank = self.key(result, self.records[0] if self.records else result)
        if self._best_key is None or rank > self._best_key:
            self._best_key, self.best_score, self.best_step = rank, score, step
            self._best = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
            if self.weights_path is not None:
                from safetensors.torch import save_file

                self.weights_path.parent.mkdir(parents=True, exist_ok=True)
                save_file({name: tensor.contiguous() for name, tensor in self._best.items()}, str(self.weights_path))
        record = {"step": step, **result, "best_step": self.best_step}
        self.records.append(record)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(record, default=float) + "\n")
        if self.log is not None:
            measured = f", success {result['success']:.2f} at {result['meta_calls']:.2f} meta-calls" if "meta_calls" in result else ""
            self.log(f"[select] update {step}: validation score {score:.3f}{measured} (best: update {self.best_step})")
