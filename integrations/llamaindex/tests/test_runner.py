"""The llamaindex framework runner on a tiny environment of its own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe import SQLiteExperienceStore, TraceWriter, read_traces
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.registry import available_frameworks, load_framework
from evoharness_bpe.testing.scripted import ScriptedPolicy, tool_call
from evoharness_bpe_llamaindex.runner import run_episode


def script() -> ScriptedPolicy:
    return ScriptedPolicy(
        [
            tool_call("press", {"times": "two"}),  # invalid for the environment
            tool_call("press", "{torn"),  # not JSON at all
            tool_call("track", {"key": "counter", "value": "0"}),  # a meta-action (unknown without BPE)
            tool_call("press", {"times": 1}),
            tool_call("press", {"times": 2}),  # done: no further model call
            "never asked",
        ]
    )


@pytest.mark.parametrize("harness", ["bpe", "none"])
def test_episode_runs_to_the_environment_outcome(harness: str, tmp_path: Path, counter_env: type) -> None:
    policy = script()
    trace = run_episode(counter_env(), policy, None, EpisodeConfig(harness=harness))
    assert trace.framework == "llamaindex" and trace.harness == harness and trace.env == "counter"
    assert trace.outcome.success is True and trace.outcome.score == 1.0
    assert trace.outcome.info["steps"] == 4
    # the two refused environment calls, plus the made-up tool when there is no BPE
    assert trace.outcome.info["invalid_actions"] == (2 if harness == "bpe" else 3)
    assert len(policy.calls) == 5 and len(trace.model_calls) == 5
    assert trace.metadata["prompt_tokens"] == [c.prompt_tokens for c in trace.model_calls]
    assert all(n > 0 for n in trace.metadata["prompt_tokens"])
    tool_results = [m["content"] for m in trace.messages if m["role"] == "tool"]
    assert tool_results[:2] == ["usage: press(times: integer)", "arguments are not JSON"]
    names = {t["function"]["name"] for t in trace.tools}
    system = policy.calls[-1][0]["content"]
    if harness == "bpe":
        assert names == {"press", "track", "commit", "recall", "note"}
        assert "<bpe-dashboard" in system and "counter = 1" in system  # observed into Belief
        assert [e.name for e in trace.meta_actions] == ["track"] and trace.dashboards
    else:
        assert names == {"press"} and "<bpe-dashboard" not in system
        assert tool_results[2].startswith("Tool track not found")
    path = tmp_path / "t.jsonl"
    with TraceWriter(path) as writer:
        writer.write(trace)
    assert list(read_traces(path))[0].model_calls == trace.model_calls


def test_policy_sees_the_environment_schema_exactly(counter_env: type) -> None:
    policy = ScriptedPolicy([tool_call("press", {"times": 3})])
    run_episode(counter_env(), policy, None, EpisodeConfig(harness="none"))
    assert policy.tools_seen[0] == counter_env().tools()


def test_registered_entry_point_and_experience_store(tmp_path: Path, counter_env: type) -> None:
    assert "llamaindex" in available_frameworks()
    runner = load_framework("llamaindex")
    store = SQLiteExperienceStore(tmp_path / "exp.db")
    try:
        policy = ScriptedPolicy(
            [
                tool_call("note", {"text": "Press exactly the missing count; overshooting fails", "kind": "lesson"}),
                tool_call("press", {"times": 3}),
            ]
        )
        trace = runner(counter_env(), policy, store, EpisodeConfig(namespace=("bench", "counter")))
        assert trace.outcome.success
        hits = store.search(("bench", "counter"), "overshooting press", k=1)
        assert hits and "overshooting" in hits[0].entry.text
    finally:
        store.close()


def test_max_steps_cuts_the_episode(counter_env: type) -> None:
    policy = ScriptedPolicy([tool_call("press", {"times": 1})] * 10)
    env = counter_env(difficulty=20)
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", max_steps=3))
    assert len(policy.calls) == 3
    assert trace.outcome.success is False and trace.outcome.info["cut"] is True


def test_callable_from_inside_an_event_loop(counter_env: type) -> None:
    async def go() -> Any:
        return run_episode(counter_env(), ScriptedPolicy([tool_call("press", {"times": 3})]), None, EpisodeConfig())

    assert asyncio.run(go()).outcome.success


def test_append_harness_is_refused_clearly(counter_env: type) -> None:
    with pytest.raises(UserError, match="append"):
        run_episode(counter_env(), ScriptedPolicy([]), None, EpisodeConfig(harness="append"))
