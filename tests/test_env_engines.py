"""ALFWorld (its own text engine on generated problems) and TextWorld (tw-make games)."""

from __future__ import annotations

import pytest

import alfworld  # noqa: F401 - the [alfworld] extra (requirements-dev.txt): missing is an error, not a skip
import textworld  # noqa: F401 - the [textworld] extra

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.envs.alfworld_problems import TASK_TYPES, generate_problem
from evoharness_bpe.lab.envs.textworld import make_game
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy, NoisyExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode

pytestmark = [pytest.mark.filterwarnings("ignore:Game .* is not fully supported"), pytest.mark.slow]  # ALFWorld and TextWorld games


def test_problems_are_seeded() -> None:
    assert generate_problem("pick_two", 4, 2) == generate_problem("pick_two", 4, 2)
    assert generate_problem("pick_two", 4, 2) != generate_problem("pick_two", 5, 2)
    assert len(generate_problem("pick_two", 4, 3)[2]) >= len(generate_problem("pick_two", 4, 1)[2]) - 2


def test_alfworld_expert_solves_every_task_type() -> None:
    env = make_env("alfworld", 1)
    try:
        for seed in range(len(TASK_TYPES)):  # the task type cycles with the seed
            trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness="bpe", seed=seed, max_steps=env.step_budget))
            assert trace.outcome.success, (seed, trace.outcome)
            assert trace.outcome.info["task_type"] == TASK_TYPES[seed]
        hard = make_env("alfworld", 3)
        trace = run_episode(hard, NoisyExpertPolicy(hard, epsilon=0.3, seed=1), None, EpisodeConfig(harness="none", seed=3, max_steps=hard.step_budget))
        assert trace.outcome.success and trace.outcome.info["invalid_actions"] > 0
        hard.close()
    finally:
        env.close()


def test_alfworld_rejects_malformed_and_impossible_commands() -> None:
    env = make_env("alfworld", 1)
    task, first = env.reset(0)
    assert task.startswith("Your task is to:") and "You are in the middle of a room" in first
    bad = env.step({"name": "act", "arguments": '{"cmd": "look"}'})
    assert bad.info["invalid"] and "needs the argument(s) command" in bad.observation
    nothing = env.step({"name": "act", "arguments": {"command": "fly to the moon"}})
    assert nothing.info["invalid"] and nothing.observation.startswith("Nothing happens")
    assert not env.outcome().success
    env.close()


def test_textworld_walkthrough_wins_and_bad_commands_are_readable(tmp_path) -> None:  # type: ignore[no-untyped-def]
    game = make_game(tmp_path / "g.z8", seed=1)
    env = make_env("textworld", 1, games=[game])
    trace = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness="bpe", seed=0, max_steps=env.step_budget))
    assert trace.outcome.success
    env.reset(0)
    result = env.step({"name": "act", "arguments": {"command": "dance wildly"}})
    assert result.info["invalid"] and "not an admissible command" in result.observation
    assert "Admissible commands:" in env.reset(0)[1]
    env.close()
