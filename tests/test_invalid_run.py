"""`EpisodeConfig.max_invalid_run`: a policy that lost the format ends its episode early."""

from __future__ import annotations

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call


def _play(script, **options):
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=12, spec_style="compact", **options)
    return run_episode(make_env("crm-migration", 1), ScriptedPolicy(script), None, config)


def test_a_run_of_invalid_actions_ends_the_episode() -> None:
    made_up = [tool_call("teleport", {"to": "done"})] * 12
    assert len(_play(made_up).model_calls) == 12  # off by default: only max_steps ends it
    trace = _play(made_up, max_invalid_run=4)
    assert len(trace.model_calls) == 4 and trace.outcome.info["invalid_actions"] == 4


def test_a_valid_action_resets_the_run() -> None:
    bad, good = tool_call("teleport", {}), tool_call("fetch_page", {"page": 1})
    refused = tool_call("commit", {"subgoal": "batch 1", "status": "finished"})  # a refused meta-action is invalid too
    trace = _play([bad, bad, good, bad, refused, bad, good, bad, bad, bad, good], max_invalid_run=3)
    assert len(trace.model_calls) == 6  # bad bad good | bad refused bad: three in a row
    assert trace.outcome.info["invalid_actions"] == 5
