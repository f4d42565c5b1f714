"""The published EvoHarness-RL reward, a second option beside `cost_aware_score`.

    R = R_task + λ_eff·R_eff + λ_div(u)·R_div − λ_spam·min(S, C) − λ_inv·I

* R_task: `task_reward` on success, else 0;
* R_eff = (T_max − |τ|) / T_max on success, else 0, and never below 0; |τ| counts environment
  steps and meta-action calls alike (a meta-action costs one step);
* R_div: with ``bpe_coverage`` the fraction of the four meta-actions (track, commit, recall,
  note) the episode called at least once; with ``verb_ratio`` (the reference's default) the
  distinct leading verbs of the actions over the number of actions;
* S: consecutive repeats, the actions equal to the one just before them (compared lowercased,
  whitespace collapsed), capped at C (`spam_cap`);
* I: invalid actions;
* λ_div(u) = λ_div_max · (1 + cos(π · min(u, U) / U)) / 2 after u policy updates, so diversity
  is paid for while the policy explores and not at all after U updates.

The project's own reward (`rewards.cost_aware_score`) prices each meta-action call and each
harness token instead; this one pays short successful episodes and, early on, varied ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evoharness_bpe import META_ACTIONS, Trace
from evoharness_bpe.exceptions import UserError

__all__ = [
    "DiversityMode",
    "ReferenceRewardWeights",
    "diversity_weight",
    "repeated_actions",
    "reference_reward",
    "reference_reward_terms",
    "trace_actions",
    "reference_reward_from_trace",
]

DiversityMode = Literal["bpe_coverage", "verb_ratio"]
_MODES: tuple[str, ...] = ("bpe_coverage", "verb_ratio")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ReferenceRewardWeights:
    """The terms' weights and limits; the defaults are the reference's.

    The reference's training script sets `max_steps` to the environment's step budget (70 on
    ALFWorld) and `anneal_updates` to the number of training epochs (150).
    """

    task_reward: float = 10.0
    """R_task of a successful episode (the reference's ``env.success_reward``); 0 on failure."""
    max_steps: int = 50
    """T_max: the step budget R_eff is measured against."""
    anneal_updates: int = 150
    """U: the policy updates over which λ_div falls from `lambda_div_max` to 0."""
    lambda_eff: float = 1.0
    """λ_eff: weight of the efficiency term R_eff."""
    lambda_div_max: float = 1.0
    """λ_div_max: weight of the diversity term R_div at update 0."""
    lambda_spam: float = 0.1
    """λ_spam: price of one consecutive repeated action."""
    lambda_invalid: float = 0.1
    """λ_inv: price of one invalid action."""
    spam_cap: int = 10
    """C: at most this many repeats are charged."""
    diversity: DiversityMode = "verb_ratio"
    """R_div's definition: ``verb_ratio`` (the reference's default) or ``bpe_coverage``."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "anneal_updates"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise UserError(f"{name} must be a positive integer, got {value!r}")
        if not _is_int(self.spam_cap) or self.spam_cap < 0:
            raise UserError(f"spam_cap must be a non-negative integer, got {self.spam_cap!r}")
        for name in ("task_reward", "lambda_eff", "lambda_div_max", "lambda_spam", "lambda_invalid"):
            value = getattr(self, name)
            if not _is_real(value) or value < 0:
                raise UserError(f"{name} must be a finite non-negative number, got {value!r}")
        if self.diversity not in _MODES:
            raise UserError(f"diversity must be 'bpe_coverage' or 'verb_ratio', got {self.diversity!r}")


def _count(name: str, value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise UserError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def _strings(name: str, value: Any, *, ordered: bool = False) -> list[str]:
    # A bare string is a Sequence[str] too; taken as one it would count its characters.
    kind = Sequence if ordered else Collection
    if isinstance(value, (str, bytes)) or not isinstance(value, kind):
        what = "a list" if ordered else "a list or set"
        raise UserError(f"{name} must be {what} of strings, got {type(value).__name__} {value!r:.60}")
    items = list(value)
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise UserError(f"{name} must hold strings only, got {bad[0]!r}")
    return items


def diversity_weight(update: int, weights: ReferenceRewardWeights = ReferenceRewardWeights()) -> float:
    """λ_div after `update` policy updates: `lambda_div_max` at 0, half at U/2, 0 from U on.

    >>> diversity_weight(75)
    0.5
    """
    u = min(_count("update", update), weights.anneal_updates)
    return weights.lambda_div_max * (1.0 + math.cos(math.pi * u / weights.anneal_updates)) / 2.0


def _normalized(action: str) -> str:
    return " ".join(action.lower().split())


def repeated_actions(actions: Sequence[str]) -> int:
    """S: how many actions equal the one just before them (lowercased, whitespace collapsed).

    Three equal actions in a row are two repeats; an action equal to one two places back is none.

    >>> repeated_actions(["go north", "Go  north", "go north", "look", "go north"])
    2
    """
    seen = [_normalized(a) for a in _strings("actions", actions, ordered=True)]
    return sum(1 for before, now in zip(seen, seen[1:]) if now == before)


def _leading_verb(action: str) -> str:
    """The first word of an action, ``[`` ending it as a space does (``click[3]`` → ``click``)."""
    head = action.strip().split("[", 1)[0].split()
    return head[0].lower() if head else ""


def _diversity(verbs_used: list[str], actions: list[str], mode: str) -> float:
    if mode == "bpe_coverage":
        used = {v.strip().lower() for v in verbs_used}
        return len(used & set(META_ACTIONS)) / len(META_ACTIONS)
    verbs = [_leading_verb(a) for a in actions if a.strip()]
    return len(set(verbs)) / len(verbs) if verbs else 0.0


def reference_reward_terms(
    success: bool,
    steps: int,
    verbs_used: Collection[str],
    actions: Sequence[str],
    invalid: int,
    update: int,
    weights: ReferenceRewardWeights = ReferenceRewardWeights(),
) -> dict[str, float]:
    """`reference_reward` with each term, for logging.

    Keys: ``reward``, ``task`` (R_task), ``efficiency`` (R_eff), ``diversity`` (R_div),
    ``lambda_div`` (λ_div(u)), ``repeats`` (S), ``spam`` (min(S, C)), ``invalid`` (I),
    ``steps`` (|τ|).
    """
    if not isinstance(weights, ReferenceRewardWeights):
        raise UserError(f"weights must be a ReferenceRewardWeights, got {type(weights).__name__}")
    steps, invalid = _count("steps", steps), _count("invalid", invalid)
    verbs, acts = _strings("verbs_used", verbs_used), _strings("actions", actions, ordered=True)
    won = bool(success)
    task = weights.task_reward if won else 0.0
    efficiency = max(0.0, (weights.max_steps - steps) / weights.max_steps) if won else 0.0
    diversity = _diversity(verbs, acts, weights.diversity)
    lam_div = diversity_weight(update, weights)
    repeats = repeated_actions(acts)
    spam = min(repeats, weights.spam_cap)
    reward = (task + weights.lambda_eff * efficiency + lam_div * diversity
              - weights.lambda_spam * spam - weights.lambda_invalid * invalid)
    return {"reward": reward, "task": float(task), "efficiency": efficiency, "diversity": diversity,
            "lambda_div": lam_div, "repeats": float(repeats), "spam": float(spam),
            "invalid": float(invalid), "steps": float(steps)}


def reference_reward(
    success: bool,
    steps: int,
    verbs_used: Collection[str],
    actions: Sequence[str],
    invalid: int,
    update: int,
    weights: ReferenceRewardWeights = ReferenceRewardWeights(),
) -> float:
    """The reference's reward of one episode.

    `steps` is |τ|, environment steps plus meta-action calls; `verbs_used` the meta-actions the
    episode called (read by ``bpe_coverage``; names other than the four do not count);
    `actions` every action in order (read by ``verb_ratio`` and for repeats); `invalid` the
    invalid actions; `update` the policy updates made so far.

    A success in 10 of 50 steps with track and commit, no repeat, one invalid action, at update 0,
    scored by meta-action coverage: 10 + 1·0.8 + 1·0.5 − 0 − 0.1·1:

    >>> w = ReferenceRewardWeights(diversity="bpe_coverage")
    >>> round(reference_reward(True, 10, {"track", "commit"}, ["track", "go"], 1, 0, w), 6)
    11.2
    """
    return reference_reward_terms(success, steps, verbs_used, actions, invalid, update, weights)["reward"]


def _arguments_text(raw: Any) -> str:
    """Arguments as canonical JSON (sorted keys), so equal calls compare equal however written."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw.strip()
    return json.dumps(value if value is not None else {}, sort_keys=True, ensure_ascii=False)


def _replies(trace: Trace) -> list[dict[str, Any]]:
    if trace.model_calls:
        return [call.response for call in trace.model_calls]
    return [m for m in trace.messages if isinstance(m, dict) and m.get("role") == "assistant"]


def _calls(reply: dict[str, Any]) -> list[tuple[str, str]]:
    calls = reply.get("tool_calls") if isinstance(reply.get("tool_calls"), list) else []
    named = []
    for call in calls:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        fn = fn if isinstance(fn, dict) else {}
        named.append((str(fn.get("name") or ""), _arguments_text(fn.get("arguments"))))
    return named


def _meta_calls(trace: Trace) -> dict[str, int]:
    """Meta-action calls by name, valid or not: the runner's own count (``metadata["meta_actions"]``)
    where it recorded one, else the calls in the replies that the episode's harness answered."""
    recorded = trace.metadata.get("meta_actions")
    if isinstance(recorded, dict) and all(_is_int(n) and n >= 0 for n in recorded.values()):
        return {str(name): n for name, n in recorded.items() if name in META_ACTIONS}
    offered = {(t.get("function") or {}).get("name") for t in trace.tools if isinstance(t, dict)}
    answered = set(META_ACTIONS) if trace.harness == "bpe" else set(META_ACTIONS) & offered
    counts = dict.fromkeys(META_ACTIONS, 0)
    for reply in _replies(trace):
        for name, _ in _calls(reply):
            if name in answered:
                counts[name] += 1
    return counts


def trace_actions(trace: Trace) -> list[str]:
    """An episode's actions in order: ``name {arguments}`` per tool call, ``""`` per reply that
    called no tool (as the reference records a response it could not parse).

    Read from the replies of `trace.model_calls`, or of its assistant messages when it has none.
    """
    actions: list[str] = []
    for reply in _replies(trace):
        calls = _calls(reply)
        if calls:
            actions.extend(f"{name} {args}" for name, args in calls)
        else:
            actions.append("")
    return actions


def reference_reward_from_trace(
    trace: Trace, update: int, weights: ReferenceRewardWeights = ReferenceRewardWeights()
) -> tuple[float, dict[str, float]]:
    """The reference's reward of a recorded episode and its terms (`reference_reward_terms`).

    Success is ``trace.outcome.success``; |τ| is ``outcome.info["steps"]`` (environment tool
    calls, refused or not) plus the meta-action calls, valid or not (the runner's
    ``metadata["meta_actions"]``, else counted in the replies); I is ``outcome.info["invalid_actions"]`` (replies without a tool call, refused
    calls and unknown tools, as every lab runner counts them); the actions are `trace_actions`.
    A reply without a tool call is therefore charged as invalid (and as a repeat after another
    such reply) but is no step.
    """
    if not isinstance(trace, Trace):
        raise UserError(f"trace must be an evoharness_bpe.Trace, got {type(trace).__name__}")
    info = trace.outcome.info
    missing = [key for key in ("steps", "invalid_actions") if key not in info]
    if missing or trace.outcome.success is None:
        unknown = ["outcome.success"] if trace.outcome.success is None else []
        lacks = ", ".join([f"outcome.info[{k!r}]" for k in missing] + unknown)
        raise UserError(f"trace {trace.episode_id} has no {lacks}: record the episode with a runner of "
                        "evoharness_bpe.lab (core, langgraph or llamaindex), which writes them")
    by_name = _meta_calls(trace)
    terms = reference_reward_terms(
        bool(trace.outcome.success),
        _count("outcome.info['steps']", info["steps"]) + sum(by_name.values()),
        {name for name, n in by_name.items() if n},
        trace_actions(trace),
        _count("outcome.info['invalid_actions']", info["invalid_actions"]),
        update,
        weights,
    )
    return terms["reward"], terms
