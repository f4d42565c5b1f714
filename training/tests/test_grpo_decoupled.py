"""--grpo-aggregation decoupled: the task and cost parts reach TRL's GRPOTrainer as two reward functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_the_trainer_scores_each_batch_once_and_logs_both_parts(expert_trace, tmp_path: Path) -> None:
    """The real GRPOTrainer on a tiny model: each update plays every sampled action once (the task
    part's call), TRL logs the task and the cost part, and its logged reward is their sum at weight 1."""
    from evoharness_bpe import TraceWriter
    from evoharness_bpe_training.continuation import consulting_states, state_rows
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from evoharness_bpe_training.reproduce_training import train_grpo
    from evoharness_bpe_training.tiny import build_tiny_model

    config = load_reproduce_preset("tiny", out=str(tmp_path), window=4, dashboard_tokens=120, max_steps=30, grpo_steps=2,
                                   grpo_states_per_step=2, grpo_generations=3, grpo_skip_samples=1, grpo_continuation_calls=2,
                                   max_new_tokens=16, grpo_aggregation="decoupled", lam=0.05, mu=0.0, grpo_skip_pull_only=True)
    model, tokenizer = build_tiny_model(layers=1, vocab_size=512)
    with TraceWriter(tmp_path / "grpo-states.jsonl") as writer:
        writer.write(expert_trace)
    states = consulting_states(state_rows([expert_trace], policy_for(model, tokenizer, config).render_prompt))[:2]

    _, log = train_grpo(model, tokenizer, states, config, tmp_path, "fp32", lambda line: None)

    batch = config.grpo_states_per_step * config.grpo_generations
    assert len(log) == config.grpo_steps * batch  # scored once per update, not once per reward part
    rows = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    updates = [row for row in rows if "rewards/task_part/mean" in row]
    assert len(updates) == config.grpo_steps
    for row, step in zip(updates, range(config.grpo_steps), strict=True):
        scored = log[step * batch:(step + 1) * batch]
        successes = sum(record["success"] for record in scored) / batch
        assert row["rewards/task_part/mean"] <= successes + 1e-6  # success minus invalid prices
        assert row["rewards/cost_part/mean"] <= 0.0
        assert row["reward"] == pytest.approx(row["rewards/task_part/mean"] + row["rewards/cost_part/mean"], abs=1e-5)
