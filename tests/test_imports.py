"""The core stays framework-free and light."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def test_core_loads_no_lab_module_framework_torch_or_vllm() -> None:
    code = (
        "import sys, evoharness_bpe, evoharness_bpe.harness, evoharness_bpe.recorder\n"
        "from evoharness_bpe.harness import episode_tools, count_prompt_tokens\n"
        "loaded = [m for m in sys.modules if m.startswith('evoharness_bpe.lab') or m.split('.')[0] in "
        f"{HEAVY!r} + ('evoharness_bpe_langgraph', 'evoharness_bpe_llamaindex', 'evoharness_bpe_training')]\n"
        "print(' '.join(sorted(loaded)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_package_import_loads_public_names_on_first_use() -> None:
    code = (
        "import sys, evoharness_bpe\n"
        "print('pydantic' in sys.modules, 'evoharness_bpe.workspace' in sys.modules)\n"
        "from evoharness_bpe import *\n"
        "names = [n for n in evoharness_bpe.__all__ if n not in globals()]\n"
        "print(names, evoharness_bpe.Workspace.__module__, 'Workspace' in dir(evoharness_bpe))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["False False", "[] evoharness_bpe.workspace True"]


def test_unknown_package_attribute_is_an_attribute_error() -> None:
    import evoharness_bpe

    with pytest.raises(AttributeError, match="no attribute 'Workspaces'"):
        evoharness_bpe.Workspaces  # noqa: B018


def test_the_lab_has_no_import_circle() -> None:
    # Each lab module imports on its own, first, in a fresh interpreter: a circle hidden by import
    # order would fail for one of them.
    for module in ("frameworks", "registry", "runner.core", "envs", "cli", "policies"):
        code = f"import evoharness_bpe.lab.{module}"
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_core_docstring_examples_run() -> None:
    import doctest
    import importlib
    import pkgutil

    import evoharness_bpe

    names = [m.name for m in pkgutil.walk_packages(evoharness_bpe.__path__, "evoharness_bpe.")
             if not m.name.startswith(("evoharness_bpe.lab", "evoharness_bpe.stores.postgres"))]
    tried = 0
    for name in names:
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, name
        tried += result.attempted
    assert tried >= 15  # the workspace, harness, recorder and store examples really ran
