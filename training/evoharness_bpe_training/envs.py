"""Finding an environment by name: ``module:factory`` or a name registered by an installed package.

Packages register environments under the ``evoharness.envs`` entry-point group
(``crm-migration = "evoharness_bpe.envs.crm:CRMMigrationEnv"``); each entry point is a callable
taking ``difficulty=`` and returning an `Env`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from importlib.metadata import entry_points

from evoharness_bpe.envs.base import Env
from evoharness_bpe.exceptions import UserError

__all__ = ["ENV_ENTRY_POINT_GROUP", "available_envs", "env_factory"]

ENV_ENTRY_POINT_GROUP = "evoharness.envs"


def available_envs() -> list[str]:
    """Names of the environments installed packages register."""
    return sorted(ep.name for ep in entry_points(group=ENV_ENTRY_POINT_GROUP))


def env_factory(name: str, *, difficulty: int = 1) -> Callable[[], Env]:
    """A zero-argument factory for environment `name` at `difficulty`."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"cannot load environment {name!r}: {exc}") from exc
    else:
        found = [ep for ep in entry_points(group=ENV_ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            known = ", ".join(available_envs()) or "none installed"
            raise UserError(f"unknown environment {name!r} (registered: {known}); or pass `package.module:Factory`")
        target = found[0].load()
    return partial(target, difficulty=difficulty)
