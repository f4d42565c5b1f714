"""The LangGraph example's real-model path (``ChatOpenAI``) against a server with llama.cpp's quirks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from evoharness_bpe import read_traces
from evoharness_bpe.testing.openai_server import QuirkyServer

import langchain_openai  # noqa: E402,F401 - the [openai] extra, in requirements-dev.txt: missing is an error
pytestmark = pytest.mark.slow  # two example runs in subprocesses

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SCRIPT = [  # the example's own script, thread t1 then t2
    [("upload", {"record_id": "C-1"})],
    [("upload", {"record_id": "C-3"})],
    [("track", {"key": "crm.phone_format", "value": "phone needs its own country code field"})],
    [("note", {"text": "Split phone numbers into country code and number before upload", "tags": ["crm"]})],
    [("commit", {"subgoal": "upload records", "status": "done"})],
    "Uploaded C-1; C-3 needs its phone split first.",
    [("recall", {"query": "phone number upload"})],
    "I will split phone numbers first.",
]


def _example(url: str, trace: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_MODEL": "quirky", "OPENAI_TIMEOUT": "20", **env}
    return subprocess.run([sys.executable, str(EXAMPLES / "langgraph_create_agent.py"), str(trace)],
                          capture_output=True, text=True, env=environ, timeout=300)


def test_create_agent_example_gets_through_the_quirks(tmp_path: Path) -> None:
    with QuirkyServer(SCRIPT) as srv:
        done = _example(srv.url, tmp_path / "t.jsonl", EVOHARNESS_NULL_CONTENT="empty")
    assert done.returncode == 0, done.stderr
    assert "Split phone numbers into country code" in done.stdout.split("--- thread t2")[1]  # recalled
    assert len(srv.requests) == len(SCRIPT)
    for body in srv.requests:  # tools offered with tool_choice, capped as max_tokens, no content null
        assert body["tool_choice"] == "auto" and body["max_tokens"] == 512
        assert {"track", "commit", "recall", "note", "upload"} <= {t["function"]["name"] for t in body["tools"]}
        assert "<bpe-dashboard" in body["messages"][0]["content"]
    assert "crm.phone_format" in srv.requests[3]["messages"][0]["content"]  # the track result is on the next dashboard
    traces = list(read_traces(tmp_path / "t.jsonl"))
    # prompt sizes are the server's usage, not the project's estimate
    assert {t.metadata["prompt_token_source"] for t in traces} == {"exact"}
    assert [n for t in traces for n in t.metadata["prompt_tokens"]] == srv.reported


def test_a_refused_call_fails_the_example_loudly(tmp_path: Path) -> None:
    with QuirkyServer(SCRIPT) as srv:  # content null is left as it is: the server answers 500
        done = _example(srv.url, tmp_path / "t.jsonl", OPENAI_TIMEOUT="5")
    assert done.returncode == 1
    assert "run failed" in done.stderr and "500" in done.stderr


def test_an_empty_reply_fails_the_example_loudly(tmp_path: Path) -> None:
    with QuirkyServer([""]) as srv:
        done = _example(srv.url, tmp_path / "t.jsonl")
    assert done.returncode == 1 and "ModelCallError" in done.stderr
