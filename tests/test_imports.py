"""The core stays framework-free and light."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("langgraph", "langchain", "llama_index", "torch", "transformers", "vllm", "trl", "datasets")


def test_core_imports_no_framework() -> None:
    code = (
        "import sys, evoharness_bpe, evoharness_bpe.testing.conformance\n"
        "from evoharness_bpe import Workspace\n"
        "ws = Workspace('g'); ws.act('track', {'key': 'k', 'value': 'v'}); ws.dashboard()\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
