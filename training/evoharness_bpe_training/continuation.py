"""Step-level cost-aware GRPO: a prompt is one state of an episode, a completion one next action,
and its reward the cost-aware score of the whole episode when the current policy plays on.

TRL's multi-turn rollouts (`run_grpo`) grow one prompt turn by turn; the harness instead shows
the model a fresh prompt before every call (the dashboard in the system prompt, only the recent
window of messages). Here every GRPO sample is exactly such a prompt, rendered as the policy
renders it at inference, so RL trains on the prompts inference sees:

1. states come from recorded episodes (`Trace.model_calls`): the prompt of call *k*, the seed,
   and the replies of calls 0…k-1;
2. TRL's `GRPOTrainer` samples a group of next actions for each state;
3. the reward of an action replays the episode to that state (the same seed, the recorded
   replies), applies the action, lets the current policy finish the episode greedily through the
   core loop, and scores it with `cost_aware_score` (success minus the price of each meta-action
   call, of harness tokens and of invalid actions).

Within a group only the action differs, so the advantage says what that action (a meta-action,
or skipping one) did to the episode's outcome and cost: the policy learns to consult its state
where it pays.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from evoharness_bpe import META_ACTIONS, Trace
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies.toolcalls import parse_tool_calls
from evoharness_bpe.lab.policies.transformers import close_call
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.lab.runner.lockstep import Lockstep

from .rewards import CostWeights, RolloutCost, cost_aware_score, decoupled_parts, flatten_uniform_groups, lift_failed_skips

__all__ = ["ContinuationPolicy", "state_rows", "consulting_states", "successful_states", "closing_states", "closing_reply", "CLOSING_ACTION", "episode_cost", "ContinuationReward", "reply_from_text",
           "reference_scorer", "DecoupledReward", "ScoredBatch"]

ChatMessage = dict[str, Any]


def reply_from_text(text: str, tools: Sequence[dict[str, Any]]) -> ChatMessage:
    """The assistant message a generated text stands for, parsed as `TransformersPolicy` parses it
    (a call cut at the end of its line is closed)."""
    calls = parse_tool_calls(close_call(text.strip()), {t["function"]["name"] for t in tools})
    if not calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": c} for n, c in enumerate(calls)]}


class ContinuationPolicy:
    """Replays recorded replies, then answers with `action`, then lets `policy` play on."""

    def __init__(self, replies: Sequence[ChatMessage], action: ChatMessage, policy: Any) -> None:
        self.script = [dict(r) for r in replies] + [dict(action)]
        self.policy = policy
        self.calls = 0

    def complete(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> ChatMessage:
        self.calls += 1
        if self.calls <= len(self.script):
            return json.loads(json.dumps(self.script[self.calls - 1]))
        return self.policy.complete(messages, tools)

    def count_prompt_tokens(self, messages: list[ChatMessage], tools: list[dict[str, Any]]) -> int | None:
        count = getattr(self.policy, "count_prompt_tokens", None)
        return count(messages, tools) if count is not None else None


def state_rows(traces: Iterable[Trace], render: Callable[[list[ChatMessage], list[dict[str, Any]]], str]) -> list[dict[str, Any]]:
    """One GRPO row per model call of `traces`: ``prompt`` (the text `render` makes of that call's
    messages and the episode's tools), ``seed``, ``difficulty``, ``replies`` (JSON of the replies
    before it), ``env``, ``position`` (the call's index), ``called`` (the tool the recorded
    reply called, ``""`` for none) and ``succeeded`` (whether the recorded episode succeeded)."""
    rows = []
    for trace in traces:
        seed = trace.metadata.get("seed")
        if seed is None:
            raise UserError(f"trace {trace.episode_id} has no seed in its metadata; record it with the core runner")
        replies: list[ChatMessage] = []
        for position, call in enumerate(trace.model_calls):
            rows.append({
                "prompt": render(call.messages, trace.tools),
                "seed": int(seed),
                "difficulty": int(trace.metadata.get("difficulty") or 1),
                "replies": json.dumps(replies),
                "env": trace.env or "",
                "position": position,
                "called": _called(call.response),
                "succeeded": bool(trace.outcome.success),
            })
            replies = [*replies, call.response]
    return rows


def _called(reply: ChatMessage) -> str:
    calls = reply.get("tool_calls") or []
    return str((calls[0].get("function") or {}).get("name") or "") if calls else ""


def consulting_states(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (`state_rows`) where the recorded policy called a meta-action: the states where
    it consulted its harness, which is what harness annealing decides."""
    return [row for row in rows if row.get("called") in META_ACTIONS]


