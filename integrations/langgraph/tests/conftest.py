"""Shared pieces for the LangGraph integration tests: a plain tool and a script helper."""

from __future__ import annotations

import pytest
from langchain_core.tools import tool


@tool
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


@pytest.fixture
def lookup_tool():
    return lookup
