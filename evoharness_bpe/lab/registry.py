"""One plug-in registry for environments and frameworks, used by ``evoharness run`` and ``train``.

Environments are found under the ``evoharness.envs`` entry-point group, frameworks under
``evoharness.frameworks``; a ``module:attr`` spec works wherever a name does, so
``evoharness run --env my_pkg.envs:MyEnv`` plays an environment no package registered. The
built-in ones are registered as entry points by this distribution and also listed here, so a
source checkout whose installed metadata is older still finds them.

An environment entry point is a callable taking ``difficulty=`` (and its own keyword options)
and returning an `Env`; a framework entry point is a `FrameworkRunner`.

>>> "crm-migration" in available_envs() and "core" in available_frameworks()
True
>>> make_env("crm-migration", 2).difficulty
2
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from ..exceptions import UserError
from .frameworks import FrameworkRunner

if TYPE_CHECKING:
    from .envs.base import Env

__all__ = [
    "ENV_GROUP",
    "FRAMEWORK_GROUP",
    "BUILTIN_ENVS",
    "BUILTIN_FRAMEWORKS",
    "SHIPPED_INTEGRATIONS",
    "available_envs",
    "available_frameworks",
    "env_factory",
    "make_env",
    "load_framework",
]

ENV_GROUP = "evoharness.envs"
FRAMEWORK_GROUP = "evoharness.frameworks"

BUILTIN_ENVS: dict[str, str] = {
    "crm-migration": "evoharness_bpe.lab.envs.crm:CRMMigrationEnv",
    "compliance-review": "evoharness_bpe.lab.envs.compliance:ComplianceReviewEnv",
    "alfworld": "evoharness_bpe.lab.envs.alfworld:ALFWorldEnv",
    "textworld": "evoharness_bpe.lab.envs.textworld:TextWorldEnv",
}
"""The built-in environments (also registered as ``evoharness.envs`` entry points)."""

BUILTIN_FRAMEWORKS: dict[str, str] = {"core": "evoharness_bpe.lab.runner.core:run_episode"}
"""The built-in framework (also registered as an ``evoharness.frameworks`` entry point)."""


def _registered(group: str, builtins: dict[str, str]) -> dict[str, str]:
    found = dict(builtins)
    for ep in entry_points(group=group):
        found.setdefault(ep.name, ep.value)
    return found


def _load(spec: str, what: str) -> Any:
    module, _, attr = spec.partition(":")
    try:
        target: Any = import_module(module)
        for part in attr.split(".") if attr else ():
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"cannot load {what} {spec!r}: {exc}") from exc
    return target


def _resolve(name: str, group: str, builtins: dict[str, str], what: str) -> Any:
    registered = _registered(group, builtins)
    if name in registered:
        return _load(registered[name], what)
    if ":" in name:
        return _load(name, what)
    raise UserError(f"unknown {what} {name!r}; choose one of {', '.join(sorted(registered))}, or pass `package.module:Name`")


def available_envs() -> list[str]:
    """The built-in environments and those installed packages register."""
    return sorted(_registered(ENV_GROUP, BUILTIN_ENVS))


def available_frameworks() -> list[str]:
    """``core`` plus every framework an installed integration registers."""
    return ["core", *sorted(set(_registered(FRAMEWORK_GROUP, BUILTIN_FRAMEWORKS)) - {"core"})]


def env_factory(name: str, *, difficulty: int = 1) -> Callable[..., Env]:
    """A factory for environment `name` (a registered name or ``module:Factory``).

    Called bare it builds one at `difficulty`; ``factory(difficulty=n)`` builds it at level n.
    """
    target = _resolve(name, ENV_GROUP, BUILTIN_ENVS, "environment")
    if not callable(target):
        raise UserError(f"environment {name!r} is not a class or factory function")

    def factory(difficulty: int = difficulty, **kwargs: Any) -> Env:
        try:
            return target(difficulty=difficulty, **kwargs)
        except ValueError as exc:  # a bad difficulty or option: say it as the environment says it
            raise UserError(str(exc)) from exc

    factory.__name__ = f"make_{str(getattr(target, '__name__', 'env'))}"
    return factory


def make_env(name: str, difficulty: int = 1, **kwargs: Any) -> Env:
    """The environment `name` (a registered name or ``module:Factory``) at `difficulty`."""
    return env_factory(name, difficulty=difficulty)(**kwargs)


SHIPPED_INTEGRATIONS = {"langgraph": "evoharness-bpe-langgraph", "llamaindex": "evoharness-bpe-llamaindex"}
"""The framework integrations in this repository (``integrations/NAME``) and their package names."""


def load_framework(name: str) -> FrameworkRunner:
    """The runner of framework `name` (a registered name or ``module:function``)."""
    try:
        target = _resolve(name, FRAMEWORK_GROUP, BUILTIN_FRAMEWORKS, "framework")
    except UserError as exc:
        if ":" in name or "cannot load" in str(exc):
            raise
        if name in SHIPPED_INTEGRATIONS:
            hint = f"install its integration: pip install -e integrations/{name} (the {SHIPPED_INTEGRATIONS[name]} package)"
        else:
            hint = (f"it is no integration of this project (those are {', '.join(SHIPPED_INTEGRATIONS)}): "
                    "choose an available one or pass package.module:function")
        raise UserError(f"framework {name!r} is not installed; available: {', '.join(available_frameworks())}; {hint}") from None
    if not callable(target):
        raise UserError(f"framework {name!r} is not a runner function")
    return target  # type: ignore[no-any-return]
