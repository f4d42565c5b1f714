"""The cost-aware reward: task success minus what consulting the harness cost.

    reward = success − λ·(meta-action calls) − μ·(harness tokens) − ν·(invalid actions)

Harness tokens are those the meta-actions and the dashboards added to the context. With
``charge_on_success_only`` a failed rollout is not charged for its harness use (it already
scores 0), so the policy is never pushed to fail cheaply instead of trying.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from evoharness_bpe import META_ACTIONS
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.text import approx_tokens

__all__ = ["CostWeights", "RolloutCost", "cost_aware_score", "rollout_cost_from_messages", "cost_aware_reward", "make_cost_aware_reward",
           "lift_failed_skips", "flatten_uniform_groups", "group_members", "decoupled_parts"]


@dataclass(frozen=True)
class CostWeights:
    """The prices of harness use in reward units."""

    lam: float = 0.02
    """Price of one meta-action call."""
    mu: float = 0.0005
    """Price of one token the meta-actions and dashboards added."""
    invalid_penalty: float = 0.1
    """Price of one invalid action (refused meta-action or malformed tool call)."""
    charge_on_success_only: bool = False
    """Charge λ and μ only on successful rollouts."""

    def harness_charge(self, meta_calls: int, harness_tokens: int) -> float:
        """The price of a rollout's harness use: λ per meta-action call, μ per harness token."""
        return self.lam * meta_calls + self.mu * harness_tokens

    def __post_init__(self) -> None:
        for name in ("lam", "mu", "invalid_penalty"):
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be non-negative, got {getattr(self, name)}")


@dataclass(frozen=True)
class RolloutCost:
    """What one rollout achieved and what its harness use cost."""

    success: float
    meta_calls: int = 0
    harness_tokens: int = 0
    invalid: int = 0
    by_action: dict[str, int] | None = None


def cost_aware_score(cost: RolloutCost, weights: CostWeights = CostWeights()) -> float:
    """The reward of one rollout.

    >>> w = CostWeights(lam=0.1, mu=0.0)
    >>> cost_aware_score(RolloutCost(1.0, meta_calls=2), w) > cost_aware_score(RolloutCost(1.0, meta_calls=6), w)
    True
    """
    charge = weights.harness_charge(cost.meta_calls, cost.harness_tokens)
    if weights.charge_on_success_only and cost.success <= 0:
        charge = 0.0
    return float(cost.success) - charge - weights.invalid_penalty * cost.invalid


def rollout_cost_from_messages(completion: Sequence[dict[str, Any]], success: float) -> RolloutCost:
    """Count harness use in a completion's messages (assistant tool calls and their results).

    Used when no environment instance is at hand: meta-action calls are assistant tool calls
    named track/commit/recall/note, their tokens are the arguments plus the tool results that
    answered them, and a result starting with ``Error`` counts as invalid.
    """
    by_action = {name: 0 for name in META_ACTIONS}
    tokens = invalid = 0
    pending: list[str] = []
    for message in completion:
        role = message.get("role")
        if role == "assistant":
            pending = []
            for call in message.get("tool_calls") or []:
                fn = call.get("function", call)
                name = fn.get("name")
                pending.append(name)
                if name in by_action:
                    by_action[name] += 1
                    args = fn.get("arguments")
                    tokens += approx_tokens(args if isinstance(args, str) else json.dumps(args or {}))
        elif role == "tool":
            name = message.get("name") or (pending.pop(0) if pending else None)
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if name in by_action:
                tokens += approx_tokens(text)
            if text.startswith("Error") or text.startswith("{'error'") or text.startswith('{"error"'):
                invalid += 1
    return RolloutCost(success=success, meta_calls=sum(by_action.values()), harness_tokens=tokens, invalid=invalid, by_action=by_action)


def cost_aware_reward(
    completions: Sequence[Sequence[dict[str, Any]]],
    *,
    environments: Sequence[Any] | None = None,
    success: Sequence[float | bool] | None = None,
    weights: CostWeights = CostWeights(),
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float]:
    """TRL reward function: one cost-aware reward per completion.

    With `environments` (TRL's `environment_factory` rollouts) each instance's ``rollout_cost``
    property gives success and costs measured by the workspace's ledger; otherwise `success`
    (a dataset column) and the completion messages are used.

    >>> done = [{"role": "assistant", "tool_calls": [{"function": {"name": "commit", "arguments": "{}"}}]},
    ...         {"role": "tool", "name": "commit", "content": "batch-1: todo → done"}]
    >>> few, many = cost_aware_reward([done, done * 4], success=[1, 1])
    >>> few > many
    True
    """
    if environments is not None:
        costs = [env.rollout_cost for env in environments]
    elif success is not None:
        if len(success) != len(completions):
            raise UserError(f"success has {len(success)} values for {len(completions)} completions")
        costs = [rollout_cost_from_messages(c, float(s)) for c, s in zip(completions, success, strict=True)]
    else:
        raise UserError("cost_aware_reward needs environments (environment_factory) or a `success` dataset column")
    rewards = [cost_aware_score(c, weights) for c in costs]
    if log_metric is not None and costs:
        n = len(costs)
        log_metric("harness/meta_calls", sum(c.meta_calls for c in costs) / n)
        log_metric("harness/tokens", sum(c.harness_tokens for c in costs) / n)
        log_metric("harness/invalid", sum(c.invalid for c in costs) / n)
        log_metric("harness/success", sum(c.success for c in costs) / n)
        for action in META_ACTIONS:
            log_metric(f"harness/{action}", sum((c.by_action or {}).get(action, 0) for c in costs) / n)
    return rewards


