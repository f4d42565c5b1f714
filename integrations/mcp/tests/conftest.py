"""Fixtures: `evoharness mcp` over HTTP with two tenants."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evoharness_bpe_mcp.testing import start_http_server


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The server on loopback, its tenant tokens, store and trace file."""
    tokens = {"token-acme-123456": ["acme", "agent"], "token-globex-123456": ["globex", "agent"]}
    tenants = tmp_path / "tenants.json"
    tenants.write_text(json.dumps({"tokens": tokens}))
    traces = tmp_path / "traces.jsonl"
    proc, url = start_http_server("--store", str(tmp_path / "experience.db"), "--tenants", str(tenants), "--traces", str(traces))
    try:
        yield {"url": url, "tokens": list(tokens), "traces": traces}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
