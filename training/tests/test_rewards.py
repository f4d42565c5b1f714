"""cost_aware_reward orders rollouts by success first, then by how little harness they used."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.testing.scripted import tool_call
from evoharness_bpe_training.rewards import CostWeights, RolloutCost, cost_aware_reward, cost_aware_score


def _rollout(meta_calls: int, solved: bool) -> list[dict]:
    messages = []
    for n in range(meta_calls):
        messages.append(tool_call("track", {"key": f"k{n}", "value": "v"}))
        messages.append({"role": "tool", "name": "track", "content": f"tracked k{n} = 'v'"})
    messages.append(tool_call("open_locker", {"number": 1}))
    messages.append({"role": "tool", "name": "open_locker", "content": "Locker 1 opened." if solved else "stuck"})
    return messages


def test_success_few_calls_beats_success_many_beats_failure() -> None:
    few, many, failed = cost_aware_reward([_rollout(1, True), _rollout(6, True), _rollout(0, False)], success=[1, 1, 0])
    assert few > many > failed


def test_tokens_and_invalid_calls_cost() -> None:
    weights = CostWeights(lam=0.0, mu=0.01, invalid_penalty=0.5)
    cheap = cost_aware_score(RolloutCost(1.0, harness_tokens=10), weights)
    costly = cost_aware_score(RolloutCost(1.0, harness_tokens=50), weights)
    invalid = cost_aware_score(RolloutCost(1.0, harness_tokens=10, invalid=1), weights)
    assert cheap == pytest.approx(0.9) and costly == pytest.approx(0.5) and invalid == pytest.approx(0.4)
    refused = [tool_call("commit", {"subgoal": "x"}), {"role": "tool", "name": "commit", "content": "Error: invalid arguments"}]
    (with_error,) = cost_aware_reward([refused], success=[1], weights=weights)
    assert with_error < 1.0 - 0.5 + 1e-9


def test_charge_on_success_only() -> None:
    charged = CostWeights(lam=0.1)
    spared = CostWeights(lam=0.1, charge_on_success_only=True)
    failure = RolloutCost(0.0, meta_calls=5)
    assert cost_aware_score(failure, charged) == pytest.approx(-0.5)
    assert cost_aware_score(failure, spared) == 0.0
    assert cost_aware_score(RolloutCost(1.0, meta_calls=5), spared) == pytest.approx(0.5)


def test_metrics_are_logged_and_misuse_refused() -> None:
    logged: dict[str, float] = {}
    cost_aware_reward([_rollout(2, True)], success=[True], log_metric=logged.__setitem__)
    assert logged["harness/meta_calls"] == 2 and logged["harness/track"] == 2 and logged["harness/success"] == 1
    with pytest.raises(UserError, match="success"):
        cost_aware_reward([_rollout(1, True)])
    with pytest.raises(UserError, match="values"):
        cost_aware_reward([_rollout(1, True)], success=[1, 0])
    with pytest.raises(UserError, match="lam"):
        CostWeights(lam=-1)


def test_only_lambda_orders_rollouts_that_spend_the_same_tokens() -> None:
    """Equal success and equal harness tokens: the number of meta-action calls alone decides."""
    weights = CostWeights(lam=0.05, mu=0.002, invalid_penalty=0.0)
    one_call = RolloutCost(1.0, meta_calls=1, harness_tokens=40)
    four_calls = RolloutCost(1.0, meta_calls=4, harness_tokens=40)
    assert cost_aware_score(one_call, weights) == pytest.approx(1.0 - 0.05 - 0.08)
    assert cost_aware_score(four_calls, weights) == pytest.approx(1.0 - 0.20 - 0.08)
    assert cost_aware_score(one_call, weights) > cost_aware_score(four_calls, weights)
    free = CostWeights(lam=0.0, mu=0.002, invalid_penalty=0.0)
    assert cost_aware_score(one_call, free) == cost_aware_score(four_calls, free)  # without λ they tie


def test_lambda_outweighs_mu_when_it_is_priced_higher() -> None:
    """One call with many tokens against three calls with few: λ and μ pull in opposite directions."""
    verbose = RolloutCost(1.0, meta_calls=1, harness_tokens=300)
    chatty = RolloutCost(1.0, meta_calls=3, harness_tokens=60)
    by_calls = CostWeights(lam=0.2, mu=0.001)
    by_tokens = CostWeights(lam=0.0, mu=0.001)
    assert cost_aware_score(verbose, by_calls) - cost_aware_score(chatty, by_calls) == pytest.approx(2 * 0.2 - 240 * 0.001)
    assert cost_aware_score(verbose, by_calls) > cost_aware_score(chatty, by_calls)
    assert cost_aware_score(verbose, by_tokens) < cost_aware_score(chatty, by_tokens)


def test_cost_from_messages_counts_meta_action_arguments_and_results_only() -> None:
    from evoharness_bpe.text import approx_tokens

    from evoharness_bpe_training.rewards import rollout_cost_from_messages

    args = {"key": "plan", "value": "open locker one then two"}
    messages = [
        {"role": "assistant", "tool_calls": [{"function": {"name": "track", "arguments": json.dumps(args)}},
                                             {"function": {"name": "open_locker", "arguments": {"number": 1}}}]},
        {"role": "tool", "content": "tracked plan"},  # no name: answers the first pending call (track)
        {"role": "tool", "content": "Locker 1 opened."},  # answers open_locker: not harness
        {"role": "assistant", "tool_calls": [{"function": {"name": "recall", "arguments": {"query": "lockers"}}}]},
        {"role": "tool", "name": "recall", "content": {"error": "bad k"}},
        {"role": "assistant", "tool_calls": [{"function": {"name": "note", "arguments": "{}"}}]},
        {"role": "tool", "name": "note", "content": "Error: text is required"},
    ]
    cost = rollout_cost_from_messages(messages, 1.0)
    want = (approx_tokens(json.dumps(args)) + approx_tokens("tracked plan") + approx_tokens(json.dumps({"query": "lockers"}))
            + approx_tokens(json.dumps({"error": "bad k"})) + approx_tokens("{}") + approx_tokens("Error: text is required"))
    assert cost.harness_tokens == want
    assert cost.meta_calls == 3 and cost.by_action == {"track": 1, "commit": 0, "recall": 1, "note": 1}
    assert cost.invalid == 2 and cost.success == 1.0


def test_bound_reward_logs_each_batch_and_is_named_for_trl() -> None:
    from evoharness_bpe_training.rewards import make_cost_aware_reward

    seen: list[tuple[list, object]] = []
    reward = make_cost_aware_reward(CostWeights(lam=0.5, mu=0.0, invalid_penalty=0.0), on_rollouts=lambda envs, state: seen.append((envs, state)))
    assert reward.__name__ == "cost_aware_reward"

    class Env:
        rollout_cost = RolloutCost(1.0, meta_calls=1)

    env = Env()
    assert reward([[]], environments=(env,), trainer_state="state", weights=CostWeights(lam=0.0)) == [pytest.approx(0.5)]
    assert seen == [([env], "state")]
    assert reward([_rollout(1, True)], success=[1]) == [pytest.approx(0.5)] and len(seen) == 1


def test_logged_metrics_are_batch_means() -> None:
    logged: dict[str, float] = {}
    rollouts = [_rollout(1, True), _rollout(3, False)]
    cost_aware_reward(rollouts, success=[1, 0], log_metric=logged.__setitem__)
    assert logged["harness/meta_calls"] == 2 and logged["harness/track"] == 2 and logged["harness/commit"] == 0
    assert logged["harness/success"] == 0.5 and logged["harness/invalid"] == 0 and logged["harness/tokens"] > 0


def test_flatten_uniform_groups_by_hand() -> None:
    from evoharness_bpe_training.rewards import flatten_uniform_groups

    rewards = [0.73, 0.76, 0.76, -0.2, 0.7, 0.76, -0.4, -0.3]
    groups = ["a", "a", "a", "b", "b", "b", "c", "c"]
    successes = [1, 1, 1, 0, 1, 1, 0, 0.0]
    # a: all succeeded (0.75 each); b: the action decided, kept; c: all failed (-0.35 each)
    assert flatten_uniform_groups(rewards, groups, successes) == pytest.approx([0.75] * 3 + [-0.2, 0.7, 0.76] + [-0.35] * 2)
    assert flatten_uniform_groups([0.5], ["x"], [1]) == [0.5]
    with pytest.raises(UserError, match="one group and one success per reward"):
        flatten_uniform_groups([1.0, 0.0], ["a", "a"], [1])


def test_lift_failed_skips_by_hand() -> None:
    from evoharness_bpe_training.rewards import lift_failed_skips

    rewards = [1.0, 1.0, 0.0, 0.5, 0.2, 0.9]
    groups = ["a", "a", "a", "b", "b", "b"]
    forced = [False, False, True, False, True, True]
    # a: the skip (0.0) is below the rest's mean 1.0; b: 0.2 below the group's mean 0.533, the rest (0.5, 0.9) average 0.7
    assert lift_failed_skips(rewards, groups, forced) == pytest.approx([1.0, 1.0, 1.0, 0.5, 0.7, 0.9])
    assert lift_failed_skips(rewards, groups, [False] * 6) == rewards  # sampled actions are never lifted
    assert lift_failed_skips([0.3, 0.1], ["a", "a"], [True, True]) == pytest.approx([0.3, 0.3])
    # lifting the lowest skip raises the level (0.4875 → 0.65), which leaves the second one (0.5) below it
    assert lift_failed_skips([0.0, 0.5, 0.45, 1.0], ["g"] * 4, [True, True, False, False]) == pytest.approx([0.725, 0.725, 0.45, 1.0])
    with pytest.raises(UserError, match="one group and one forced flag per reward"):
        lift_failed_skips([1.0], ["a", "b"], [False])


def test_decoupled_parts_by_hand() -> None:
    from evoharness_bpe_training.rewards import decoupled_parts

    def record(success: float, meta: int, invalid: int = 0, tokens: int = 0) -> dict:
        return {"success": success, "meta_calls": meta, "invalid": invalid, "harness_tokens": tokens}

    weights = CostWeights(lam=0.1, mu=0.001, invalid_penalty=0.05)
    records = [record(1, 8), record(1, 7, tokens=100), record(0, 3, invalid=2), record(0, 9), record(0, 2, invalid=1)]
    groups = ["a", "a", "a", "b", "b"]
    task, cost = decoupled_parts(records, groups, weights)
    assert task == pytest.approx([1.0, 1.0, -0.1, 0.0, -0.05])
    # a: the successes pay λ per call and μ per token, the failure scores their mean; b: no success, every cost 0
    assert cost == pytest.approx([-0.8, -0.8, -0.8, 0.0, 0.0])
    task, cost = decoupled_parts([record(1, 8), record(1, 6), record(0, 5)], ["g"] * 3, CostWeights(lam=0.1))
    assert cost == pytest.approx([-0.8, -0.6, -0.7]) and task == [1.0, 1.0, 0.0]
    # an injected skip that failed is lifted to the rest's task mean (pull only); a sampled failure is not
    task, _ = decoupled_parts([record(1, 8), record(0, 6), record(0, 6)], ["g"] * 3, CostWeights(), forced=[False, True, False],
                              pull_only=True)
    assert task == pytest.approx([1.0, 0.5, 0.0])
    with pytest.raises(UserError, match="one group"):
        decoupled_parts([record(1, 8)], ["a", "b"], weights)
