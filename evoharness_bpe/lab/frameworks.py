"""The contract of a framework runner: `EpisodeConfig` in, `Trace` out.

A framework runner (`FrameworkRunner`) is a function ``run_episode(env, policy, store, config)
-> Trace``. It plays
one episode of `env` (already constructed with its difficulty) with `policy`, using the harness
named in `config`, and returns the episode's `Trace`: messages, each model call's exact prompt
(`Trace.model_calls`), meta-action events, dashboards, the ledger, and the outcome from
`env.outcome()` with ``info["steps"]`` (environment tool calls) and ``info["invalid_actions"]``.

The core loop is built in; integrations register theirs under the ``evoharness.frameworks``
entry-point group (``langgraph = "evoharness_bpe_langgraph.runner:run_episode"``), found by
`evoharness_bpe.lab.registry.load_framework`, so the core never imports a framework. Each runner
builds its prompts, tools, window and counts with `evoharness_bpe.harness`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ..harness import Harness

if TYPE_CHECKING:
    from ..stores.base import ExperienceStore
    from ..trace import Trace
    from .envs.base import Env
    from .policy import Policy

__all__ = ["Harness", "EpisodeConfig", "FrameworkRunner"]


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


class FrameworkRunner(Protocol):
    """Plays one episode of `env` with `policy` under `config` and returns its `Trace`."""

    def __call__(self, env: Env, policy: Policy, store: ExperienceStore | None, config: EpisodeConfig) -> Trace: ...
