"""The LlamaIndex example's real-model path (``OpenAILike``) against a server with llama.cpp's quirks."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe import read_traces
from evoharness_bpe.testing.openai_server import QuirkyServer

import llama_index.llms.openai_like  # noqa: E402,F401 - the [openai] extra, in requirements-dev.txt: missing is an error
pytestmark = pytest.mark.slow  # a local HTTP server and the example

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_function_agent.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("llamaindex_function_agent_quirky", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_gets_through_the_quirks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_example()
    with QuirkyServer(list(module.SCRIPT)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_MODEL", "quirky")
        monkeypatch.setenv("EVOHARNESS_NULL_CONTENT", "empty")
        (trace,) = list(read_traces(module.main([str(tmp_path)])))
    assert trace.outcome.success is True and len(srv.requests) == len(module.SCRIPT)
    for body in srv.requests:
        assert body["tool_choice"] == "auto" and body["max_tokens"] == 512 and not body.get("stream")
        assert all(m.get("content") is not None for m in body["messages"])
    # prompt sizes are the server's usage, not the project's estimate
    assert [c.prompt_tokens for c in trace.model_calls] == srv.reported


def test_content_null_refused_fails_the_example_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load_example()
    with QuirkyServer(list(module.SCRIPT)) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.url)
        monkeypatch.setenv("OPENAI_TIMEOUT", "5")
        monkeypatch.delenv("EVOHARNESS_NULL_CONTENT", raising=False)
        assert module.cli([str(tmp_path)]) == 1
