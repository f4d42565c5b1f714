"""LlamaIndex's workflow runtime inspects agent instances (pydantic models) with
`inspect.getmembers`, which touches pydantic's deprecated attributes; those warnings say nothing
about this package, so they are silenced for its tests only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from evoharness_bpe.lab.envs.base import EnvOutcome, StepResult

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"))


class CounterEnv:
    """Press a button until the counter reads the target; pressing past it fails the episode."""

    name = "counter"

    def __init__(self, difficulty: int = 1) -> None:
        self.difficulty = difficulty
        self.count = 0
        self.target = 3

    def reset(self, seed: int) -> tuple[str, str]:
        self.count, self.target = 0, 2 + self.difficulty + seed % 2
        return f"Press the button until the counter reads {self.target}.", "counter = 0"

    def tools(self) -> list[dict[str, Any]]:
        schema = {
            "type": "object",
            "properties": {"times": {"type": "integer", "minimum": 1, "description": "How many presses."}},
            "required": ["times"],
            "additionalProperties": False,
        }
        return [{"type": "function", "function": {"name": "press", "description": "Press the button.", "parameters": schema}}]

    def step(self, call: dict[str, Any]) -> StepResult:
        args = call["arguments"]
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return StepResult(observation="arguments are not JSON", info={"invalid": True})
        if call["name"] != "press" or not isinstance(args, dict) or not isinstance(args.get("times"), int):
            return StepResult(observation="usage: press(times: integer)", info={"invalid": True})
        self.count += args["times"]
        return StepResult(observation=f"counter = {self.count}", done=self.count >= self.target)

    def outcome(self) -> EnvOutcome:
        return EnvOutcome(success=self.count == self.target, score=min(1.0, self.count / self.target))


@pytest.fixture
def counter_env() -> type[CounterEnv]:
    """A tiny deterministic environment (the real ones live elsewhere)."""
    return CounterEnv
