"""The reference's composite reward: every term on hand-computed cases, then on real episodes."""

from __future__ import annotations

import doctest
import importlib
import json
import math

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.testing.scripted import tool_call
from evoharness_bpe_training.reference_reward import (
    ReferenceRewardWeights,
    diversity_weight,
    reference_reward,
    reference_reward_from_trace,
    reference_reward_terms,
    repeated_actions,
    trace_actions,
)

# Only the term under test is on: λ_div_max 0 switches diversity off, λ_spam/λ_inv 0 the penalties.
ONLY_EFF = ReferenceRewardWeights(lambda_div_max=0.0, lambda_spam=0.0, lambda_invalid=0.0)
ONLY_DIV = ReferenceRewardWeights(task_reward=0.0, lambda_eff=0.0, lambda_spam=0.0, lambda_invalid=0.0)
ONLY_SPAM = ReferenceRewardWeights(lambda_div_max=0.0, lambda_invalid=0.0)
ONLY_INVALID = ReferenceRewardWeights(lambda_div_max=0.0, lambda_spam=0.0)


def test_defaults_are_the_reference_ones() -> None:
    w = ReferenceRewardWeights()
    assert (w.task_reward, w.max_steps, w.anneal_updates, w.lambda_eff, w.lambda_div_max, w.lambda_spam,
            w.lambda_invalid, w.spam_cap, w.diversity) == (10.0, 50, 150, 1.0, 1.0, 0.1, 0.1, 10, "verb_ratio")


def test_efficiency_pays_short_successes_only() -> None:
    # success in 20 of T_max = 50 steps: 10 + (50 − 20)/50 = 10.6; the same episode failed: 0
    assert reference_reward(True, 20, (), ["a"], 0, 0, ONLY_EFF) == pytest.approx(10.6)
    assert reference_reward(False, 20, (), ["a"], 0, 0, ONLY_EFF) == 0.0
    assert reference_reward(True, 0, (), [], 0, 0, ONLY_EFF) == pytest.approx(11.0)
    assert reference_reward(True, 50, (), ["a"], 0, 0, ONLY_EFF) == pytest.approx(10.0)
    # over the budget the term stays at 0, never negative
    assert reference_reward_terms(True, 80, (), ["a"], 0, 0, ONLY_EFF)["efficiency"] == 0.0
    # T_max 70 (the reference's ALFWorld budget): 14 steps → 56/70 = 0.8
    assert reference_reward(True, 14, (), ["a"], 0, 0, ReferenceRewardWeights(
        max_steps=70, lambda_div_max=0.0, lambda_spam=0.0, lambda_invalid=0.0)) == pytest.approx(10.8)
    # task reward scale is the reference's env.success_reward
    assert reference_reward(True, 25, (), ["a"], 0, 0, ReferenceRewardWeights(
        task_reward=1.0, lambda_div_max=0.0, lambda_spam=0.0, lambda_invalid=0.0)) == pytest.approx(1.5)


def test_diversity_weight_follows_the_cosine_schedule() -> None:
    assert diversity_weight(0) == pytest.approx(1.0)
    assert diversity_weight(50) == pytest.approx(0.75)  # (1 + cos(π/3)) / 2
    assert diversity_weight(75) == pytest.approx(0.5)  # U/2
    assert diversity_weight(150) == pytest.approx(0.0, abs=1e-12)  # U
    assert diversity_weight(151) == diversity_weight(10_000) == diversity_weight(150)  # held at 0 beyond U
    assert diversity_weight(5, ReferenceRewardWeights(anneal_updates=10, lambda_div_max=2.0)) == pytest.approx(1.0)
    # in the reward: all four verbs used (R_div = 1) and nothing else paid
    verbs = ["track", "commit", "recall", "note"]
    w = ReferenceRewardWeights(task_reward=0.0, lambda_spam=0.0, lambda_invalid=0.0, diversity="bpe_coverage")
    rewards = [reference_reward(False, 4, verbs, verbs, 0, u, w) for u in (0, 75, 150, 400)]
    assert rewards == pytest.approx([1.0, 0.5, 0.0, 0.0], abs=1e-12)


