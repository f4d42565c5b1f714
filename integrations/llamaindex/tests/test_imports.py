"""LlamaIndex is imported by this package only, and only when one of its names is used."""

from __future__ import annotations

import subprocess
import sys

import evoharness_bpe_llamaindex


def loaded(code: str) -> bool:
    probe = f"import sys\n{code}\nprint(any(m == 'llama_index' or m.startswith('llama_index.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


def test_core_does_not_load_llama_index() -> None:
    assert not loaded("import evoharness_bpe, evoharness_bpe.lab.registry\nevoharness_bpe.lab.registry.available_frameworks()")


def test_package_import_is_cheap_and_names_load_on_use() -> None:
    assert not loaded("import evoharness_bpe_llamaindex")
    assert loaded("from evoharness_bpe_llamaindex import with_bpe")


def test_every_public_name_resolves() -> None:
    for name in evoharness_bpe_llamaindex.__all__:
        assert getattr(evoharness_bpe_llamaindex, name) is not None
    assert set(evoharness_bpe_llamaindex.__all__) <= set(dir(evoharness_bpe_llamaindex))
