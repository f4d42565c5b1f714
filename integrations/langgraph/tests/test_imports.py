"""The package imports cheaply and the core stays framework-free."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    return set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())


def test_package_import_does_not_load_langchain() -> None:
    loaded = _modules_after("import evoharness_bpe_langgraph")
    assert not {m for m in loaded if m.startswith(("langchain", "langgraph"))}


def test_public_names_resolve() -> None:
    import evoharness_bpe_langgraph as pkg

    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
