"""A run's per-episode budgets against what the scripted expert's episodes take."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from evoharness_bpe_training.tiny import build_tiny_model

    return build_tiny_model(layers=1, vocab_size=512)


def test_the_expert_needs_longer_episodes_and_replies_at_difficulty_2(tiny_tokenizer) -> None:
    from evoharness_bpe_training.budgets import budget_problems, expert_needs
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS
    from evoharness_bpe_training.reproduce_config import HELD_OUT, load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import expert_traces, policy_for

    model, tokenizer = tiny_tokenizer
    config = load_reproduce_preset("cpu")
    prefill = policy_for(model, tokenizer, config).prefill
    traces = expert_traces(config, {1: [HELD_OUT], 2: [HELD_OUT, HELD_OUT + 1]})
    one, two = expert_needs(traces, tokenizer, prefill, CHAT_TEMPLATE_KWARGS)
    assert (one.difficulty, one.episodes, two.difficulty, two.episodes) == (1, 1, 2, 2)
    assert one.calls == len(traces[0].model_calls) and two.calls == max(len(t.model_calls) for t in traces[1:])
    assert two.calls > one.calls and two.reply_tokens > one.reply_tokens > 10  # a batch of ids is one token an id at least

    assert budget_problems([one, two], max_steps=two.calls, max_new_tokens=two.reply_tokens) == []
    short_calls = budget_problems([one, two], max_steps=two.calls - 1, max_new_tokens=two.reply_tokens)
    assert len(short_calls) == 1 and short_calls[0].startswith("difficulty 2:")
    assert f"--max-steps {two.calls - 1})" in short_calls[0] and "--max-new-tokens" not in short_calls[0].split(";")[0]
    short_tokens = budget_problems([one, two], max_steps=400, max_new_tokens=one.reply_tokens)
    assert len(short_tokens) == 1 and f"replies of up to {two.reply_tokens} tokens" in short_tokens[0]
    assert f"--max-steps 400 --max-new-tokens {two.reply_tokens} hold them" in short_tokens[0]


def test_the_run_checks_every_difficulty_it_evaluates(tiny_tokenizer) -> None:
    """The cpu preset trains difficulty 1 and evaluates GRPO at 1 and 2: its 50-call budget cuts
    the expert's longest held-out episode at difficulty 2, and only there."""
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import policy_for, run_budget_problems

    model, tokenizer = tiny_tokenizer
    config = load_reproduce_preset("cpu", max_new_tokens=2000)
    prefill = policy_for(model, tokenizer, config).prefill
    problems = run_budget_problems(config, ["raw", "sft", "grpo"], tokenizer, prefill)
    assert len(problems) == 1 and problems[0].startswith("difficulty 2:") and "(--max-steps 50)" in problems[0]
    assert run_budget_problems(config, ["raw", "sft"], tokenizer, prefill) == []  # difficulty 2 is GRPO's evaluation only


def test_the_presets_budgets_against_smollm2s_tokens() -> None:
    """With SmolLM2's own tokenizer: the GPU preset, which trains difficulty 2, holds the expert's
    episodes at both difficulties; the CPU preset trains difficulty 1 only, and its budgets cut
    difficulty 2 (GRPO's evaluation there), in calls and in reply tokens."""
    import inspect

    from evoharness_bpe.lab.policies import TransformersPolicy
    from evoharness_bpe_training.models import smollm2_tokenizer
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import run_budget_problems

    tokenizer = smollm2_tokenizer()
    prefill = inspect.signature(TransformersPolicy).parameters["prefill"].default
    stages = ["raw", "sft", "grpo"]
    assert run_budget_problems(load_reproduce_preset("smollm2-gpu"), stages, tokenizer, prefill) == []
    problems = run_budget_problems(load_reproduce_preset("cpu"), stages, tokenizer, prefill)
    assert len(problems) == 1 and problems[0].startswith("difficulty 2:")
    assert "(--max-steps 50)" in problems[0] and "(--max-new-tokens 128)" in problems[0]
