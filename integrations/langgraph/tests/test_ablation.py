"""Part switches, the panels harness and the step budget through the LangGraph runner and `BPEMiddleware`."""

from __future__ import annotations

import json
from typing import Any

from evoharness_bpe import MemoryExperienceStore
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.registry import load_framework

from evoharness_bpe_langgraph import BPEMiddleware

run_episode = load_framework("langgraph")
META = {"track", "commit", "recall", "note"}


class MetaFirst:
    """Calls `recall` `n` times, then plays as the expert does."""

    def __init__(self, env: Any, n: int) -> None:
        self.inner, self.n, self.calls = ExpertPolicy(env), n, 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.n:
            call = {"id": f"m{self.calls}", "type": "function",
                    "function": {"name": "recall", "arguments": json.dumps({"query": "rate limit"})}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return self.inner.complete(messages, tools)


def _play(policy_of: Any, **options: Any) -> Any:
    env = make_env("crm-migration", 1)
    return run_episode(env, policy_of(env), MemoryExperienceStore(), EpisodeConfig(**options))


def test_middleware_offers_only_the_verbs_of_the_parts_switched_on() -> None:
    assert {t.name for t in BPEMiddleware().tools} == META
    assert {t.name for t in BPEMiddleware(parts=("belief", "progress")).tools} == {"track", "commit"}
    assert BPEMiddleware(meta_actions=False).tools == []


def test_a_part_switched_off_is_hidden_and_its_verb_refused_readably() -> None:
    trace = _play(lambda env: MetaFirst(env, 1), harness="bpe", parts=("belief", "progress"))
    assert trace.outcome.success and trace.metadata["parts"] == ["belief", "progress"]
    assert not {"recall", "note"} & {t["function"]["name"] for t in trace.tools}
    first = trace.meta_actions[0]
    assert first.name == "recall" and not first.ok and "Experience is switched off" in first.content
    answer = next(m for m in trace.messages if m.get("role") == "tool")
    assert "Experience is switched off" in answer["content"]
    assert trace.metadata["meta_actions"]["recall"] == 1
    assert trace.dashboards and all("HINTS" not in d.text for d in trace.dashboards)


def test_panels_runs_with_the_dashboard_and_no_meta_actions() -> None:
    trace = _play(ExpertPolicy, harness="panels")
    assert trace.outcome.success
    assert not META & {t["function"]["name"] for t in trace.tools}
    assert trace.dashboards and "<bpe-dashboard" in trace.model_calls[-1].messages[0]["content"]


def test_a_charged_meta_action_ends_the_episode_at_the_step_budget_where_a_free_one_does_not() -> None:
    plain = _play(ExpertPolicy, harness="bpe")
    budget, steps = plain.metadata["model_calls"], plain.outcome.info["steps"]
    charged = _play(lambda env: MetaFirst(env, 3), harness="bpe", max_steps=budget)
    free = _play(lambda env: MetaFirst(env, 3), harness="bpe", max_steps=budget, charge_meta_actions=False)
    assert charged.metadata["model_calls"] == budget and charged.outcome.info["steps"] < steps
    assert free.outcome.info["steps"] == steps and free.metadata["model_calls"] > budget
    assert free.metadata["charge_meta_actions"] is False


def test_the_meta_action_cap_holds() -> None:
    trace = _play(lambda env: MetaFirst(env, 4), harness="bpe", max_meta_actions=2)
    assert [e.ok for e in trace.meta_actions[:4]] == [True, True, False, False]
    assert "the meta-action budget of this episode is spent (2 calls)" in trace.meta_actions[2].content
