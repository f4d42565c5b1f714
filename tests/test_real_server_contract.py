"""The project's OpenAI clients against a local server with llama.cpp's quirks (`QuirkyServer`).

Each quirk is first shown to break a naive client, then the project's client is shown to get
through it: tool_choice, content null, max_tokens, grammar-safe schemas, retries, timeouts,
and the server's own usage as the trace's prompt-token count.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from evoharness_bpe import Workspace
from evoharness_bpe.consolidator import OpenAITeacher
from evoharness_bpe.endpoint import EndpointSettings, compatible_body
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.lab.frameworks import EpisodeConfig
from evoharness_bpe.lab.policies import ExpertPolicy, OpenAICompatiblePolicy
from evoharness_bpe.lab.policies.openai import PolicyError
from evoharness_bpe.lab.envs import make_env
from evoharness_bpe.lab.runner.core import run_episode
from evoharness_bpe.testing.openai_server import QuirkyServer

import openai  # noqa: E402,F401 - requirements-dev.txt installs it: missing is an error


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{url}/chat/completions", data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_fake_server_has_the_quirks() -> None:
    tools = Workspace("x").openai_tools()
    with QuirkyServer([[("track", {"key": "k", "value": "v"})]]) as srv:
        base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 8}
        status, reply = _post(srv.url, base)  # no tool_choice: no tool call
        assert status == 200 and "tool_calls" not in reply["choices"][0]["message"]
        null = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "track", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "ok"}]
        assert _post(srv.url, {**base, "tool_choice": "auto", "messages": null})[0] == 500
        runaway = {k: v for k, v in base.items() if k != "max_tokens"} | {"max_completion_tokens": 8, "tool_choice": "auto"}
        assert _post(srv.url, runaway)[1]["choices"][0]["finish_reason"] == "length"
        old_track = {"type": "function", "function": {"name": "track", "parameters": {"type": "object", "properties": {"value": {"type": "string", "maxLength": 4000}}}}}
        assert _post(srv.url, {**base, "tool_choice": "auto", "tools": [old_track]})[0] == 500
        status, reply = _post(srv.url, {**base, "tool_choice": "auto"})  # the project's schemas pass
        assert status == 200 and reply["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "track"


def test_policy_plays_an_episode_through_every_quirk() -> None:
    env = make_env("compliance-review", 1)
    expert = ExpertPolicy(env)
    with QuirkyServer(lambda body: _as_turn(expert.complete(body["messages"], body["tools"])), fail_first=2) as srv:
        policy = OpenAICompatiblePolicy("quirky", srv.url, null_content=False, retries=2, timeout=10)
        trace = run_episode(env, policy, None, EpisodeConfig(harness="bpe", seed=2, max_steps=env.step_budget))
    assert trace.outcome.success  # two 503s retried, tools offered, no content null, capped replies
    first = srv.requests[2]
    assert first["tool_choice"] == "auto" and first["max_tokens"] == 512
    assert {"track", "commit", "recall", "note"} <= {t["function"]["name"] for t in first["tools"]}
    assert "<bpe-dashboard" in first["messages"][0]["content"]
    # the server's own usage is the trace's prompt size, not the project's estimate
    assert trace.metadata["prompt_token_source"] == "exact"
    assert trace.metadata["prompt_tokens"] == [u["prompt_tokens"] for u in policy.usage] == srv.reported


def _as_turn(reply: dict[str, Any]) -> Any:
    calls = reply.get("tool_calls") or []
    if not calls:
        return reply.get("content") or ""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")) for c in calls]


def test_content_null_is_a_500_unless_the_option_is_set() -> None:
    script = [[("track", {"key": "k", "value": "v"})], "done"]
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "tracked"}]
    with QuirkyServer(script) as srv:
        with pytest.raises(PolicyError, match="500"):
            OpenAICompatiblePolicy("m", srv.url, retries=0).complete(history, Workspace("x").openai_tools())
        reply = OpenAICompatiblePolicy("m", srv.url, retries=0, null_content=False).complete(history, Workspace("x").openai_tools())
    assert reply["tool_calls"][0]["function"]["name"] == "track"
    assert srv.requests[-1]["messages"][1]["content"] == ""


def test_a_server_that_hangs_fails_within_the_timeout() -> None:
    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            time.sleep(5)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        policy = OpenAICompatiblePolicy("m", f"http://127.0.0.1:{httpd.server_address[1]}/v1", timeout=0.5, retries=0)
        started = time.monotonic()
        with pytest.raises(PolicyError, match="failed after 1 attempts"):
            policy.complete([{"role": "user", "content": "hi"}], [])
        assert time.monotonic() - started < 4
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_teacher_sends_a_cap_and_keeps_the_usage() -> None:
    with QuirkyServer(['{"decisions": []}'], fail_first=1) as srv:
        teacher = OpenAITeacher("quirky", srv.url, api_key="k", retries=1, timeout=10)
        assert teacher([{"role": "user", "content": "consolidate"}]) == '{"decisions": []}'
    assert srv.requests[-1]["max_tokens"] == 1024 and teacher.usage[0]["prompt_tokens"] >= 1000


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OPENAI_MODEL", "smollm2")
    monkeypatch.setenv("OPENAI_MAX_TOKENS", "128")
    monkeypatch.setenv("EVOHARNESS_NULL_CONTENT", "empty")
    s = EndpointSettings.from_env(timeout=5)
    assert (s.model, s.base_url, s.max_tokens, s.null_content, s.timeout) == ("smollm2", "http://127.0.0.1:1/v1", 128, False, 5)
    body = s.chat_body([{"role": "assistant", "content": None, "tool_calls": [{}]}], [{"type": "function"}])
    assert body["tool_choice"] == "auto" and body["max_tokens"] == 128 and body["messages"][0]["content"] == ""
    assert "tool_choice" not in s.chat_body([{"role": "user", "content": "hi"}])
    assert compatible_body({"max_completion_tokens": 9}, s)["max_tokens"] == 9
    monkeypatch.setenv("EVOHARNESS_NULL_CONTENT", "maybe")
    with pytest.raises(UserError, match="EVOHARNESS_NULL_CONTENT"):
        EndpointSettings.from_env()
    with pytest.raises(UserError, match="timeout"):
        EndpointSettings("m", timeout=0)