def make_cost_aware_reward(weights: CostWeights, *, on_rollouts: Callable[[list[Any], Any], None] | None = None) -> Callable[..., list[float]]:
    """`cost_aware_reward` bound to `weights`, named so TRL logs it as ``cost_aware_reward``.

    `on_rollouts(environments, trainer_state)` is called with every scored batch (for episode logs).
    """

    def reward(completions, **kwargs):  # noqa: ANN001, ANN202 - TRL's calling convention
        kwargs.pop("weights", None)
        if on_rollouts is not None and kwargs.get("environments") is not None:
            on_rollouts(list(kwargs["environments"]), kwargs.get("trainer_state"))
        return cost_aware_reward(completions, weights=weights, **kwargs)

    reward.__name__ = "cost_aware_reward"
    return reward


def lift_failed_skips(rewards: Sequence[float], groups: Sequence[Any], forced: Sequence[bool]) -> list[float]:
    """`rewards` where every injected (`forced`) sample that scored below the rest of its group
    scores the rest's mean instead: its group-normalised advantage is then 0, never negative.

    An injected skip was not drawn from the policy: pushing its tokens down teaches nothing about
    the policy's own choice and can damage the same tokens elsewhere (a skipped opening ``recall``
    lands on the plan's first ``commit``, the policy's very next action). `groups` names each
    sample's group (its state); a skip that scores above the group's mean still pulls.
    """
    if not len(rewards) == len(groups) == len(forced):
        raise UserError(f"lift_failed_skips takes one group and one forced flag per reward, got {len(rewards)}, "
                        f"{len(groups)} and {len(forced)}")
    lifted = [float(r) for r in rewards]
    for indices in group_members(groups).values():
        raised: set[int] = set()
        while True:  # the level rises as low skips leave the rest, so look again until none is below it
            rest = [n for n in indices if n not in raised]
            level = sum(lifted[n] for n in rest) / len(rest)
            below = {n for n in rest if forced[n] and lifted[n] < level}
            if not below:
                break
            raised |= below
        for n in raised:
            lifted[n] = level
    return lifted


def group_members(groups: Sequence[Any]) -> dict[Any, list[int]]:
    """The indices of each group's samples, by group, in order."""
    members: dict[Any, list[int]] = {}
    for n, group in enumerate(groups):
        members.setdefault(group, []).append(n)
    return members


def flatten_uniform_groups(rewards: Sequence[float], groups: Sequence[Any], successes: Sequence[float]) -> list[float]:
    """`rewards` where every sample of a group whose samples all succeeded (or all failed) scores the
    group's mean: its advantage is 0, so only groups where the action decided the outcome teach.

    In a uniform group every reward difference is a price (λ per meta-call), and GRPO's division by
    the group's spread turns a saving of λ into an advantage as large as a failure's; the policy
    then walks to ever shorter paths (EvoHarness-RL's ``skip_uniform_groups`` drops such groups for
    this reason). `groups` names each sample's group, `successes` its task outcome.
    """
    if not len(rewards) == len(groups) == len(successes):
        raise UserError(f"flatten_uniform_groups takes one group and one success per reward, got {len(rewards)}, "
                        f"{len(groups)} and {len(successes)}")
    flat = [float(r) for r in rewards]
    for indices in group_members(groups).values():
        outcomes = {float(successes[n]) for n in indices}
        if len(outcomes) == 1:
            mean = sum(flat[n] for n in indices) / len(indices)
            for n in indices:
                flat[n] = mean
    return flat


def decoupled_parts(records: Sequence[dict[str, Any]], groups: Sequence[Any], weights: CostWeights, *,
                    forced: Sequence[bool] | None = None, pull_only: bool = False) -> tuple[list[float], list[float]]:
    """The cost-aware reward of each scored rollout split in two parts, for normalizing each within its
    group before they are summed (GDPO; TRL's ``multi_objective_aggregation="normalize_then_sum"``).

    The task part is success minus the price of invalid actions; with `pull_only`, an injected
    (`forced`) sample below the rest of its group is lifted to their mean (`lift_failed_skips`). The
    cost part is minus the price of harness use (λ per meta-call, μ per harness token) of a rollout
    that succeeded; a failed one scores the mean of its group's successes (0 where none succeeded),
    so the cost part ranks successes against each other alone and a failure never gains by having
    consulted less. Each `records` item holds ``success``, ``meta_calls``, ``harness_tokens`` and
    ``invalid`` (`ContinuationReward.log`'s records).
    """
    if len(records) != len(groups) or (forced is not None and len(forced) != len(records)):
        raise UserError(f"decoupled_parts takes one group (and forced flag) per record, got {len(records)} records and "
                        f"{len(groups)} groups")
    task = [float(r["success"]) - weights.invalid_penalty * int(r["invalid"]) for r in records]
    if pull_only and forced is not None:
        task = lift_failed_skips(task, groups, forced)
    succeeded = [float(r["success"]) > 0 for r in records]
    cost = [-weights.harness_charge(int(r["meta_calls"]), int(r["harness_tokens"])) for r in records]
    for indices in group_members(groups).values():
        paid = [cost[n] for n in indices if succeeded[n]]
        neutral = sum(paid) / len(paid) if paid else 0.0
        for n in indices:
            if not succeeded[n]:
                cost[n] = neutral
    return task, cost