def test_bpe_coverage_is_the_fraction_of_the_four_verbs() -> None:
    w = ReferenceRewardWeights(task_reward=0.0, lambda_eff=0.0, lambda_spam=0.0, lambda_invalid=0.0,
                               diversity="bpe_coverage")
    assert reference_reward(False, 0, {"track", "commit"}, [], 0, 0, w) == pytest.approx(0.5)
    assert reference_reward(False, 0, ["track", "fetch_page"], [], 0, 0, w) == pytest.approx(0.25)  # not a meta-action
    assert reference_reward(False, 0, ["Recall", " note "], [], 0, 0, w) == pytest.approx(0.5)
    assert reference_reward(False, 0, [], ["track", "commit"], 0, 0, w) == 0.0  # read from verbs_used, not actions


def test_verb_ratio_is_distinct_leading_verbs_over_actions() -> None:
    def ratio(actions):
        return reference_reward_terms(False, 0, (), actions, 0, 0, ONLY_DIV)["diversity"]

    assert ratio(["go to desk 1", "go to bed 1", "take pen 1 from desk 1", "look"]) == pytest.approx(0.75)
    assert ratio(["click[3]", "click [4]", "type [5] [hi]"]) == pytest.approx(2 / 3)  # '[' ends the verb
    assert ratio(["Look", "look"]) == pytest.approx(0.5)
    assert ratio(["go north", "", "  ", "look"]) == pytest.approx(1.0)  # empty actions are not counted
    assert ratio(["", ""]) == ratio([]) == 0.0
    assert ReferenceRewardWeights().diversity == "verb_ratio"
    # the reward: failure, λ_div(0) = 1, ratio 0.75
    assert reference_reward(False, 0, (), ["go a", "go b", "take c", "look"], 0, 0, ONLY_DIV) == pytest.approx(0.75)


def test_repeats_are_consecutive_and_capped_at_ten() -> None:
    assert repeated_actions(["go north", "Go  North", "go north "]) == 2
    assert repeated_actions(["a", "b", "a", "b"]) == 0  # repeated, but never twice in a row
    assert repeated_actions(["", ""]) == 1
    assert repeated_actions([]) == repeated_actions(["a"]) == 0
    # a success in 10 steps: 10 + 0.8, then 0.1 per repeat up to 10 repeats
    for n, spam in ((5, 4), (11, 10), (15, 10), (40, 10)):
        terms = reference_reward_terms(True, 10, (), ["look"] * n, 0, 0, ONLY_SPAM)
        assert terms["repeats"] == n - 1 and terms["spam"] == spam
        assert terms["reward"] == pytest.approx(10.8 - 0.1 * spam)
    capped = ReferenceRewardWeights(lambda_div_max=0.0, lambda_invalid=0.0, spam_cap=3, lambda_spam=0.5)
    assert reference_reward(True, 10, (), ["look"] * 9, 0, 0, capped) == pytest.approx(10.8 - 1.5)


def test_invalid_actions_cost_lambda_each() -> None:
    assert reference_reward(True, 10, (), ["a"], 3, 0, ONLY_INVALID) == pytest.approx(10.8 - 0.3)
    assert reference_reward(False, 10, (), ["a"], 3, 0, ONLY_INVALID) == pytest.approx(-0.3)
    w = ReferenceRewardWeights(lambda_div_max=0.0, lambda_spam=0.0, lambda_invalid=0.5)
    assert reference_reward(False, 10, (), ["a"], 3, 0, w) == pytest.approx(-1.5)


