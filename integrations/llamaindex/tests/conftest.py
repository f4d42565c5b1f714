"""LlamaIndex's workflow runtime inspects agent instances (pydantic models) with
`inspect.getmembers`, which touches pydantic's deprecated attributes; those warnings say nothing
about this package, so they are silenced for its tests only."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"))
