"""Environments the harness is evaluated and trained on.

`make_env(name, difficulty)` builds one by name (`evoharness_bpe.lab.registry`); the ALFWorld and
TextWorld adapters import their engines only when built (extras ``[alfworld]`` and ``[textworld]``).
"""

from __future__ import annotations

from ..registry import BUILTIN_ENVS as ENVIRONMENTS
from ..registry import make_env
from .base import Env, EnvOutcome, StepResult

__all__ = ["Env", "EnvOutcome", "StepResult", "ENVIRONMENTS", "make_env"]
