"""Environments the harness is evaluated and trained on.

`make_env(name, difficulty)` builds one by name; the ALFWorld and TextWorld adapters import
their engines only when built (extras ``[alfworld]`` and ``[textworld]``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from ...exceptions import UserError
from .base import Env, EnvOutcome, StepResult

__all__ = ["Env", "EnvOutcome", "StepResult", "ENVIRONMENTS", "make_env"]

ENVIRONMENTS: dict[str, str] = {
    "crm-migration": "evoharness_bpe.lab.envs.crm:CRMMigrationEnv",
    "compliance-review": "evoharness_bpe.lab.envs.compliance:ComplianceReviewEnv",
    "alfworld": "evoharness_bpe.lab.envs.alfworld:ALFWorldEnv",
    "textworld": "evoharness_bpe.lab.envs.textworld:TextWorldEnv",
}
"""Built-in environment names and where their classes live."""


def make_env(name: str, difficulty: int = 1, **kwargs: Any) -> Env:
    """The environment `name` at `difficulty` (1 to 3); keyword arguments go to its constructor."""
    if name not in ENVIRONMENTS:
        raise UserError(f"unknown environment {name!r}; choose one of {', '.join(ENVIRONMENTS)}")
    module, _, cls = ENVIRONMENTS[name].partition(":")
    try:
        return getattr(import_module(module), cls)(difficulty, **kwargs)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
