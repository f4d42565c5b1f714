"""Environments the harness is evaluated and trained on."""

from .base import Env, EnvOutcome, StepResult

__all__ = ["Env", "EnvOutcome", "StepResult"]
