"""The example runs offline and writes a trace that reads back."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from evoharness_bpe import read_traces

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "llamaindex_function_agent.py"


def test_example_runs_offline_twice_and_remembers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = importlib.util.spec_from_file_location("llamaindex_function_agent", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    path = module.main([str(tmp_path)])
    module.main([str(tmp_path)])  # the second run is shown the first run's lesson
    first, second = list(read_traces(path))
    for trace in (first, second):
        assert trace.framework == "llamaindex" and trace.outcome.success is True
        assert len(trace.model_calls) == 6 and trace.messages[-1]["content"].startswith("Reserved 3 units")
    assert "Check stock before reserving" in second.model_calls[0].messages[0]["content"]
    assert "Check stock before reserving" not in first.model_calls[0].messages[0]["content"]
    assert "Trace:" in capsys.readouterr().out


def _load() -> object:
    spec = importlib.util.spec_from_file_location("llamaindex_function_agent", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("reply", ["", "Sure, done."])
def test_example_exits_non_zero_when_the_model_fails(
    reply: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty reply (a refused stream, a dead server) or a run that did nothing fails loudly."""
    from evoharness_bpe_llamaindex.testing import ScriptedLLM

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    module = _load()
    monkeypatch.setattr(module, "make_llm", lambda: ScriptedLLM([reply]))
    assert module.cli([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "run failed" in err
    assert ("ModelCallError" in err) if reply == "" else ("not reserved" in err)
    (trace,) = read_traces(tmp_path / "traces.jsonl")  # the failed run still left its trace
    assert trace.outcome.success is False