def test_all_terms_together() -> None:
    # success in 20 of 50 steps, track and recall used, u = U/2, 3 repeats, 2 invalid:
    # 10 + 1·0.6 + 0.5·0.5 − 0.1·3 − 0.1·2 = 10.35
    w = ReferenceRewardWeights(diversity="bpe_coverage")
    actions = ["track a", "track a", "recall b", "go", "go", "go"]
    terms = reference_reward_terms(True, 20, {"track", "recall"}, actions, 2, 75, w)
    assert terms == pytest.approx({"reward": 10.35, "task": 10.0, "efficiency": 0.6, "diversity": 0.5, "lambda_div": 0.5,
                                   "repeats": 3.0, "spam": 3.0, "invalid": 2.0, "steps": 20.0})
    assert reference_reward(True, 20, {"track", "recall"}, actions, 2, 75, w) == terms["reward"]
    # the same with the default verb_ratio: verbs track, track, recall, go, go, go → 3/6
    assert reference_reward(True, 20, (), actions, 2, 75) == pytest.approx(10 + 0.6 + 0.5 * 0.5 - 0.3 - 0.2)


def test_package_exports_the_weights_and_the_trace_helper() -> None:
    import evoharness_bpe_training as package

    assert package.ReferenceRewardWeights is ReferenceRewardWeights
    assert package.reference_reward_from_trace is reference_reward_from_trace


@pytest.mark.parametrize("field, value", [
    ("max_steps", 0), ("max_steps", 2.5), ("max_steps", True), ("anneal_updates", -1), ("spam_cap", -1),
    ("lambda_eff", -0.1), ("lambda_spam", math.nan), ("lambda_div_max", math.inf), ("task_reward", -1.0),
    ("lambda_invalid", "0.1"), ("diversity", "unique"),
])
def test_weights_refuse_bad_values(field: str, value: object) -> None:
    with pytest.raises(UserError, match=field):
        ReferenceRewardWeights(**{field: value})


@pytest.mark.parametrize("kwargs, name", [
    ({"steps": -1}, "steps"), ({"invalid": 1.5}, "invalid"), ({"update": -3}, "update"),
    ({"actions": "track"}, "actions"), ({"actions": {"a", "b"}}, "actions"), ({"actions": ["a", 3]}, "actions"),
    ({"verbs_used": "track"}, "verbs_used"), ({"weights": {"max_steps": 50}}, "weights"),
])
def test_reward_refuses_bad_arguments(kwargs: dict, name: str) -> None:
    args = {"success": True, "steps": 3, "verbs_used": ["track"], "actions": ["a"], "invalid": 0, "update": 0,
            "weights": ReferenceRewardWeights(), **kwargs}
    with pytest.raises(UserError, match=name):
        reference_reward(**args)


def test_docstring_examples_hold() -> None:
    module = importlib.import_module("evoharness_bpe_training.reference_reward")
    result = doctest.testmod(module, raise_on_error=False)
    assert result.attempted >= 3 and result.failed == 0


# -- from a real episode of crm-migration, played by the scripted expert through the core loop --
CONFIG = EpisodeConfig(seed=3, spec_style="compact", window=4, dashboard_tokens=120)


class _Detour:
    """Two replies without a tool call and the same `track` twice, then the expert plays the episode."""

    def __init__(self, env) -> None:
        self.expert = ExpertPolicy(env)
        self.script = [{"role": "assistant", "content": "Let me think."},
                       {"role": "assistant", "content": "Still thinking."},
                       tool_call("track", {"key": "goal", "value": "migrate"}, "d1"),
                       tool_call("track", {"value": "migrate", "key": "goal"}, "d2")]  # same call, keys reordered

    def complete(self, messages, tools):
        if self.script:
            return self.script.pop(0)
        return self.expert.complete(messages, tools)


def _expected_steps(trace) -> int:
    return trace.outcome.info["steps"] + sum(trace.metadata["meta_actions"].values())


