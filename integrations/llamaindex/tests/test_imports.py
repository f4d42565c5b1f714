"""LlamaIndex is imported by this package only, and only when one of its names is used."""

from __future__ import annotations

import subprocess
import sys

import evoharness_bpe_llamaindex
import pytest


def loaded(code: str) -> bool:
    probe = f"import sys\n{code}\nprint(any(m == 'llama_index' or m.startswith('llama_index.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_core_does_not_load_llama_index() -> None:
    assert not loaded("import evoharness_bpe, evoharness_bpe.lab.registry\nevoharness_bpe.lab.registry.available_frameworks()")


@pytest.mark.slow  # imports LlamaIndex in subprocesses
def test_package_import_is_cheap_and_names_load_on_use() -> None:
    assert not loaded("import evoharness_bpe_llamaindex")
    assert loaded("from evoharness_bpe_llamaindex import with_bpe")


def test_every_public_name_resolves() -> None:
    """Each public name is the object its submodule defines, under that name, documented."""
    import importlib

    pkg = evoharness_bpe_llamaindex
    where = _type_checking_imports(pkg)
    assert set(pkg.__all__) == set(where) | {"__version__"}
    for name in set(pkg.__all__) - {"__version__"}:
        obj = getattr(pkg, name)
        assert obj is getattr(importlib.import_module(f"{pkg.__name__}.{where[name]}"), name)
        assert obj.__name__ == name and callable(obj) and (obj.__doc__ or "").strip(), name
    assert pkg.__version__ == _project_version()
    assert set(pkg.__all__) <= set(dir(pkg))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        pkg.nonexistent  # noqa: B018


def _type_checking_imports(module) -> dict[str, str]:
    """Name -> submodule, as the ``if TYPE_CHECKING:`` block of the package imports them."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(module.__file__).read_text("utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {alias.name: imp.module for imp in block.body if isinstance(imp, ast.ImportFrom) for alias in imp.names}


def _project_version() -> str:
    import tomllib
    from pathlib import Path

    return tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text("utf-8"))["project"]["version"]
