"""One harness, four loops: the core runner, both integration runners and the GRPO rollout
environment play the same policy on the same episode with the same prompts, tools and counts."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from evoharness_bpe.harness import count_prompt_tokens, episode_tools
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import load_framework
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.trace import Trace

pytest.importorskip("evoharness_bpe_langgraph", reason="the LangGraph integration is not installed")
pytest.importorskip("evoharness_bpe_llamaindex", reason="the LlamaIndex integration is not installed")
pytest.importorskip("evoharness_bpe_training", reason="the training package is not installed")

from evoharness_bpe_training.environment import harness_environment, rollout_episode, rollout_tool_schemas  # noqa: E402

LOOPS = ("core", "langgraph", "llamaindex", "grpo")


class Recording:
    """Passes every call to `inner` and keeps what the model was shown."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append((copy.deepcopy(messages), copy.deepcopy(tools)))
        return self.inner.complete(messages, tools)


def play(loop: str, name: str, level: int, config: EpisodeConfig) -> tuple[Trace, Recording]:
    if loop == "grpo":
        environment = harness_environment(lambda difficulty=level: make_env(name, difficulty), dashboard_tokens=config.dashboard_tokens)()
        policy = Recording(ExpertPolicy(environment.env))
        trace = rollout_episode(environment, policy, seed=config.seed, max_steps=config.max_steps, window_size=config.window)
        return trace, policy
    env = make_env(name, level)
    policy = Recording(ExpertPolicy(env))
    return load_framework(loop)(env, policy, None, config), policy


_ENTRY_ID = re.compile(r"\b[0-9a-f]{16}\b")


def shown(messages: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a model reads of a prompt: roles, texts and calls (call ids and the random ids of new
    experience entries are each run's own)."""
    out = []
    for m in messages:
        calls = tuple((c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m.get("tool_calls") or ())
        out.append((m["role"], _ENTRY_ID.sub("<id>", m.get("content") or "") or None, calls))
    return out


@pytest.mark.parametrize(("name", "level"), [("crm-migration", 1), ("compliance-review", 1)])
def test_the_four_loops_play_one_episode_alike(name: str, level: int) -> None:
    config = EpisodeConfig(harness="bpe", seed=3, max_steps=200, window=6)
    played = {loop: play(loop, name, level, config) for loop in LOOPS}
    core, core_policy = played["core"]
    assert core.outcome.success and len(core.model_calls) > 10
    assert max(len(m) for m, _ in core_policy.calls) <= 2 + 6 + 1  # the window was in force

    for loop, (trace, policy) in played.items():
        # the same prompts, call by call: system text with the dashboard, the same window
        assert len(policy.calls) == len(core_policy.calls), loop
        for (messages, _), (expected, _) in zip(policy.calls, core_policy.calls, strict=True):
            assert shown(messages) == shown(expected), loop
        # the same figures and counters
        assert trace.metadata["prompt_tokens"] == core.metadata["prompt_tokens"], loop
        assert trace.metadata["prompt_token_source"] == "approximate", loop
        for key in ("meta_actions", "meta_actions_per_call", "model_calls", "silent_replies"):
            assert trace.metadata[key] == core.metadata[key], (loop, key)
        for key in ("steps", "invalid_actions"):
            assert trace.outcome.info[key] == core.outcome.info[key], (loop, key)
        assert trace.outcome.success is True
        assert [_ENTRY_ID.sub("<id>", d.text) for d in trace.dashboards] == [_ENTRY_ID.sub("<id>", d.text) for d in core.dashboards], loop


def test_the_four_tool_renderings_are_equal() -> None:
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=3)
    env = make_env("crm-migration", 1)
    expected = episode_tools(env, "bpe")
    grpo_cls = harness_environment(lambda difficulty=1: make_env("crm-migration", difficulty))
    assert rollout_tool_schemas(grpo_cls) == expected  # what GRPO rollouts and the SFT tools column show
    for loop in LOOPS:
        trace, policy = play(loop, "crm-migration", 1, config)
        assert [tools for _, tools in policy.calls] == [expected] * len(policy.calls), loop
        assert trace.tools == expected, loop
        prompt = policy.calls[0][0]
        assert trace.model_calls[0].prompt_tokens == count_prompt_tokens(prompt, expected).tokens, loop


def test_without_the_harness_the_three_runners_show_the_full_history_alike() -> None:
    config = EpisodeConfig(harness="none", seed=1, max_steps=200)
    played = {loop: play(loop, "crm-migration", 1, config) for loop in LOOPS[:3]}
    core, core_policy = played["core"]
    assert core.outcome.success and len(core_policy.calls[-1][0]) == 2 * len(core_policy.calls)  # nothing cut
    for loop, (trace, policy) in played.items():
        assert [shown(m) for m, _ in policy.calls] == [shown(m) for m, _ in core_policy.calls], loop
        assert [t for _, t in policy.calls] == [episode_tools(make_env("crm-migration", 1), "none")] * len(policy.calls), loop
        assert trace.metadata["prompt_tokens"] == core.metadata["prompt_tokens"], loop
        assert trace.outcome.info["steps"] == core.outcome.info["steps"] and trace.outcome.info["invalid_actions"] == 0, loop
