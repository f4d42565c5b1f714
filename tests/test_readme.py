"""The README's Python snippets run as shown: the core one names its placeholders itself, and the
LlamaIndex one is a whole program (``async def main()`` / ``asyncio.run``) once its ``tools`` and
``llm`` are given."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippet(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text("utf-8"), flags=re.S)
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"{len(found)} python blocks hold {containing!r}"
    return found[0]


@pytest.fixture
def in_tmp(tmp_path: Path) -> Any:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(cwd)


def test_the_python_snippet_runs_as_shown(in_tmp: Path) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(_snippet("ws = Workspace("), "README.md", "exec"), namespace)  # noqa: S102 - the README's own code
    ws = namespace["ws"]
    assert namespace["result"].ok is False and "field 'status'" in namespace["result"].content
    assert ws.state.progress.counts()["doing"] == 1 and (in_tmp / "experience.db").exists()


def test_the_llamaindex_snippet_runs_as_shown(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evoharness_bpe_llamaindex.testing import ScriptedLLM
    from llama_index.core.tools import FunctionTool

    def flagged(quarter: str) -> str:
        """The transactions flagged in a quarter."""
        return json.dumps([{"id": "T-1", "amount": 12000}])

    llm = ScriptedLLM([[("flagged", {"quarter": "Q3"})], "T-1 needs a review."])
    code = _snippet("with_bpe(FunctionAgent(")
    assert "async def main()" in code and "asyncio.run(main())" in code
    exec(compile(code, "README.md", "exec"), {"tools": [FunctionTool.from_defaults(flagged)], "llm": llm})  # noqa: S102
    assert "T-1 needs a review." in capsys.readouterr().out
    assert (in_tmp / "traces.jsonl").read_text().count("\n") == 1   # one trace for the run
