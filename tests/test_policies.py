"""Policies: tool-call parsing, the noisy expert, the OpenAI-compatible client on a local server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy, NoisyExpertPolicy, OpenAICompatiblePolicy, parse_tool_calls, tools_system_prompt
from evoharness_bpe.lab.policies.openai import PolicyError
from evoharness_bpe.lab.runner.core import run_episode


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>\n{"name": "wait", "arguments": {"seconds": 3}}\n</tool_call>', [("wait", {"seconds": 3})]),
        ('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": 1}}', [("a", {}), ("b", {"x": 1})]),
        ('Sure!\n```json\n{"name": "act", "arguments": "{\\"command\\": \\"look\\"}"}\n```', [("act", {"command": "look"})]),
        ('{"name": "fetch_page", "arguments": {"page": 2,', [("fetch_page", {"page": 2})]),  # cut off by the token limit
        ('<tool_call>{"name": "act", "parameters": {"command": "go \\"north\\""}}</tool_call>', [("act", {"command": 'go "north"'})]),
        ("I will now fetch the first page.", []),
        ('<tool_call>\n{"name": "act", "arguments": {"command": "put "mug 1""}}\n</tool_call>', [("act", None)]),
        ('<tool_call>{"name": </tool_call>', []),
        ("", []),
    ],
)
def test_parse_tool_calls(text: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    calls = parse_tool_calls(text)
    assert [(c["name"], _loads(c["arguments"])) for c in calls] == expected


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None  # kept as written: the tool answers that it is not valid JSON


def test_broken_arguments_reach_the_environment_as_a_readable_error() -> None:
    env = make_env("crm-migration", 1)
    [call] = parse_tool_calls('<tool_call>\n{"name": "fetch_page", "arguments": {"page": "1"2}}\n</tool_call>', {"fetch_page"})
    assert call["arguments"] == '{"page": "1"2}'
    result = env.step(call)
    assert result.info["invalid"] and "not valid JSON" in result.observation
    assert parse_tool_calls('{"name": "rm -rf", "arguments": {oops', {"fetch_page"}) == []


def test_tools_system_prompt_has_specs_and_a_concrete_example() -> None:
    env = make_env("crm-migration", 1)
    text = tools_system_prompt("Be brief.", env.tools())
    assert text.startswith("Be brief.") and '"name":"submit_batch"' in text
    assert '{"name": "fetch_page", "arguments": {"page": 1}}' in text


@pytest.mark.parametrize("name", ["crm-migration", "compliance-review"])
def test_noisy_expert_makes_mistakes_and_recovers(name: str) -> None:
    env = make_env(name, 2)
    policy = NoisyExpertPolicy(env, epsilon=0.25, seed=3)
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=5, max_steps=env.step_budget * 2))
    assert policy.mistakes > 3
    assert trace.outcome.success and trace.outcome.info["invalid_actions"] >= policy.mistakes // 2
    notes = [e for e in trace.meta_actions if e.name == "note" and e.ok]
    assert any("JSON" in json.loads(e.arguments)["text"] for e in notes), "a pitfall is noted after a rejection"


def test_expert_uses_meta_actions_only_when_offered() -> None:
    env = make_env("crm-migration", 2)
    bpe = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness="bpe", seed=1, max_steps=env.step_budget, window=4))
    kinds = {e.name for e in bpe.meta_actions}
    assert kinds == {"track", "commit", "recall", "note"}
    assert bpe.meta_actions[0].name == "recall"  # recalls before the first risky step
    plain = run_episode(env, ExpertPolicy(env), None, EpisodeConfig(harness="none", seed=1, max_steps=env.step_budget))
    assert plain.outcome.success and not plain.meta_actions
    names = {c["function"]["name"] for m in plain.messages for c in m.get("tool_calls") or []}
    assert not names & kinds


@pytest.mark.parametrize("difficulty", [1, 2])
def test_crm_expert_plans_each_page_as_batches_the_dashboard_lists(difficulty: int) -> None:
    env = make_env("crm-migration", difficulty)
    config = EpisodeConfig(harness="bpe", seed=4, max_steps=env.step_budget, window=4, dashboard_tokens=160, spec_style="compact")
    trace = run_episode(env, ExpertPolicy(env), None, config)
    assert trace.outcome.success
    calls = [c.response["tool_calls"][0]["function"] for c in trace.model_calls]
    names = [c["name"] for c in calls]
    batches = -(-env.n_records // env.batch_size)
    planned = [json.loads(c["arguments"])["subgoal"] for c in calls if c["name"] == "commit" and '"todo"' in c["arguments"]]
    assert planned == [f"batch {i}" for i in range(1, batches + 1)]
    first_fetch = names.index("fetch_page")
    assert names[first_fetch - 2 : first_fetch] == ["commit", "commit"]  # a page's batches are planned before it is read
    for call, name, made in zip(trace.model_calls, names, calls):
        dashboard = call.messages[0]["content"]
        if name == "submit_batch":
            batch = json.loads(made["arguments"])["batch_id"]
            assert "NEXT:" in dashboard and f"batch-{batch}" in dashboard
        if name == "finish":
            assert "NEXT:" not in dashboard  # nothing left to send: the workspace says so


_META_NAMES = ("track", "commit", "recall", "note")


def _crm_names(trace) -> list[str]:  # type: ignore[no-untyped-def]
    return [c.response["tool_calls"][0]["function"]["name"] for c in trace.model_calls]


def _commits(trace, status: str) -> list[str]:  # type: ignore[no-untyped-def]
    calls = [json.loads(e.arguments) for e in trace.meta_actions if e.name == "commit"]
    return [c["subgoal"] for c in calls if c["status"] == status]


def test_sparse_crm_expert_leaves_out_only_what_the_episode_can_do_without() -> None:
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=400, window=4, dashboard_tokens=160, spec_style="compact")
    full, sparse = [], []
    for seed in range(12):
        episode = config.model_copy(update={"seed": seed})
        env = make_env("crm-migration", 1)
        full.append(run_episode(env, ExpertPolicy(env), None, episode))
        env = make_env("crm-migration", 1)
        sparse.append(run_episode(env, ExpertPolicy(env, skip_rate=0.5, seed=1), None, episode))
    assert all(t.outcome.success for t in full + sparse)
    for whole, lean in zip(full, sparse):
        for status in ("todo", "done"):  # every commit stays: the dashboard's NEXT is read off them
            assert _commits(lean, status) == _commits(whole, status)
        assert [n for n in _crm_names(lean) if n not in _META_NAMES] == [n for n in _crm_names(whole) if n not in _META_NAMES]
    left_out = {name: sum(n.count(name) for n in map(_crm_names, full)) - sum(n.count(name) for n in map(_crm_names, sparse))
                for name in _META_NAMES}
    assert left_out["commit"] == 0 and all(left_out[name] > 0 for name in ("recall", "note", "track")), left_out
    env = make_env("crm-migration", 1)
    again = run_episode(env, ExpertPolicy(env, skip_rate=0.5, seed=1), None, config.model_copy(update={"seed": 3}))
    assert _crm_names(again) == _crm_names(sparse[3])  # an episode's draws are its own: replayable


def test_lean_crm_expert_plays_whole_episodes_either_lean_or_in_full() -> None:
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=400, window=4, dashboard_tokens=160, spec_style="compact")
    kinds = []
    for seed in range(12):
        episode = config.model_copy(update={"seed": seed})
        env = make_env("crm-migration", 1)
        whole = run_episode(env, ExpertPolicy(env), None, episode)
        env = make_env("crm-migration", 1)
        policy = ExpertPolicy(env, lean_rate=0.5, seed=2)
        mixed = run_episode(env, policy, None, episode)
        assert mixed.outcome.success
        if policy.lean:
            names = _crm_names(mixed)
            assert not {"recall", "note", "track"} & set(names), names
            for status in ("todo", "done"):
                assert _commits(mixed, status) == _commits(whole, status)
            assert [n for n in names if n not in _META_NAMES] == [n for n in _crm_names(whole) if n not in _META_NAMES]
        else:
            assert _crm_names(mixed) == _crm_names(whole)
        kinds.append(policy.lean)
    assert 0 < sum(kinds) < len(kinds), kinds


def test_crm_expert_notes_before_the_commit_when_asked() -> None:
    """The same episode, its lessons moved ahead of their batch's commit: nothing else changes,
    and no note is followed by finish."""
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=400, window=4, dashboard_tokens=160, spec_style="compact")
    noted_last = 0
    for seed in range(6):
        episode = config.model_copy(update={"seed": seed})
        env = make_env("crm-migration", 1)
        after = _crm_names(run_episode(env, ExpertPolicy(env), None, episode))
        env = make_env("crm-migration", 1)
        trace = run_episode(env, ExpertPolicy(env, note_before_commit=True), None, episode)
        before = _crm_names(trace)
        assert trace.outcome.success
        assert sorted(before) == sorted(after) and before != after
        assert [n for n in before if n != "note"] == [n for n in after if n != "note"]
        pairs = list(zip(before, before[1:]))
        assert ("note", "finish") not in pairs and ("commit", "note") not in pairs
        noted_last += ("note", "finish") in zip(after, after[1:])
    assert noted_last  # by default some episodes end with a note


def test_crm_expert_tracks_the_unsent_ids_while_the_page_is_in_view() -> None:
    """With `track_queue`, each batch that leaves ids of its page unsent is followed by a track of
    exactly those ids (a range: they run in order), made while the page's ids are still among the
    recent messages; the batch that follows sends them, and the episode still succeeds. Lean
    episodes leave the track out."""
    from evoharness_bpe.lab.policies.expert import id_range

    assert id_range(["R0026", "R0027", "R0028"]) == "R0026..R0028"
    assert id_range(["R0026", "R0028"]) == "R0026, R0028" and id_range(["R0026"]) == "R0026"
    config = EpisodeConfig(harness="bpe", seed=0, max_steps=400, window=4, dashboard_tokens=280, spec_style="compact")
    for level, pages in ((1, 1), (2, 4)):
        env = make_env("crm-migration", level)
        plain = run_episode(env, ExpertPolicy(env), None, config)
        env = make_env("crm-migration", level)
        trace = run_episode(env, ExpertPolicy(env, track_queue=True), None, config)
        assert trace.outcome.success
        calls = [(m.response["tool_calls"][0]["function"], m.messages) for m in trace.model_calls]
        tracked = [i for i, (fn, _) in enumerate(calls) if fn["name"] == "track" and "records.next" in fn["arguments"]]
        assert len(tracked) == pages  # one per page: after its first batch
        assert [n for n in _crm_names(trace) if n != "track"] == [n for n in _crm_names(plain) if n != "track"]
        for i in tracked:
            value = json.loads(calls[i][0]["arguments"])["value"]
            first, last = value.split("..")
            view = " ".join(str(m.get("content")) for m in calls[i][1][1:])
            assert first in view and last in view  # the page's ids are still in the window
            sent = next(json.loads(fn["arguments"])["record_ids"] for fn, _ in calls[i:] if fn["name"] == "submit_batch")
            assert (sent[0], sent[-1]) == (first, last)
    env = make_env("crm-migration", 2)
    lean = run_episode(env, ExpertPolicy(env, track_queue=True, lean_rate=1.0), None, config)
    assert lean.outcome.success and "track" not in _crm_names(lean)


def test_expert_skip_and_lean_rates_are_probabilities() -> None:
    env = make_env("crm-migration", 1)
    with pytest.raises(UserError, match="skip_rate"):
        ExpertPolicy(env, skip_rate=1.0)
    with pytest.raises(UserError, match="lean_rate"):
        ExpertPolicy(env, lean_rate=1.5)


class _Server:
    """A tiny OpenAI-compatible endpoint on 127.0.0.1 whose replies come from a function."""

    def __init__(self, answer) -> None:  # type: ignore[no-untyped-def]
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, payload = answer(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Any]:
    servers: list[_Server] = []

    def start(answer):  # type: ignore[no-untyped-def]
        servers.append(_Server(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def test_openai_policy_plays_an_episode_through_a_local_server(server) -> None:  # type: ignore[no-untyped-def]
    env = make_env("compliance-review", 1)
    expert = ExpertPolicy(env)

    def answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        reply = expert.complete(body["messages"], body["tools"])
        return 200, {"choices": [{"message": reply}], "usage": {"prompt_tokens": 10}}

    srv = server(answer)
    policy = OpenAICompatiblePolicy("served-model", srv.url, api_key="k")
    trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=2, max_steps=env.step_budget))
    assert trace.outcome.success
    first = srv.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["auth"] == "Bearer k"
    assert first["body"]["model"] == "served-model" and {t["function"]["name"] for t in first["body"]["tools"]} >= {"decide", "commit"}
    assert len(policy.usage) == len(trace.model_calls)
    # the server's usage is the exact prompt size, recorded as such
    assert trace.metadata["prompt_token_source"] == "exact" and set(trace.metadata["prompt_tokens"]) == {10}
    assert policy.count_prompt_tokens([{"role": "user", "content": "another prompt"}], []) is None


def test_openai_policy_parses_text_calls_and_reports_errors(server) -> None:  # type: ignore[no-untyped-def]
    srv = server(lambda body: (200, {"choices": [{"message": {"role": "assistant", "content": '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'}}]}))
    reply = OpenAICompatiblePolicy("m", srv.url).complete([{"role": "user", "content": "hi"}], make_env("crm-migration", 1).tools())
    assert reply["tool_calls"][0]["function"] == {"name": "finish", "arguments": "{}"}
    garbage = server(lambda body: (200, {"unexpected": True}))
    text = OpenAICompatiblePolicy("m", garbage.url).complete([{"role": "user", "content": "hi"}], [])
    assert "tool_calls" not in text and "unexpected" in text["content"]
    refused = server(lambda body: (400, {"error": "bad model"}))
    with pytest.raises(PolicyError, match="400"):
        OpenAICompatiblePolicy("m", refused.url, retries=0).complete([{"role": "user", "content": "hi"}], [])
    with pytest.raises(PolicyError, match="failed after 1 attempts"):
        OpenAICompatiblePolicy("m", "http://127.0.0.1:9/v1", retries=0, timeout=2).complete([], [])