def test_from_trace_reads_steps_verbs_repeats_and_invalid(expert_trace) -> None:
    trace = expert_trace
    assert trace.outcome.success and trace.outcome.info["invalid_actions"] == 0
    reward, terms = reference_reward_from_trace(trace, 0, ReferenceRewardWeights(diversity="bpe_coverage"))
    # |τ|: the runner's environment steps plus each meta-action call (the ledger counts the same calls)
    meta_calls = trace.ledger.meta_action_calls
    assert meta_calls == sum(trace.metadata["meta_actions"].values()) > 0
    assert terms["steps"] == trace.outcome.info["steps"] + meta_calls
    used = {name for name, n in trace.metadata["meta_actions"].items() if n}
    assert terms["diversity"] == len(used) / 4 and terms["invalid"] == 0.0
    actions = trace_actions(trace)
    assert len(actions) == sum(len(c.response.get("tool_calls") or [None]) for c in trace.model_calls)
    assert terms["repeats"] == sum(1 for a, b in zip(actions, actions[1:]) if a == b)
    assert reward == pytest.approx(10 + (50 - terms["steps"]) / 50 + len(used) / 4 - 0.1 * min(terms["repeats"], 10))
    # later in training diversity pays less: at u = U nothing
    late, late_terms = reference_reward_from_trace(trace, 150, ReferenceRewardWeights(diversity="bpe_coverage"))
    assert late_terms["lambda_div"] == pytest.approx(0.0, abs=1e-12) and late == pytest.approx(reward - len(used) / 4)


def test_from_trace_charges_a_detour() -> None:
    env = make_env("crm-migration", 1)
    plain = run_episode(env, ExpertPolicy(env), None, CONFIG)
    env = make_env("crm-migration", 1)
    detour = run_episode(env, _Detour(env), None, CONFIG)
    assert detour.outcome.success, detour.outcome.info
    _, a = reference_reward_from_trace(plain, 0)
    _, b = reference_reward_from_trace(detour, 0)
    # the two track calls are two more steps; the two silent replies are two invalid actions and
    # one repeat ("" after ""), the second track (its arguments reordered) is a second repeat
    track = 'track {"key": "goal", "value": "migrate"}'
    assert trace_actions(detour)[:4] == ["", "", track, track]
    assert b["steps"] == a["steps"] + 2 == _expected_steps(detour)
    assert b["invalid"] == a["invalid"] + 2 == detour.outcome.info["invalid_actions"]
    assert b["repeats"] == a["repeats"] + 2


def test_from_trace_counts_meta_actions_in_the_replies_without_the_runner_count(expert_trace) -> None:
    recorded = reference_reward_from_trace(expert_trace, 0, ReferenceRewardWeights(diversity="bpe_coverage"))
    bare = expert_trace.model_copy(deep=True)
    del bare.metadata["meta_actions"]
    assert reference_reward_from_trace(bare, 0, ReferenceRewardWeights(diversity="bpe_coverage")) == recorded
    # and from the assistant messages when the trace has no model calls (a framework recorder's trace)
    bare.model_calls = []
    assert reference_reward_from_trace(bare, 0, ReferenceRewardWeights(diversity="bpe_coverage")) == recorded


def test_from_trace_failure_earns_no_task_or_efficiency_term() -> None:
    env = make_env("crm-migration", 1)
    cut = run_episode(env, ExpertPolicy(env), None, CONFIG.model_copy(update={"max_steps": 3}))
    assert cut.outcome.success is False
    reward, terms = reference_reward_from_trace(cut, 0)
    assert terms["task"] == terms["efficiency"] == 0.0
    assert reward == pytest.approx(terms["diversity"] - 0.1 * terms["spam"] - 0.1 * terms["invalid"])


def test_from_trace_needs_the_runner_counters(expert_trace) -> None:
    bare = expert_trace.model_copy(deep=True)
    bare.outcome.info.pop("steps")
    with pytest.raises(UserError, match=r"outcome.info\['steps'\]"):
        reference_reward_from_trace(bare, 0)
    unknown = expert_trace.model_copy(deep=True)
    unknown.outcome.success = None
    with pytest.raises(UserError, match="outcome.success"):
        reference_reward_from_trace(unknown, 0)
    with pytest.raises(UserError, match="Trace"):
        reference_reward_from_trace(json.loads(expert_trace.model_dump_json()), 0)
