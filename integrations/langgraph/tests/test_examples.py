"""The LangGraph examples run offline with the scripted model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from evoharness_bpe import read_traces

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _run(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_BASE_URL"}
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_create_agent_example(tmp_path) -> None:
    path = tmp_path / "traces.jsonl"
    out = _run(str(EXAMPLES / "langgraph_create_agent.py"), str(path))
    assert "Split phone numbers into country code" in out.split("--- thread t2")[1]  # recalled in the other thread
    traces = list(read_traces(path))
    assert len(traces) == 2 and "crm.phone_format" in traces[0].dashboards[-1].text


def test_stategraph_example() -> None:
    out = _run(str(EXAMPLES / "langgraph_stategraph.py"))
    assert "price-flight=done, price-hotel=done" in out
    assert "380 EUR after the flight" in out
