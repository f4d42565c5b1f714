"""The examples a user copies run as they are."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_langgraph_agent_through_langchain_mcp_adapters(capsys: pytest.CaptureFixture[str]) -> None:
    module = runpy.run_path(str(EXAMPLES / "mcp_langgraph_agent.py"))
    assert module["main"]() == 0
    out = capsys.readouterr().out
    assert "noted as" in out                       # the first session wrote a lesson
    assert "lesson: «Split phone numbers into country code" in out  # the second session recalled it
    dashboard = out.split("the system message the model saw after recall:")[1]
    assert "<bpe-dashboard" in dashboard and "Migrate customer C-2" in dashboard


def test_desktop_config_snippet_starts_the_installed_command() -> None:
    config = json.loads((EXAMPLES / "mcp" / "claude_desktop_config.json").read_text())
    server = config["mcpServers"]["evoharness-bpe"]
    assert server["command"] == "evoharness" and server["args"][0] == "mcp"
    help_text = subprocess.run([sys.executable, "-m", "evoharness_bpe_mcp", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in server["args"][1::2]:
        assert flag in help_text, flag
