"""Which agent framework runs an episode: the core loop, or an installed integration.

A framework runner is a function ``run_episode(env, policy, store, config) -> Trace``. It plays
one episode of `env` (already constructed with its difficulty) with `policy`, using the harness
named in `config`, and returns the episode's `Trace`: messages, each model call's exact prompt
(`Trace.model_calls`), meta-action events, dashboards, the ledger, and the outcome from
`env.outcome()` with ``info["steps"]`` (environment tool calls) and ``info["invalid_actions"]``.

The core loop is built in; integrations register theirs under the ``evoharness.frameworks``
entry-point group (``langgraph = "evoharness_bpe_langgraph.runner:run_episode"``), so the core
never imports a framework.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import UserError

__all__ = ["Harness", "EpisodeConfig", "FrameworkRunner", "available_frameworks", "load_framework"]

Harness = Literal["none", "append", "bpe"]
ENTRY_POINT_GROUP = "evoharness.frameworks"


class EpisodeConfig(BaseModel):
    """How one episode is run, whatever the framework."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    harness: Harness = Field(
        default="bpe",
        description="none: ReAct with the full history; append: every note and observation kept in "
        "the prompt; bpe: dashboard + meta-actions with a recent window only.",
    )
    seed: int = Field(default=0, description="Environment seed.")
    max_steps: int = Field(default=200, ge=1, description="Model calls before the episode is cut.")
    window: int = Field(default=12, ge=2, description="Recent messages kept in the prompt (bpe).")
    namespace: tuple[str, ...] = Field(default=("default",), description="Experience namespace.")
    dashboard_tokens: int = Field(default=600, ge=80, description="Dashboard token budget.")
    system_prompt: str | None = Field(default=None, description="Overrides the built-in system prompt.")
    spec_style: str = Field(default="full", description="How tool specs are written: full (default) or compact.")


FrameworkRunner = Callable[..., object]


def available_frameworks() -> list[str]:
    """``core`` plus every framework an installed integration registers."""
    return ["core", *sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))]


def load_framework(name: str) -> FrameworkRunner:
    """The `run_episode` function of framework `name`."""
    if name == "core":
        from .runner.core import run_episode  # noqa: PLC0415 - provided by the runner package

        return run_episode
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.load()
    raise UserError(
        f"framework {name!r} is not installed; available: {', '.join(available_frameworks())}. "
        f"Install its integration, e.g. `pip install evoharness-bpe-{name}`."
    )
