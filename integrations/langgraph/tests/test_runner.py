"""The ``langgraph`` framework runner on a tiny environment of its own."""

from __future__ import annotations

import json
from typing import Any

import pytest
from evoharness_bpe import MemoryExperienceStore
from evoharness_bpe.lab.envs.base import EnvOutcome, StepResult
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call


class CounterEnv:
    """Press a counter up to a target; `press` with a bad amount is an invalid action."""

    name = "counter"
    difficulty = 1

    def __init__(self, target: int = 3) -> None:
        self.target = target
        self.value = 0
        self.presses = 0

    def reset(self, seed: int) -> tuple[str, str]:
        self.value, self.presses = 0, 0
        return f"Raise the counter to {self.target}.", "The counter shows 0."

    def tools(self) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {
                    "name": "press",
                    "description": "Add `amount` (1 or 2) to the counter.",
                    "parameters": {"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]},
                },
            }
        ]

    def step(self, tool_call: dict[str, Any]) -> StepResult:
        args = tool_call.get("arguments")
        args = json.loads(args) if isinstance(args, str) else (args or {})
        amount = args.get("amount")
        if amount not in (1, 2):
            return StepResult(observation="amount must be 1 or 2", info={"invalid": True})
        self.presses += 1
        self.value += amount
        return StepResult(observation=f"The counter shows {self.value}.", done=self.value >= self.target)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.value == self.target, score=min(1.0, self.value / self.target), info={"value": self.value})


def _policy() -> ScriptedPolicy:
    return ScriptedPolicy(
        [
            tool_call("commit", {"subgoal": "press", "status": "doing"}),
            tool_call("press", {"amount": 7}),
            tool_call("press", '{"amount": 1'),  # not JSON: an invalid tool call
            tool_call("press", {"amount": 1}),
            tool_call("track", {"key": "counter", "value": "1"}),
            tool_call("press", {"amount": 2}),
            "never reached: the episode ends when the environment is done",
        ]
    )


def test_runner_plays_an_episode_with_bpe() -> None:
    run_episode = load_framework("langgraph")
    env, policy, store = CounterEnv(), _policy(), MemoryExperienceStore()
    trace = run_episode(env, policy, store, EpisodeConfig(harness="bpe", max_steps=20))
    assert trace.framework == "langgraph" and trace.harness == "bpe" and trace.env == "counter"
    assert trace.task == "Raise the counter to 3."
    assert trace.outcome.success is True and trace.outcome.score == 1.0
    # the call whose arguments do not parse counts as a refused environment step, as in the core loop
    assert trace.outcome.info["steps"] == 4 and trace.outcome.info["invalid_actions"] == 2
    assert len(policy.calls) == 6  # ended right after the environment said done
    assert len(trace.model_calls) == 6 and trace.metadata["prompt_tokens"] == [c.prompt_tokens for c in trace.model_calls]
    assert all(p > 0 for p in trace.metadata["prompt_tokens"])
    # the policy saw the dashboard, the meta-actions and the environment's tool
    assert "<bpe-dashboard" in policy.calls[1][0]["content"]
    assert {t["function"]["name"] for t in policy.tools_seen[0]} == {"track", "commit", "recall", "note", "press"}
    assert [e.name for e in trace.meta_actions] == ["commit", "track"]
    assert {t["function"]["name"] for t in trace.tools} == {"track", "commit", "recall", "note", "press"}
    assert trace.dashboards and trace.ledger is not None


def test_runner_without_harness_offers_only_env_tools() -> None:
    policy = ScriptedPolicy([tool_call("press", {"amount": 2}), tool_call("press", {"amount": 1})])
    trace = load_framework("langgraph")(CounterEnv(), policy, None, EpisodeConfig(harness="none"))
    assert [t["function"]["name"] for t in policy.tools_seen[0]] == ["press"]
    assert "<bpe-dashboard" not in json.dumps(policy.calls)
    assert trace.outcome.success is True and trace.meta_actions == [] and trace.outcome.info["invalid_actions"] == 0


def test_runner_cuts_at_max_steps() -> None:
    policy = ScriptedPolicy([tool_call("press", {"amount": 0})] * 10)
    trace = load_framework("langgraph")(CounterEnv(), policy, None, EpisodeConfig(harness="none", max_steps=3))
    assert len(policy.calls) == 3 and trace.outcome.success is False
    assert trace.outcome.info["invalid_actions"] == 3


def test_runner_rejects_append() -> None:
    with pytest.raises(UserError, match="append"):
        load_framework("langgraph")(CounterEnv(), _policy(), None, EpisodeConfig(harness="append"))


def test_runner_answers_a_broken_meta_action_once() -> None:
    policy = ScriptedPolicy([tool_call("track", '{"key": "x"'), tool_call("press", {"amount": 2}), tool_call("press", {"amount": 1})])
    trace = load_framework("langgraph")(CounterEnv(), policy, None, EpisodeConfig(harness="bpe"))
    answers = [m for m in trace.messages if m.get("role") == "tool" and m.get("tool_call_id") == "call_track"]
    assert len(answers) == 1 and "JSON" in answers[0]["content"]
    assert trace.outcome.success is True and trace.outcome.info["invalid_actions"] == 1


@pytest.mark.parametrize("framework", ["core", "langgraph"])
def test_only_max_steps_cuts_an_episode_of_refused_calls(framework: str) -> None:
    """Each model call passes through several graph steps (the model, the tools, every middleware
    hook); the episode still runs to `max_steps` model calls, as in the core loop."""
    policy = ScriptedPolicy([tool_call("press", {"amount": 0})] * 50)
    trace = load_framework(framework)(CounterEnv(), policy, None, EpisodeConfig(harness="bpe", max_steps=40))
    assert len(policy.calls) == 40 and len(trace.model_calls) == 40
    assert trace.outcome.success is False and trace.outcome.info["invalid_actions"] == 40
