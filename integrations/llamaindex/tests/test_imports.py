"""Only this package imports LlamaIndex; the core stays free of it."""

from __future__ import annotations

import subprocess
import sys


def loaded(code: str) -> bool:
    probe = f"import sys\n{code}\nprint(any(m == 'llama_index' or m.startswith('llama_index.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_core_does_not_load_llama_index() -> None:
    assert not loaded("import evoharness_bpe, evoharness_bpe.frameworks\nevoharness_bpe.frameworks.available_frameworks()")


def test_the_integration_does() -> None:
    assert loaded("import evoharness_bpe_llamaindex")