def successful_states(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows (`state_rows`) of episodes that succeeded: states the policy can finish from, where
    a group's continuations can differ in cost and not only fail alike."""
    return [row for row in rows if row.get("succeeded")]


CLOSING_ACTION = "finish"
"""The environment action that ends an episode on the agent's word (the CRM migration's and the review's)."""


def closing_reply(action: str = CLOSING_ACTION) -> ChatMessage:
    """The assistant message that calls the closing `action` (it takes no arguments)."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": action, "arguments": "{}"}}]}


def closing_states(rows: Sequence[dict[str, Any]], make_env: Callable[[str, int], Any], config: EpisodeConfig,
                   action: str = CLOSING_ACTION) -> list[dict[str, Any]]:
    """The rows (`state_rows`) of episodes that failed where calling `action` would have ended the
    episode in success: the work was done and the policy went on (and spoilt it) instead of closing.

    Each row's episode is replayed to that state (the same seed, the recorded replies) and closed
    with `action`; the rows returned carry ``closing: True``. An environment without `action` has none.
    """
    closing_call = closing_reply(action)
    tools: dict[tuple[str, int], set[str]] = {}
    found = []
    for row in rows:
        if row.get("succeeded"):
            continue
        place = (str(row["env"]), int(row["difficulty"]))
        if place not in tools:
            tools[place] = {t["function"]["name"] for t in make_env(*place).tools(style=config.spec_style)}
        if action not in tools[place]:
            continue
        recorded = json.loads(row["replies"])
        # the budget ends right after the closing call: the policy is never asked
        replay = config.model_copy(update={"seed": int(row["seed"]), "max_steps": len(recorded) + 1})
        trace = run_episode(make_env(*place), ContinuationPolicy(recorded, closing_call, None), None, replay)
        if trace.outcome.success:
            found.append({**row, "closing": True})
    return found


def episode_cost(trace: Trace) -> RolloutCost:
    """Success and harness use of an episode, from its ledger and counters."""
    ledger = trace.ledger
    by_action = {name: tally.calls for name, tally in (ledger.by_action.items() if ledger else ())}
    return RolloutCost(
        success=1.0 if trace.outcome.success else 0.0,
        meta_calls=ledger.meta_action_calls if ledger else 0,
        harness_tokens=ledger.harness_tokens if ledger else 0,
        invalid=int(trace.outcome.info.get("invalid_actions", 0)),
        by_action=by_action,
    )


def reference_scorer(weights: Any = None) -> Callable[[Trace, int], float]:
    """A `ContinuationReward.scorer`: the reference's composite reward (`reference_reward`) of an
    episode, its diversity weight annealed over the optimizer steps."""
    from .reference_reward import ReferenceRewardWeights, reference_reward_from_trace

    chosen = weights if weights is not None else ReferenceRewardWeights()
    return lambda trace, update: reference_reward_from_trace(trace, update, chosen)[0]


@contextmanager
def _inference(model: Any):
    """The model in eval mode without gradients, its training mode restored afterwards."""
    import torch

    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class ScoredBatch:
    """A scored batch (`ContinuationReward.score_batch`): each sample's reward, record and group (its state)."""

    rewards: list[float]
    records: list[dict[str, Any]]
    groups: list[tuple[Any, ...]]


@dataclass
class ContinuationReward:
    """TRL reward function: the cost-aware score of each sampled action's finished episode.

    `make_env(name, difficulty)` builds environments, `policy` plays on after the action (set it
    once the trainer exists: it wraps the model being trained), `config` is the episode
    configuration inference uses (harness, window, style), `prefill` the text that started every
    generated reply. `log` keeps one record per scored action (for curves and reports).
    """

    make_env: Callable[[str, int], Any]
    config: EpisodeConfig
    weights: CostWeights = field(default_factory=CostWeights)
    prefill: str = ""
    policy: Any = None
    log: list[dict[str, Any]] = field(default_factory=list)
    cache: bool = True
    """Score an identical (state, action) once per optimizer step: greedy continuations are deterministic."""
    scorer: Callable[[Trace, int], float] | None = None
    """Scores a finished episode at an optimizer step instead of `cost_aware_score` with `weights`
    (the reference's composite reward, say: `reference_scorer`)."""
    lockstep: bool = True
    """Play the continuations of a batch side by side, one batched generation per round (`Lockstep`)."""
    continuation_calls: int | None = None
    """Model calls a continuation may make after its action; an episode still running then is cut and
    scores as unfinished (the reference's step budget T_max). None: up to the config's ``max_steps``."""
    skips_pull_only: bool = False
    """An injected skip (``forced``) that scores below the rest of its state's group scores their mean
    (`lift_failed_skips`): guided exploration pulls towards skips that pay, never pushes one down."""
    skip_uniform_groups: bool = False
    """A group (a state's samples) that all succeeded or all failed scores its mean
    (`flatten_uniform_groups`): only groups where the action decided the outcome teach."""
    __name__: str = "continuation_reward"
    _scored: dict[tuple[Any, ...], tuple[float, dict[str, Any]]] = field(default_factory=dict, repr=False)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return self.score_batch(prompts, completions, **kwargs).rewards

    def score_batch(self, prompts: Sequence[Any], completions: Sequence[Any], *, seed: Sequence[int],
                    difficulty: Sequence[int], replies: Sequence[str], env: Sequence[str], trainer_state: Any = None,
                    called: Sequence[str] | None = None, forced: Sequence[bool] | None = None, **_: Any) -> ScoredBatch:
        """Play and score a batch as `__call__` does; its rewards with each sample's record and group."""
        if self.policy is None:
            raise UserError("ContinuationReward.policy is not set: give it the policy that plays on after each action")
        step = int(getattr(trainer_state, "global_step", 0))
        model = getattr(self.policy, "model", None)
        if self._scored and next(iter(self._scored))[0] != step:
            self._scored.clear()  # the policy changed: continuations may differ now
        keys, queued = [], {}  # queued: key → (env, replies, action, seed) of each action still to play
        tools: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for n, completion in enumerate(completions):
            text = completion if isinstance(completion, str) else str(completion[0].get("content") or "")
            level = int(difficulty[n])
            if (env[n], level) not in tools:
                tools[env[n], level] = self.make_env(env[n], level).tools(style=self.config.spec_style)
            action = reply_from_text(self.prefill + text, tools[env[n], level])
            # keyed on the parsed call: texts that differ only in spacing play the same continuation
            key = (step, env[n], level, int(seed[n]), replies[n], json.dumps(action, sort_keys=True))
            keys.append(key)
            if (self.cache and key in self._scored) or key in queued:
                continue
            queued[key] = (self.make_env(env[n], level), json.loads(replies[n]), action, int(seed[n]))
        traces = dict(zip(queued, self._play(list(queued.values()), model), strict=True))
        scored, records, fresh = [], [], {}
        for key in keys:
            if key in traces and key not in fresh:
                fresh[key] = self._score(key, traces[key], queued[key][2])
                if self.cache:
                    self._scored[key] = fresh[key]
            reward, record = fresh.get(key) or self._scored[key]
            scored.append(reward)
            records.append(record)
        rewards = scored
        groups = [key[1:5] for key in keys]  # a group is its state's samples
        if self.skips_pull_only and forced is not None:
            rewards = lift_failed_skips(rewards, groups, forced)
        if self.skip_uniform_groups:
            rewards = flatten_uniform_groups(rewards, groups, [record["success"] for record in records])
        for n, record in enumerate(records):
            # what the recorded policy called in this state: a sample that acts where it consulted explores skipping
            self.log.append({**record, **({"state_called": called[n]} if called is not None else {}),
                             **({"forced": bool(forced[n])} if forced is not None else {}),
                             **({"reward": rewards[n], "scored": scored[n]} if rewards[n] != scored[n] else {})})
        return ScoredBatch(rewards, records, groups)

    def episode_score(self, trace: Trace, step: int = 0) -> float:
        """The reward of a finished episode at optimizer step `step`: `scorer`'s, else `cost_aware_score` with `weights`."""
        return self.scorer(trace, step) if self.scorer is not None else cost_aware_score(episode_cost(trace), self.weights)

    def _score(self, key: tuple[Any, ...], trace: Trace, action: ChatMessage) -> tuple[float, dict[str, Any]]:
        step, _, difficulty, seed = key[:4]
        cost = episode_cost(trace)
        reward = self.episode_score(trace, int(step))
        return reward, {
            "step": step, "seed": seed, "difficulty": difficulty, "reward": reward,
            "success": cost.success, "meta_calls": cost.meta_calls, "harness_tokens": cost.harness_tokens,
            "invalid": cost.invalid, "by_action": cost.by_action, "env_steps": int(trace.outcome.info.get("steps", 0)),
            "action": (action.get("tool_calls") or [{}])[0].get("function", {}).get("name"),
        }

    def _play(self, episodes: list[tuple[Any, list[ChatMessage], ChatMessage, int]], model: Any) -> list[Trace]:
        """Finish each ``(env, replies, action, seed)`` episode with the policy: side by side in
        lockstep (one batched generation per round) when `lockstep` is on and the policy batches."""
        def job(environment: Any, recorded: list[ChatMessage], action: ChatMessage, seed: int) -> Callable[[Any], Trace]:
            update: dict[str, Any] = {"seed": seed}
            if self.continuation_calls is not None:
                update["max_steps"] = min(self.config.max_steps, len(recorded) + 1 + self.continuation_calls)
            config = self.config.model_copy(update=update)
            return lambda player: run_episode(environment, ContinuationPolicy(recorded, action, player), None, config)

        jobs = [job(*episode) for episode in episodes]
        context = _inference(model) if model is not None else nullcontext()
        with context:
            if self.lockstep and hasattr(self.policy, "complete_batch") and len(jobs) > 1:
                return Lockstep(self.policy).play(jobs)
            return [play(self.policy) for play in jobs]


@dataclass
class DecoupledReward:
    """`reward`'s cost-aware score as two TRL reward functions, the task part and the cost part
    (`decoupled_parts`), for ``multi_objective_aggregation="normalize_then_sum"`` (GDPO): each part
    is normalized within its group before they are summed, so a rollout that succeeds with one
    meta-call fewer than its group's others gains a unit of advantage, not λ against the step's
    spread of successes and failures.

    TRL calls its reward functions in order on the same batch: `task` plays and scores the
    continuations (logging them as `reward` does), `cost` returns the parts it kept.
    """

    reward: ContinuationReward
    _cost: list[float] | None = field(default=None, repr=False)

    def functions(self) -> list[Callable[..., list[float]]]:
        """``[task, cost]``, named for TRL's logs."""
        def task_part(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
            batch = self.reward.score_batch(prompts, completions, **kwargs)
            task, self._cost = decoupled_parts(batch.records, batch.groups, self.reward.weights, forced=kwargs.get("forced"),
                                               pull_only=self.reward.skips_pull_only)
            return task

        def cost_part(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
            cost, self._cost = self._cost, None
            if cost is None or len(cost) != len(completions):
                raise UserError("the cost part reads the batch the task part scored: pass DecoupledReward.functions() to the "
                                "trainer in their order, task first")
            return cost

        return [task_part, cost_part]
