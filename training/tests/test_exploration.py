"""Guided exploration for step-level GRPO: each group holds the state's skip beside sampled actions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe import META_ACTIONS
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe_training.continuation import consulting_states, reply_from_text, state_rows
from evoharness_bpe_training.exploration import SkipExploration, completion_text, skip_action
from evoharness_bpe_training.grpo import CHAT_TEMPLATE_KWARGS

PREFILL = '<tool_call>\n{"name": "'


def _name(reply: dict) -> str:
    return reply["tool_calls"][0]["function"]["name"]


def test_a_states_skip_is_the_next_environment_action_of_its_episode(expert_trace) -> None:
    replies = [c.response for c in expert_trace.model_calls]
    for row in consulting_states(state_rows([expert_trace], lambda m, t: "")):
        later = [r for r in replies[row["position"] + 1:] if _name(r) not in META_ACTIONS]
        assert skip_action(expert_trace, row["position"]) == later[0]
    assert _name(replies[-1]) == "finish"
    assert skip_action(expert_trace, len(replies) - 1) is None  # nothing after the last action


@pytest.mark.parametrize("template", ["qwen3", "compact"])
def test_a_skip_rendered_as_a_completion_parses_back_to_the_same_call(expert_trace, template: str) -> None:
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template() if template == "compact" else None)
    tools = make_env("crm-migration", 1).tools(style="compact")
    for call in expert_trace.model_calls[:6]:
        text = completion_text(tokenizer, call.response, PREFILL, CHAT_TEMPLATE_KWARGS)
        assert text.endswith("\n") and text.count("\n") == 1  # one line: where a sampled call stops
        parsed = reply_from_text(PREFILL + text, tools)["tool_calls"][0]["function"]
        expected = call.response["tool_calls"][0]["function"]
        assert parsed["name"] == expected["name"]
        assert json.loads(parsed["arguments"]) == json.loads(expected["arguments"])
    with pytest.raises(UserError, match="prefill"):
        completion_text(tokenizer, expert_trace.model_calls[0].response, "<call>", CHAT_TEMPLATE_KWARGS)


def test_the_last_samples_of_each_group_are_forced_and_only_where_a_skip_exists() -> None:
    exploration = SkipExploration({"a": "wait", "c": "finish"}, samples=1, tokenizer=None)
    assert exploration.forced(["a", "a", "a", "b", "b", "b"], group=3) == [False, False, True, False, False, False]
    # a state drawn twice in one batch: two groups, each with its skip
    assert exploration.forced(["c"] * 4, group=2) == [False, True, False, True]
    assert SkipExploration({"a": "x"}, samples=2, tokenizer=None).forced(["a"] * 3, group=3) == [False, True, True]
    with pytest.raises(UserError, match="no sampled action"):
        exploration.forced(["a"], group=1)
    with pytest.raises(UserError, match="at least one"):
        SkipExploration({}, samples=0, tokenizer=None)


def test_reproduce_refuses_skip_samples_that_fill_the_group(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    with pytest.raises(UserError, match="at least one sampled action"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_generations=2, grpo_skip_samples=2)
    with pytest.raises(UserError, match="0 or more"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_skip_samples=-1)
    with pytest.raises(UserError, match="linear or constant"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_lr_schedule="cosine")


def _expert_meta_calls(tmp_path: Path, skip_rate: float, lean_rate: float = 0.0) -> tuple[int, int]:
    """(meta-actions, successes) of the expert stage of a tiny run, stopped when that stage ends."""
    traces = _expert_traces(tmp_path / f"skip-{skip_rate}-lean-{lean_rate}", expert_skip_rate=skip_rate, expert_lean_rate=lean_rate)
    return sum(len(t.meta_actions) for t in traces), sum(bool(t.outcome.success) for t in traces)


def _expert_traces(out: Path, **settings: Any) -> list[Any]:
    """The expert stage's traces of a tiny run with `settings`, stopped when that stage ends."""
    from evoharness_bpe import read_traces
    from evoharness_bpe_training import reproduce as module

    config = module.load_reproduce_preset("tiny", out=str(out), **settings)

    def stop_after_expert(line: str) -> None:
        if line.startswith("expert:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        module.reproduce(config, log=stop_after_expert)
    return list(read_traces(out / "expert.jsonl"))


def test_reproduce_records_a_sparse_expert_when_asked(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages

    full, full_successes = _expert_meta_calls(tmp_path, 0.0)
    sparse, sparse_successes = _expert_meta_calls(tmp_path, 0.5)
    assert sparse < full and sparse_successes == full_successes > 0
    with pytest.raises(UserError, match="probability below 1"):
        load_reproduce_preset("tiny", out=str(tmp_path), expert_skip_rate=1.0)
    assert shared_stages({"expert_skip_rate": 0.0}, {"expert_skip_rate": 0.3}) == []  # new SFT data: every stage again


def test_reproduce_records_lean_expert_episodes_when_asked(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages

    full, full_successes = _expert_meta_calls(tmp_path, 0.0)
    lean, lean_successes = _expert_meta_calls(tmp_path, 0.0, lean_rate=1.0)
    assert lean < full and lean_successes == full_successes > 0
    with pytest.raises(UserError, match="expert-lean-rate"):
        load_reproduce_preset("tiny", out=str(tmp_path), expert_lean_rate=1.5)
    assert shared_stages({"expert_lean_rate": 0.0}, {"expert_lean_rate": 0.3}) == []


def _calls(trace: Any) -> list[str]:
    """The tools an episode's replies called, in order."""
    return [c["function"]["name"] for call in trace.model_calls for c in call.response.get("tool_calls") or []]


def test_reproduce_adds_lean_expert_episodes_beside_the_full_ones_when_asked(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset, shared_stages

    full = _expert_traces(tmp_path / "full")
    both = _expert_traces(tmp_path / "both", expert_lean_episodes=2)
    per_level = load_reproduce_preset("tiny", out=str(tmp_path)).episodes_per_level()
    assert len(both) == len(full) + 2 * len(per_level)
    kept = [t for t in both if t.metadata["seed"] < per_level[t.metadata["difficulty"]]]
    added = [t for t in both if t not in kept]
    assert [_calls(t) for t in kept] == [_calls(t) for t in full]  # every full episode plays as it did
    assert sorted((t.metadata["difficulty"], t.metadata["seed"]) for t in added) == sorted(
        (level, n + i) for level, n in per_level.items() for i in range(2))  # the seeds after each level's training ones
    assert all(t.outcome.success for t in added)
    assert all({a.name for a in t.meta_actions} == {"commit"} for t in added)  # no recall, note or track
    assert any({a.name for a in t.meta_actions} > {"commit"} for t in kept)
    with pytest.raises(UserError, match="expert-lean-episodes"):
        load_reproduce_preset("tiny", out=str(tmp_path), expert_lean_episodes=-1)
    assert shared_stages({"expert_lean_episodes": 0}, {"expert_lean_episodes": 4}) == []


def test_reproduce_records_an_expert_that_notes_before_committing_when_asked(tmp_path: Path) -> None:
    from evoharness_bpe_training.reproduce_config import shared_stages

    def pairs(traces: list[Any]) -> set[tuple[str, str]]:
        names = [[_name(call.response) for call in trace.model_calls] for trace in traces]
        return {pair for episode in names for pair in zip(episode, episode[1:])}

    after = _expert_traces(tmp_path / "after")
    before = _expert_traces(tmp_path / "before", expert_note_before_commit=True)
    assert all(t.outcome.success for t in before) and len(before) == len(after)
    assert ("note", "finish") in pairs(after) and ("note", "finish") not in pairs(before)
    assert ("note", "commit") in pairs(before) and ("commit", "note") not in pairs(before)
    assert shared_stages({"expert_note_before_commit": False}, {"expert_note_before_commit": True}) == []


@pytest.mark.slow
def test_grpo_groups_hold_the_skip_and_its_continuation_is_scored(expert_trace, tmp_path: Path) -> None:
    """The real GRPOTrainer on a tiny model: every group of a consulting state has its skip as the
    last sample, scored by playing the episode on from it; the rest are sampled."""
    from evoharness_bpe import TraceWriter
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_episodes import policy_for
    from evoharness_bpe_training.reproduce_training import train_grpo
    from evoharness_bpe_training.reproduce_report import exploration
    from evoharness_bpe_training.tiny import build_tiny_model

    config = load_reproduce_preset("tiny", out=str(tmp_path), window=4, dashboard_tokens=120, max_steps=30, grpo_steps=2,
                                   grpo_states_per_step=2, grpo_generations=3, grpo_skip_samples=1, grpo_continuation_calls=2,
                                   max_new_tokens=16, grpo_lr_schedule="constant", grpo_learning_rate=3e-4,
                                   lam=0.2, charge_on_success_only=True)
    model, tokenizer = build_tiny_model(layers=1, vocab_size=512)
    with TraceWriter(tmp_path / "grpo-states.jsonl") as writer:
        writer.write(expert_trace)
    player = policy_for(model, tokenizer, config)
    states = consulting_states(state_rows([expert_trace], player.render_prompt))[:2]
    _, log = train_grpo(model, tokenizer, states, config, tmp_path, "fp32", lambda line: None)
    assert len(log) == config.grpo_steps * config.grpo_states_per_step * config.grpo_generations
    forced = [r for r in log if r["forced"]]
    assert len(forced) == len(log) // config.grpo_generations  # one per group
    skips = {_name(skip_action(expert_trace, s["position"])) for s in states}
    assert {r["action"] for r in forced} <= skips and all(r["state_called"] in META_ACTIONS for r in forced)
    assert all(r["env_steps"] >= 1 for r in forced)  # each skip was played on, not just scored
    for r in log:  # --charge-on-success-only: a failure pays for its invalid actions, not for consulting
        charge = config.lam * r["meta_calls"] + config.mu * r["harness_tokens"] if r["success"] > 0 else 0.0
        assert r["reward"] == pytest.approx(r["success"] - charge - config.invalid_penalty * r["invalid"])
    assert any(r["success"] <= 0 and r["meta_calls"] for r in log)  # a failure that consulted, spared its price
    seen = exploration(log)
    assert seen["forced_skips"] == len(forced) and seen["samples"] == len(log) - len(forced)
    rates = [json.loads(line)["learning_rate"] for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()
             if "learning_rate" in json.loads(line)]
    assert rates == [3e-4] * config.grpo_steps  # --grpo-lr-schedule constant: no decay over the updates


def test_skip_kinds_leave_the_other_meta_actions_states_without_a_skip(expert_trace, tmp_path: Path) -> None:
    from dataclasses import replace

    from evoharness_bpe import TraceWriter
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_training import grpo_train_states, skip_completions
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template())
    with TraceWriter(tmp_path / "states.jsonl") as writer:
        writer.write(expert_trace)
    states = [{**s, "difficulty": 1, "seed": 3} for s in consulting_states(state_rows([expert_trace], lambda m, t: str(t)))]
    states = [{**s, "prompt": f"state {n}"} for n, s in enumerate(states)]
    called = {s["prompt"]: s["called"] for s in states}
    every = skip_completions(states, tmp_path / "states.jsonl", tokenizer, PREFILL)
    lean = skip_completions(states, tmp_path / "states.jsonl", tokenizer, PREFILL, ("recall", "note", "track"))
    assert "commit" in {called[p] for p in every}  # the expert's commits have skips by default
    assert lean and set(lean) == {p for p in every if called[p] != "commit"}
    replies = [c.response for c in expert_trace.model_calls]
    for state in states:
        if state["called"] != "commit":
            later = [r for r in replies[state["position"] + 1:] if _name(r) not in ("recall", "note", "track")]
            assert skip_action(expert_trace, state["position"], ("recall", "note", "track")) == later[0]
    opening = next(s for s in states if s["called"] == "recall")
    assert _name(skip_action(expert_trace, opening["position"], ("recall", "note", "track"))) == "commit"  # the plan
    assert _name(skip_action(expert_trace, opening["position"])) not in META_ACTIONS  # past the plan
    config = load_reproduce_preset("tiny", out=str(tmp_path), grpo_skip_kinds="note, recall")
    assert config.skip_kinds() == ("note", "recall")
    assert grpo_train_states(states, config) == states  # no guided exploration: every state
    skipping = replace(config, grpo_skip_samples=1, grpo_generations=4)
    assert [s["called"] for s in grpo_train_states(states, skipping)] == [s["called"] for s in states if s["called"] in ("note", "recall")]
    assert grpo_train_states([s for s in states if s["called"] == "commit"], skipping)  # none of those kinds: all kept
    for wrong in ("note,finish", " , "):
        with pytest.raises(UserError, match="--grpo-skip-kinds"):
            load_reproduce_preset("tiny", out=str(tmp_path), grpo_skip_kinds=wrong)


def test_lead_states_add_the_call_before_each_skipped_state(expert_trace, tmp_path: Path) -> None:
    from dataclasses import replace

    from evoharness_bpe_training.reproduce_config import load_reproduce_preset

    from evoharness_bpe_training.reproduce_training import grpo_train_states

    every = [{**s, "difficulty": 1, "seed": 3} for s in state_rows([expert_trace], lambda m, t: str(t))]
    other = [{**s, "seed": 4} for s in every]  # a second episode: positions are per episode
    states = every + other
    config = replace(load_reproduce_preset("tiny", out=str(tmp_path), grpo_skip_kinds="note", grpo_states="all"),
                     grpo_skip_samples=1, grpo_generations=4)
    notes = grpo_train_states(states, config)
    assert notes and {s["called"] for s in notes} == {"note"}
    leading = grpo_train_states(states, replace(config, grpo_lead_states=True))
    places = {(s["seed"], s["position"]) for s in notes}
    expected = places | {(seed, position - 1) for seed, position in places}
    assert [(s["seed"], s["position"]) for s in leading] == [(s["seed"], s["position"]) for s in states if (s["seed"], s["position"]) in expected]
    added = [s for s in leading if s["called"] != "note"]
    assert added and len(leading) < len(states)  # the calls before the notes, and no others
    with pytest.raises(UserError, match="--grpo-lead-states"):
        load_reproduce_preset("tiny", out=str(tmp_path), grpo_lead_states=True, grpo_states="consulting")


def test_closing_states_are_kept_and_their_forced_sample_is_the_closing_action(expert_trace, tmp_path: Path) -> None:
    from dataclasses import replace

    from evoharness_bpe import TraceWriter
    from evoharness_bpe_training.continuation import CLOSING_ACTION
    from evoharness_bpe_training.reproduce_config import load_reproduce_preset
    from evoharness_bpe_training.reproduce_training import grpo_train_states, skip_completions
    from evoharness_bpe_training.student import student_chat_template
    from evoharness_bpe_training.tiny import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(512, chat_template=student_chat_template())
    with TraceWriter(tmp_path / "states.jsonl") as writer:
        writer.write(expert_trace)
    rows = [{**s, "difficulty": 1, "seed": 3, "prompt": f"state {n}"} for n, s in enumerate(state_rows([expert_trace], lambda m, t: ""))]
    # the expert's last commit as if finishing there had been the way out of a failed episode
    commit = max(n for n, s in enumerate(rows) if s["called"] == "commit")
    states = [{**s, "closing": n == commit} for n, s in enumerate(rows)]
    config = replace(load_reproduce_preset("tiny", out=str(tmp_path), grpo_skip_kinds="note", grpo_states="all"),
                     grpo_skip_samples=1, grpo_generations=4)
    kept = grpo_train_states(states, config)
    assert [s["position"] for s in kept] == sorted([commit] + [s["position"] for s in states if s["called"] == "note"])
    skips = skip_completions(states, tmp_path / "states.jsonl", tokenizer, PREFILL, ("note",))
    tools = make_env("crm-migration", 1).tools(style="compact")
    assert _name(reply_from_text(PREFILL + skips[f"state {commit}"], tools)) == CLOSING_ACTION
    assert _name(reply_from_text(PREFILL + skips[f"state {commit}"], tools)) != rows[commit]["called"]
    assert set(skips) == {f"state {commit}"} | {s["prompt"] for s in states if s["called"] == "note"}
