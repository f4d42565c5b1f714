"""harness_environment: an Env + Workspace as a TRL environment class."""

from __future__ import annotations

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe_training.environment import harness_environment
from evoharness_bpe_training.rewards import cost_aware_reward


def test_tools_have_the_schemas_trl_renders(locker_env_cls) -> None:
    from transformers.utils import get_json_schema

    cls = harness_environment(locker_env_cls)
    env = cls()
    locker = get_json_schema(env.open_locker)["function"]
    assert locker["name"] == "open_locker"
    assert locker["parameters"]["properties"]["number"]["type"] == "integer"
    assert locker["parameters"]["required"] == ["number"]
    commit = get_json_schema(env.commit)["function"]["parameters"]
    assert commit["required"] == ["subgoal", "status"]
    assert set(commit["properties"]["status"]["enum"]) >= {"todo", "doing", "done", "failed"}
    track = get_json_schema(env.track)["function"]["parameters"]
    assert track["properties"]["value"]["nullable"] is True or "null" in str(track["properties"]["value"])


def test_a_rollout_is_scored_from_the_workspace_ledger(locker_env_cls) -> None:
    cls = harness_environment(locker_env_cls)
    solved, wasteful, failed = cls(), cls(), cls()
    for env in (solved, wasteful, failed):
        text = env.reset(seed=1, difficulty=2)
        assert "Open lockers 1 to 2" in text and "</bpe-dashboard>" in text
    solved.track(key="plan", value="1 then 2")
    assert solved.open_locker(number=1).startswith("Locker 1 opened.")
    assert solved.open_locker(number=2) == "Locker 2 opened."
    for n in range(5):
        wasteful.track(key=f"k{n}", value="v")
    wasteful.open_locker(number=1)
    wasteful.open_locker(number=2)
    assert failed.commit(subgoal="locker 1", status="finished").startswith("Error")
    failed.open_locker(number=2)
    cost = solved.rollout_cost
    assert cost.success == 1.0 and cost.meta_calls == 1 and cost.by_action["track"] == 1
    assert cost.harness_tokens > 0 and failed.rollout_cost.invalid == 1
    rewards = cost_aware_reward([[], [], []], environments=[solved, wasteful, failed])
    assert rewards[0] > rewards[1] > rewards[2]
    record = solved.episode_record
    assert record["success"] and record["difficulty"] == 2 and record["env_steps"] == 2


def test_reset_starts_a_fresh_episode(locker_env_cls) -> None:
    env = harness_environment(locker_env_cls)()
    env.reset(seed=0, difficulty=1)
    env.track(key="a", value="b")
    env.open_locker(number=1)
    assert env.open_locker(number=1).startswith("The episode is over")
    env.reset(seed=1, difficulty=1)
    assert env.rollout_cost.meta_calls == 0 and env.rollout_cost.success == 0.0


def test_clashing_tool_names_are_refused(locker_env_cls) -> None:
    class Clash(locker_env_cls):
        def tools(self):
            return [{"type": "function", "function": {"name": "track", "description": "x", "parameters": {"type": "object", "properties": {}}}}]

    with pytest.raises(UserError, match="clash"):
        harness_environment(Clash)


def test_trl_renders_the_harness_tool_list(tiny_dir, tmp_path, locker_env_cls) -> None:
    """GRPO rollouts show the tools of traces, SFT and inference: same order, same text."""
    from evoharness_bpe.harness import episode_tools
    from evoharness_bpe_training.environment import rollout_tool_schemas
    from evoharness_bpe_training.grpo import render_harness_tools, rollout_dataset
    from evoharness_bpe_training.models import load_model_and_tokenizer
    from evoharness_bpe_training.presets import get_preset
    from trl import GRPOTrainer

    cls = harness_environment(locker_env_cls)
    expected = episode_tools(locker_env_cls(), "bpe")
    assert rollout_tool_schemas(cls) == expected
    assert [t["function"]["name"] for t in expected][-4:] == ["track", "commit", "recall", "note"]
    config = get_preset("tiny").grpo_config(output_dir=str(tmp_path), seeds=1)
    model, tokenizer = load_model_and_tokenizer("tiny", cache_dir=tiny_dir)
    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **_: [0.0] * len(completions)], args=config.grpo_config(),
                          train_dataset=rollout_dataset(config, locker_env_cls), processing_class=tokenizer, environment_factory=cls)
    generated = [t.__name__ for t in trainer._env_tools[None]]
    assert generated == sorted(generated)  # TRL's own list: the methods, alphabetically
    render_harness_tools(trainer, rollout_tool_schemas(cls))
    assert trainer._env_tools[None] == expected


def _one_long_track_and_three_short(cls):
    verbose, chatty = cls(), cls()
    for env in (verbose, chatty):
        env.reset(seed=0, difficulty=1)
    verbose.track(key="plan", value=" ".join(f"step{i} open locker one carefully" for i in range(30)))
    for n in range(3):
        chatty.track(key=f"k{n}", value="v")
    for env in (verbose, chatty):
        assert env.open_locker(number=1).startswith("Locker 1 opened.")
    return verbose, chatty


def test_lam_travels_from_the_grpo_config_to_the_reward(locker_env_cls) -> None:
    """`CostAwareGRPOConfig.lam` prices each meta-action call in the reward GRPO trains on.

    The verbose rollout makes one call with many tokens, the chatty one three short calls: with λ
    priced high the verbose one wins, with λ at zero μ alone makes the chatty one win.
    """
    from evoharness_bpe_training.grpo import CostAwareGRPOConfig
    from evoharness_bpe_training.rewards import make_cost_aware_reward

    verbose, chatty = _one_long_track_and_three_short(harness_environment(locker_env_cls))
    v, c = verbose.rollout_cost, chatty.rollout_cost
    assert (v.meta_calls, c.meta_calls) == (1, 3) and v.harness_tokens > c.harness_tokens
    token_gap = v.harness_tokens - c.harness_tokens
    mu = 0.5 / token_gap  # the token gap costs 0.5: more than 2 calls at the default λ, less than at λ=0.4
    for lam in (0.4, 0.0, 0.02):
        config = CostAwareGRPOConfig(lam=lam, mu=mu, invalid_penalty=0.0)
        reward = make_cost_aware_reward(config.weights())
        got = reward([[], []], environments=[verbose, chatty])
        want = [1.0 - lam * x.meta_calls - mu * x.harness_tokens for x in (v, c)]
        assert got == pytest.approx(want)
        assert (got[0] > got[1]) is (lam == 0.4)
