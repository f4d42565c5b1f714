"""Part switches (ablations), the panels harness and the shared step budget, in the core."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import Workspace
from evoharness_bpe.actions import PARTS
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.harness import StepBudget, episode_tools, instructions, parts_label, prompt_text, system_prompt
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.lab.runner.suite import RunConfig, run_suite
from evoharness_bpe.stores.memory import MemoryExperienceStore

# Each part's verbs, what a call of each looks like, and the dashboard lines the part owns.
VERBS = {"belief": ["track"], "progress": ["commit"], "experience": ["recall", "note"]}
CALLS = {
    "track": {"key": "api.limit", "value": "5/s"},
    "commit": {"subgoal": "batch 1", "status": "done"},
    "recall": {"query": "rate limit"},
    "note": {"text": "the API allows 5 requests a second"},
}
LINES = {"belief": ["BELIEFS:"], "progress": ["PROGRESS:", "NEXT:", "EXCEPTIONS:"], "experience": ["HINTS (from experience):"]}


def _workspace(parts: tuple[str, ...]) -> Workspace:
    store = MemoryExperienceStore()
    Workspace("Migrate records", store=store).act("note", {"text": "Migrate records in batches of ten"})
    ws = Workspace("Migrate records", subgoals=["batch 1"], store=store, parts=parts)
    ws.observe("fetch_page", error="HTTP 429")  # an open exception and a Belief fact, where the parts are on
    ws.act("track", {"key": "seen", "value": "page 1"})
    return ws


@pytest.mark.parametrize("off", PARTS)
def test_a_part_switched_off_leaves_the_dashboard_and_the_tools_and_refuses_its_verbs(off: str) -> None:
    parts = tuple(p for p in PARTS if p != off)
    full, ablated = _workspace(PARTS), _workspace(parts)
    shown, hidden = full.dashboard(), ablated.dashboard()
    for line in LINES[off]:
        assert line in shown and line not in hidden
    for other in parts:  # the other parts still show
        assert any(line in hidden for line in LINES[other])
    assert {t.name for t in ablated.tools} == {n for p in parts for n in VERBS[p]}
    assert [t["function"]["name"] for t in ablated.openai_tools()] == [t.name for t in ablated.tools]
    for verb in VERBS[off]:
        before = ablated.state.model_dump_json()
        entries = ablated.store.list(ablated.namespace) if hasattr(ablated.store, "list") else None
        result = ablated.act(verb, CALLS[verb])
        assert not result.ok
        assert result.content == (f"Error: {verb} is not available: {off.capitalize()} is switched off in this "
                                  "workspace; nothing was changed, continue with the other tools")
        assert ablated.state.model_dump_json() == before  # state unchanged
        if entries is not None:
            assert ablated.store.list(ablated.namespace) == entries
        assert ablated.events[-1].ok is False and ablated.events[-1].name == verb
    for verb in (n for p in parts for n in VERBS[p]):  # the others still apply
        assert ablated.act(verb, CALLS[verb]).ok, verb


def test_observations_do_not_fill_a_part_switched_off() -> None:
    ws = Workspace("g", parts=("experience",))
    ws.observe("fetch", error="timeout")
    ws.observe("fetch", result="ok")
    assert ws.state.belief.facts == {} and ws.state.progress.exceptions == {}


def test_unknown_parts_are_refused() -> None:
    with pytest.raises(UserError, match="unknown part 'plan'"):
        Workspace("g", parts=("belief", "plan"))
    with pytest.raises(UserError, match="part switches apply to the panels and bpe harnesses"):
        instructions("none", parts=("belief",))
    with pytest.raises(ValueError, match="part switches apply"):
        EpisodeConfig(harness="append", parts=("belief",))


def test_the_full_bpe_prompt_is_the_published_text_and_an_ablated_one_names_only_its_parts() -> None:
    base = prompt_text("system")
    assert instructions("bpe") == f"{base}\n\n{prompt_text('bpe')}"
    assert instructions("bpe", parts=PARTS) == instructions("bpe")
    for off in PARTS:
        text = instructions("bpe", parts=[p for p in PARTS if p != off])
        assert off.capitalize() not in text
        for verb in VERBS[off]:
            assert verb not in text.split("meta-actions:")[1]
    panels = instructions("panels", parts=("belief", "progress"))
    assert "Belief" in panels and "Progress" in panels and "Experience" not in panels
    assert "meta-actions" not in instructions("panels")
    assert system_prompt("panels", dashboard="<bpe-dashboard>").endswith("<bpe-dashboard>")


def test_episode_tools_follow_the_harness_and_the_parts() -> None:
    env = make_env("crm-migration", 1)
    env_names = [t["function"]["name"] for t in env.tools()]
    names = lambda tools: [t["function"]["name"] for t in tools]  # noqa: E731
    assert names(episode_tools(env, "bpe")) == [*env_names, "track", "commit", "recall", "note"]
    assert names(episode_tools(env, "bpe", parts=("belief", "experience"))) == [*env_names, "track", "recall", "note"]
    assert names(episode_tools(env, "panels")) == env_names
    assert parts_label(("progress",)) == "-belief-experience"


class _MetaFirst:
    """Calls `verb` `n` times, then plays as the expert does."""

    def __init__(self, env: Any, n: int, verb: str = "recall") -> None:
        self.inner, self.n, self.verb, self.calls = ExpertPolicy(env), n, verb, 0

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls += 1
        if self.calls <= self.n:
            call = {"id": f"m{self.calls}", "type": "function",
                    "function": {"name": self.verb, "arguments": json.dumps({"query": "rate limit"})}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return self.inner.complete(messages, tools)


def _play(policy_of: Any, **options: Any) -> Any:
    env = make_env("crm-migration", 1)
    return run_episode(env, policy_of(env), MemoryExperienceStore(), EpisodeConfig(**options))


def test_a_charged_meta_action_ends_the_episode_at_the_step_budget_where_a_free_one_does_not() -> None:
    plain = _play(ExpertPolicy, harness="bpe")
    assert plain.outcome.success and plain.metadata["charge_meta_actions"] is True
    budget = plain.metadata["model_calls"]  # just enough for the expert
    charged = _play(lambda env: _MetaFirst(env, 3), harness="bpe", max_steps=budget)
    free = _play(lambda env: _MetaFirst(env, 3), harness="bpe", max_steps=budget, charge_meta_actions=False)
    steps = plain.outcome.info["steps"]  # environment actions the expert needs
    assert charged.metadata["model_calls"] == budget and charged.outcome.info["steps"] < steps
    assert free.outcome.info["steps"] == steps and free.metadata["model_calls"] > budget
    assert free.metadata["charged_model_calls"] <= budget and free.metadata["charge_meta_actions"] is False


def test_the_meta_action_cap_holds_and_bounds_free_calls() -> None:
    capped = _play(lambda env: _MetaFirst(env, 5), harness="bpe", max_meta_actions=2)
    refused = [e for e in capped.meta_actions if not e.ok]
    assert [e.ok for e in capped.meta_actions[:5]] == [True, True, False, False, False]
    assert "the meta-action budget of this episode is spent (2 calls)" in refused[0].content
    assert capped.metadata["max_meta_actions"] == 2
    # free meta-actions, capped: a policy that never acts stops after max_steps + cap calls
    stuck = _play(lambda env: _MetaFirst(env, 10_000), harness="bpe", max_steps=4, charge_meta_actions=False,
                  max_meta_actions=3)
    assert stuck.metadata["model_calls"] == 7 and stuck.metadata["charged_model_calls"] == 0
    # without a cap the hard stop is twice max_steps
    stuck = _play(lambda env: _MetaFirst(env, 10_000), harness="bpe", max_steps=4, charge_meta_actions=False)
    assert stuck.metadata["model_calls"] == 8
    assert StepBudget(4).limit == 4


def test_a_meta_action_of_a_part_switched_off_is_refused_in_the_core_loop() -> None:
    trace = _play(lambda env: _MetaFirst(env, 1), harness="bpe", parts=("belief", "progress"))
    assert trace.outcome.success
    first = trace.meta_actions[0]
    assert first.name == "recall" and not first.ok and "Experience is switched off" in first.content
    assert "recall" not in {t["function"]["name"] for t in trace.tools}
    assert "HINTS" not in "".join(d.text for d in trace.dashboards)
    assert trace.metadata["parts"] == ["belief", "progress"]


def test_panels_shows_the_dashboard_without_meta_actions() -> None:
    trace = _play(ExpertPolicy, harness="panels")
    assert trace.outcome.success
    assert not {"track", "commit", "recall", "note"} & {t["function"]["name"] for t in trace.tools}
    assert trace.dashboards and trace.meta_actions == []
    assert "<bpe-dashboard" in trace.model_calls[-1].messages[0]["content"]
    assert "tool:" in trace.dashboards[-1].text  # Belief filled from the environment's results


def test_run_writes_the_ablation_table_and_resumes_each_variant_apart(tmp_path: Path) -> None:
    out = tmp_path / "run"
    config = dict(envs=["crm-migration"], policies=["expert"], harnesses=["none", "bpe"],
                  ablate=["belief", "progress", "experience"], out=out)
    data = run_suite(RunConfig(**config))
    harnesses = [r["harness"] for r in data["episodes"]]
    assert harnesses == ["none", "bpe", "bpe-belief", "bpe-progress", "bpe-experience"]
    report = (out / "report.md").read_text("utf-8")
    table = report.split("## Ablations", 1)[1]
    assert "| full | −Belief | −Progress | −Experience |" in table
    assert "| crm-migration | expert | bpe | core | 100% (" in table
    assert "| none |" not in table  # a harness without parts has no ablation row
    again = run_suite(RunConfig(**{**config, "mode": "resume"}))
    assert len(again["episodes"]) == 5  # every variant was finished: nothing ran twice
    with pytest.raises(UserError, match="unknown part"):
        RunConfig(ablate=["plan"], harnesses=["bpe"])
    with pytest.raises(UserError, match="add --harness bpe"):
        RunConfig(ablate=["belief"], harnesses=["none"])
