"""Keeping the best of periodic validations (--grpo-select-every): the selection rule on a real
module and the real trainer's callback events, then GRPO on a tiny model end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evoharness_bpe.exceptions import UserError


def _drive(callback, model, scores: dict[int, float], max_steps: int, every_weights: dict[int, object]) -> None:
    """Call the callback as `Trainer` does: train begin, one step end per update, train end; the
    trainable weights change at every update (as an optimizer step would) and are recorded."""
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir="unused", report_to="none", use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    state.max_steps = max_steps
    every_weights[0] = model.weight.detach().clone()
    callback.on_train_begin(args, state, control, model=model)
    for step in range(1, max_steps + 1):
        with torch.no_grad():
            model.weight.add_(float(step))
        every_weights[step] = model.weight.detach().clone()
        state.global_step = step
        callback.on_step_end(args, state, control, model=model)
    callback.on_train_end(args, state, control, model=model)


def test_the_best_scoring_weights_come_back_at_the_end_ties_keeping_the_earlier(tmp_path: Path) -> None:
    import torch

    from evoharness_bpe_training.selection import BestOnValidation

    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)  # frozen weights are neither copied nor restored
    bias = model.bias.detach().clone()
    scores = {0: 0.2, 2: 0.5, 4: 0.5, 5: 0.1}
    seen: list[int] = []

    def validate(m, step):  # noqa: ANN001, ANN202
        seen.append(step)
        assert torch.equal(m.weight, weights[step])  # validated with the weights of that update
        return {"score": scores[step], "success": scores[step]}

    weights: dict[int, object] = {}
    lines: list[str] = []
    callback = BestOnValidation(validate, 2, path=tmp_path / "selection.jsonl", log=lines.append)
    _drive(callback, model, scores, 5, weights)

    assert seen == [0, 2, 4, 5]  # before the first update, every 2, and after the last
    assert callback.best_step == 2 and callback.best_score == 0.5  # update 4 ties: the earlier stays
    assert torch.equal(model.weight, weights[2]) and not torch.equal(model.weight, weights[5])
    assert torch.equal(model.bias, bias)
    records = [json.loads(line) for line in (tmp_path / "selection.jsonl").read_text().splitlines()]
    assert [(r["step"], r["score"], r["best_step"]) for r in records] == [(0, 0.2, 0), (2, 0.5, 2), (4, 0.5, 2), (5, 0.1, 2)]
    assert lines[-1].startswith("[select] kept the weights of update 2")


def test_the_start_is_kept_when_no_update_beats_it_and_a_new_training_starts_a_new_log(tmp_path: Path) -> None:
    import torch

    from evoharness_bpe_training.selection import BestOnValidation

    model = torch.nn.Linear(2, 2)
    weights: dict[int, object] = {}
    callback = BestOnValidation(lambda m, step: {"score": -float(step)}, 1, path=tmp_path / "selection.jsonl")
    _drive(callback, model, {}, 3, weights)
    assert torch.equal(model.weight, weights[0])
    _drive(callback, model, {}, 2, weights)  # a rerun (a resumed stage) logs itself alone
    assert [json.loads(line)["step"] for line in (tmp_path / "selection.jsonl").read_text().splitlines()] == [0, 1, 2]
    with pytest.raises(UserError, match="at least 1"):
        BestOnValidation(lambda m, step: {"score": 0.0}, 0)


def test_fewest_calls_keeps_the_leanest_update_within_the_margin_of_the_start(tmp_path: Path) -> None:
    import torch

    from evoharness_bpe_training.selection import BestOnValidation, fewest_calls

    # run BL's validations, then a leaner update whose success fell 10 points
    measured = {0: (0.589, 0.80, 8.3), 2: (0.682, 0.85, 6.3), 4: (0.681, 0.80, 4.55), 6: (0.70, 0.70, 3.0), 8: (0.5, 0.80, 4.55)}
    results = {step: {"score": score, "success": success, "meta_calls": calls} for step, (score, success, calls) in measured.items()}
    weights: dict[int, object] = {}
    lines: list[str] = []
    callback = BestOnValidation(lambda m, step: results[step], 2, key=fewest_calls(0.05), log=lines.append)
    _drive(callback, torch.nn.Linear(2, 2), {}, 8, weights)
    assert callback.best_step == 4  # update 6 has fewer calls but 10 points less success; update 8 ties update 4: the earlier
    assert "success 0.80 at 4.55 meta-calls (best: update 4)" in lines[2]
    by_score = BestOnValidation(lambda m, step: results[step], 2)
    _drive(by_score, torch.nn.Linear(2, 2), {}, 8, {})
    assert by_score.best_step == 6  # the reward alone trades the success away
    strict = BestOnValidation(lambda m, step: results[step], 2, key=fewest_calls(0.0))
    _drive(strict, torch.nn.Linear(2, 2), {}, 8, {})
    assert strict.best_step == 4
    with pytest.raises(UserError, match="margin"):
        fewest_calls(1.0)


def test_a_start_below_every_update_is_kept_only_when_nothing_is_within_its_margin() -> None:
    from evoharness_bpe_training.selection import SELECTION_RULES, fewest_calls, selection_key
    from evoharness_bpe_training.reproduce_config import _CHOICES

    key = fewest_calls(0.05)
    first = {"success": 0.8, "meta_calls": 8.0}
    assert key({"success": 0.5, "meta_calls": 1.0}, first) < key(first, first)
    assert key({"success": 0.75, "meta_calls": 7.9}, first) > key(first, first)
    assert selection_key("score") is not key and tuple(_CHOICES["grpo_select_rule"]) == SELECTION_RULES
    with pytest.raises(UserError, match="score or fewest-calls"):
        selection_key("lowest")


def test_select_settings_are_checked_and_retrain_grpo_only(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages

    with pytest.raises(UserError, match="--grpo-select-every must be 0 or more"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_select_every=-1)
    with pytest.raises(UserError, match="--grpo-select-episodes must be at least 1"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_select_every=2, grpo_select_episodes=0)
    shared = shared_stages({"grpo_select_every": 0}, {"grpo_select_every": 4})
    assert "grpo-states" in shared and "grpo-train" not in shared
    with pytest.raises(UserError, match="--grpo-select-rule takes score or fewest-calls"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_select_rule="lowest")
    with pytest.raises(UserError, match="--grpo-select-margin"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_select_margin=-0.1)
    for name, value in (("grpo_select_rule", "fewest-calls"), ("grpo_select_margin", 0.1)):
        shared = shared_stages({}, {name: value})
        assert "grpo-states" in shared and "grpo-train" not in shared


@pytest.mark.slow
def test_grpo_ends_with_the_weights_of_its_best_validation(expert_trace, tmp_path: Path) -> None:
    """The real GRPOTrainer on a tiny LoRA model with --grpo-select-every 1: validations before the
    first update and after each, on the validation seeds, each scored with GRPO's own reward; the
    stage's model holds the weights of the best one."""
    import torch
    from peft import get_peft_model

    from evoharness_bpe import TraceWriter, read_traces
    from evoharness_bpe_training.continuation import consulting_states, state_rows
    from evoharness_bpe_training.reproduce_config import VALIDATION, load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from evoharness_bpe_training.reproduce_training import continuation_reward, lora_for, train_grpo
    from evoharness_bpe_training.tiny import build_tiny_model

    config = load_reproduce_preset("tiny", out=str(tmp_path), model="smollm2-135m", lora_r=4, window=4, dashboard_tokens=120,
                                   max_steps=6, grpo_steps=2, grpo_states_per_step=2, grpo_generations=3, grpo_skip_samples=1,
                                   grpo_continuation_calls=2, max_new_tokens=16, grpo_lr_schedule="constant",
                                   grpo_learning_rate=5e-2, grpo_select_every=1, grpo_select_episodes=2)
    base, tokenizer = build_tiny_model(layers=1, vocab_size=512)
    model = get_peft_model(base, lora_for(base, config))
    start = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    with TraceWriter(tmp_path / "grpo-states.jsonl") as writer:
        writer.write(expert_trace)
    player = policy_for(model, tokenizer, config)
    states = consulting_states(state_rows([expert_trace], player.render_prompt))[:2]

    trained, _ = train_grpo(model, tokenizer, states, config, tmp_path, "fp32", lambda line: None)

    records = [json.loads(line) for line in (tmp_path / "grpo" / "selection.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    reward = continuation_reward(config)
    for record in records:
        traces = list(read_traces(tmp_path / "grpo" / "validation" / f"update-{record['step']}.jsonl"))
        assert sorted(int(t.metadata["seed"]) for t in traces) == [VALIDATION, VALIDATION + 1]
        assert record["score"] == pytest.approx(sum(reward.episode_score(t, record["step"]) for t in traces) / len(traces))
        assert record["meta_calls"] == pytest.approx(sum(t.ledger.meta_action_calls for t in traces) / len(traces))
        assert record["success"] == sum(bool(t.outcome.success) for t in traces) / len(traces)
    best = max(records, key=lambda r: (r["score"], -r["step"]))["step"]
    assert records[-1]["best_step"] == best
    kept = {name: p for name, p in trained.named_parameters() if name in start}
    if best == 0:
        assert all(torch.equal(kept[name], before) for name, before in start.items())
    else:  # GRPO moved the adapter (lr 5e-2) and the best update's weights stayed
        assert any(not torch.equal(kept[name], before) for name, before in start.items())
