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
    """Each public name is the object its submodule defines, under that name, documented."""
    import importlib

    import pytest

    import evoharness_bpe_langgraph as pkg

    where = _type_checking_imports(pkg)
    assert set(pkg.__all__) == set(where)
    for name in pkg.__all__:
        obj = getattr(pkg, name)
        assert obj is getattr(importlib.import_module(f"{pkg.__name__}.{where[name]}"), name)
        assert obj.__name__ == name and callable(obj) and (obj.__doc__ or "").strip(), name
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        pkg.nonexistent  # noqa: B018


def _type_checking_imports(module) -> dict[str, str]:
    """Name -> submodule, as the ``if TYPE_CHECKING:`` block of the package imports them."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(module.__file__).read_text("utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {alias.name: imp.module for imp in block.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}
