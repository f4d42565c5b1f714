"""Finding an environment by name: a built-in one, one an installed package registers, or ``module:Factory``.

Built-in names (``crm-migration``, ``compliance-review``, ``alfworld``, ``textworld``) resolve
through the core's `evoharness_bpe.lab.envs.make_env`. Other packages register environments under the
``evoharness.envs`` entry-point group (``my-env = "my_pkg.envs:MyEnv"``); each entry point, like a
``package.module:Factory``, is a callable taking ``difficulty=`` and returning an `Env`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from importlib.metadata import entry_points

from evoharness_bpe.lab.envs import ENVIRONMENTS, make_env
from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.exceptions import UserError

__all__ = ["ENV_ENTRY_POINT_GROUP", "available_envs", "env_factory"]

ENV_ENTRY_POINT_GROUP = "evoharness.envs"


def available_envs() -> list[str]:
    """The built-in environments and those installed packages register."""
    return sorted({*ENVIRONMENTS, *(ep.name for ep in entry_points(group=ENV_ENTRY_POINT_GROUP))})


def env_factory(name: str, *, difficulty: int = 1) -> Callable[..., Env]:
    """A factory for environment `name`: called bare it builds one at `difficulty`.

    The factory also takes ``difficulty=`` to build the same environment at another level.
    """
    if name in ENVIRONMENTS:
        make_env(name, difficulty)  # fail now, with the core's message, on a bad difficulty or a missing extra
        return partial(make_env, name, difficulty=difficulty)
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"cannot load environment {name!r}: {exc}") from exc
    else:
        found = [ep for ep in entry_points(group=ENV_ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise UserError(f"unknown environment {name!r} (available: {', '.join(available_envs())}); or pass `package.module:Factory`")
        target = found[0].load()
    return partial(target, difficulty=difficulty)
