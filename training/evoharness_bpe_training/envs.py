"""Finding an environment by name for training: the lab's one registry.

Built-in names (``crm-migration``, ``compliance-review``, ``alfworld``, ``textworld``), the
environments installed packages register under the ``evoharness.envs`` entry-point group
(``my-env = "my_pkg.envs:MyEnv"``), or a ``package.module:Factory`` spec; the same lookup as
``evoharness run`` (`evoharness_bpe.lab.registry`).
"""

from __future__ import annotations

from collections.abc import Callable

from evoharness_bpe.lab.envs.base import Env
from evoharness_bpe.lab.registry import BUILTIN_ENVS, ENV_GROUP, available_envs
from evoharness_bpe.lab.registry import env_factory as _registry_factory

__all__ = ["ENV_ENTRY_POINT_GROUP", "available_envs", "env_factory"]

ENV_ENTRY_POINT_GROUP = ENV_GROUP


def env_factory(name: str, *, difficulty: int = 1) -> Callable[..., Env]:
    """A factory for environment `name`: called bare it builds one at `difficulty`.

    The factory also takes ``difficulty=`` to build the same environment at another level. A
    built-in environment is built once now, so a bad difficulty or a missing extra fails here.
    """
    factory = _registry_factory(name, difficulty=difficulty)
    if name in BUILTIN_ENVS:
        factory()
    return factory
