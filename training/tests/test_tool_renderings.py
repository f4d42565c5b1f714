"""One tool list: trace recording, the SFT `tools` column, inference and GRPO rollouts agree."""

from __future__ import annotations

import json

import pytest

from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe_training.continuation import state_rows
from evoharness_bpe_training.datasets import trace_rows
from evoharness_bpe_training.environment import harness_environment, rollout_tool_schemas
from evoharness_bpe_training.tiny import build_tiny_tokenizer


class _Recording(ExpertPolicy):
    def __init__(self, env) -> None:
        super().__init__(env)
        self.offered: list[list[dict]] = []

    def complete(self, messages, tools):
        self.offered.append(json.loads(json.dumps(tools)))
        return super().complete(messages, tools)


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_four_tool_renderings_are_equal(style: str) -> None:
    env = make_env("crm-migration", 1)
    policy = _Recording(env)
    trace = run_episode(env, policy, None, EpisodeConfig(seed=2, spec_style=style))
    recorded = trace.tools
    sft_column = json.loads(trace_rows(trace)[0]["tools"])
    inference = policy.offered
    rollout_env = harness_environment(lambda **kw: make_env("crm-migration", kw.get("difficulty", 1)), style=style)
    rollouts = rollout_tool_schemas(rollout_env)
    assert all(offered == recorded for offered in inference)
    assert recorded == sft_column == rollouts
    names = [t["function"]["name"] for t in recorded]
    assert names[-4:] == ["track", "commit", "recall", "note"] and names[0] == "fetch_page"

    tokenizer = build_tiny_tokenizer(300)
    render = lambda tools: tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tools=tools, tokenize=False)  # noqa: E731
    assert render(recorded) == render(sft_column) == render(inference[0]) == render(rollouts)
    # step-level GRPO renders its states from the recorded tools too
    seen = []
    state_rows([trace], lambda messages, tools: seen.append(tools) or "")
    assert all(tools == recorded for tools in seen)
    assert render(recorded) != render(rollout_tool_schemas(harness_environment(
        lambda **kw: make_env("crm-migration", 1), style="compact" if style == "full" else "full")))
