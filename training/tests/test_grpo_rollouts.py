"""GRPO on a built-in environment with a policy that calls tools: rollouts parse, the harness is counted."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe_training.datasets import traces_to_sft_dataset
from evoharness_bpe_training.metrics import read_jsonl
from evoharness_bpe_training.presets import get_preset

pytestmark = pytest.mark.slow  # fine-tunes and runs GRPO on the tiny model

OPENING = {"name": "recall", "arguments": {"query": "crm migration batches rate limit rejected records", "k": 3}}


@pytest.fixture(scope="module")
def imprinted(tmp_path_factory):
    """The tiny model fine-tuned (all weights) on the expert's opening move of crm-migration episodes.

    The row is the expert's real first prompt and reply (core runner) rendered with the tool section the
    rollouts show, so the model learns to open with the expert's `recall` call in that format.
    """
    from evoharness_bpe_training.environment import harness_environment, rollout_tool_schemas
    from evoharness_bpe_training.envs import env_factory
    from evoharness_bpe_training.sft import run_sft
    from evoharness_bpe_training.tiny import build_tiny_model

    traces = []
    for seed in range(2):
        env = make_env("crm-migration", 1)
        traces.append(load_framework("core")(env, ExpertPolicy(env), None, EpisodeConfig(seed=seed)))
    rows = traces_to_sft_dataset(traces, eval_fraction=0.0)["train"]
    opening = rows.filter(lambda r: json.loads(r["completion"][0]["tool_calls"][0]["function"]["arguments"]) == OPENING["arguments"])
    assert len(opening) == 1  # both episodes open with the same prompt and move: one row once deduplicated
    schemas = json.dumps(rollout_tool_schemas(harness_environment(env_factory("crm-migration"))))
    opening = opening.map(lambda r: {"tools": schemas})
    # A larger initialisation than the default lets a few steps of full fine-tuning sharpen the logits.
    model, tokenizer = build_tiny_model(tmp_path_factory.mktemp("tiny-wide"), hidden_size=64, initializer_range=0.2)
    config = get_preset("tiny").sft_config(output_dir=str(tmp_path_factory.mktemp("imprint")), lora=False, max_steps=30,
                                           learning_rate=1e-2)
    return run_sft(config, dataset=opening, model=model, tokenizer=tokenizer)


def test_imprinted_model_rolls_out_real_tool_calls_and_the_harness_is_counted(imprinted, tmp_path) -> None:
    from evoharness_bpe_training.grpo import run_grpo

    losses = [r["loss"] for r in read_jsonl(imprinted.output_dir / "metrics.jsonl") if "loss" in r]
    assert len(losses) == 30 and losses[-1] < 0.2 < losses[0]
    config = get_preset("tiny").grpo_config(model=str(imprinted.adapter_dir), env="crm-migration", output_dir=str(tmp_path),
                                            max_steps=2, seeds=2, max_completion_length=96, max_tool_calling_iterations=1,
                                            temperature=0.2, lam=0.3, mu=0.002)
    result = run_grpo(config)
    episodes = read_jsonl(tmp_path / "episodes.jsonl")
    assert len(episodes) == 4 and {e["step"] for e in episodes} == {1, 2}
    # the rollouts parsed the model's calls and ran them in the workspace
    assert any(e["meta_calls"] > 0 and e["by_action"]["recall"] > 0 for e in episodes)
    log = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "reward" in r]
    assert [r["step"] for r in log] == [1, 2]
    assert any(r["harness/meta_calls"] > 0 and r["harness/recall"] > 0 for r in log)
    # the reward TRL trained on is the config's: success − λ·calls − μ·tokens − ν·invalid, per episode
    for row in log:
        step = [e for e in episodes if e["step"] == row["step"]]
        want = [e["success"] - 0.3 * e["meta_calls"] - 0.002 * e["harness_tokens"] - config.invalid_penalty * e["invalid"] for e in step]
        assert row["rewards/cost_aware_reward/mean"] == pytest.approx(sum(want) / len(want), abs=1e-4)
    assert result.metrics["harness"]["overall"]["meta_calls_per_episode"] > 0


def test_the_core_local_policy_speaks_the_imprinted_format(imprinted) -> None:
    """The core `TransformersPolicy` over the fine-tuned model, with the chat template's tool section."""
    from evoharness_bpe.lab.policies import TransformersPolicy
    from evoharness_bpe_training.environment import harness_environment, rollout_tool_schemas
    from evoharness_bpe_training.envs import env_factory
    from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS, opening_prompt
    from evoharness_bpe_training.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(imprinted.adapter_dir))
    policy = TransformersPolicy(model, tokenizer=tokenizer, native_tools=True, chat_template_kwargs=CHAT_TEMPLATE_KWARGS,
                                prefill="", max_new_tokens=64)
    tools = rollout_tool_schemas(harness_environment(env_factory("crm-migration")))
    reply = policy.complete(opening_prompt(make_env("crm-migration", 1), 9), tools)
    (call,) = reply["tool_calls"]
    assert call["function"]["name"] == OPENING["name"] and json.loads(call["function"]["arguments"]) == OPENING["arguments"]
    with pytest.raises(UserError, match="tokenizer"):
        TransformersPolicy(model)
