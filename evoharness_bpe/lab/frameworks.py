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

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..actions import PARTS, Part, check_parts
from ..exceptions import UserError
from ..harness import PART_HARNESSES, Harness, StepBudget

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
        "the prompt; panels: the dashboard kept up to date from the environment's results, no "
        "meta-actions; bpe: dashboard + meta-actions with a recent window only.",
    )
    seed: int = Field(default=0, description="Environment seed.")
    max_steps: int = Field(default=200, ge=1, description="Model calls before the episode is cut.")
    window: int = Field(default=12, ge=2, description="Recent messages kept in the prompt (bpe).")
    namespace: tuple[str, ...] = Field(default=("default",), description="Experience namespace.")
    dashboard_tokens: int = Field(default=600, ge=80, description="Dashboard token budget.")
    system_prompt: str | None = Field(default=None, description="Overrides the built-in system prompt.")
    spec_style: str = Field(default="full", description="How tool specs are written: full (default) or compact.")
    parts: tuple[Part, ...] = Field(
        default=PARTS,
        description="Workspace parts switched on (panels and bpe): a part left out is missing from the prompt, the "
        "dashboard and the tools, and its meta-actions are refused (an ablation).",
    )
    charge_meta_actions: bool = Field(
        default=True,
        description="A model call spends one of max_steps whatever it calls (meta-actions included). False: a call of "
        "meta-actions only is free, up to max_steps + (max_meta_actions or max_steps) calls in all.",
    )
    max_meta_actions: int | None = Field(
        default=None, ge=0, description="Meta-action calls an episode may make; later ones are refused. None: no cap."
    )
    max_invalid_run: int | None = Field(
        default=None, ge=1, description="Core runner: end the episode after this many invalid actions in a row (a "
        "policy that has lost the format rarely finds it again). None: only max_steps and three silent replies end it.",
    )
    observations_in_belief: bool = Field(
        default=True,
        description="bpe and panels: copy each environment result into Belief (fact tool:NAME:last, cut to 300 "
        "characters) although it also stays whole in the recent window. False: a result is in the window only, "
        "which saves its Belief copy in every later prompt; an error still opens an exception. Only the core "
        "runner offers False.",
    )

    @field_validator("parts", mode="before")
    @classmethod
    def _known_parts(cls, value: object) -> tuple[str, ...]:
        return check_parts(value)  # type: ignore[arg-type]

    @model_validator(mode="after")
    def _parts_fit_harness(self) -> EpisodeConfig:
        if self.parts != PARTS and self.harness not in PART_HARNESSES:
            raise UserError(f"part switches apply to the {' and '.join(PART_HARNESSES)} harnesses, not {self.harness!r}")
        return self

    def budget(self) -> StepBudget:
        """A fresh `StepBudget` for one episode under these options."""
        return StepBudget(self.max_steps, charge=self.charge_meta_actions, max_meta_actions=self.max_meta_actions)

    def harness_metadata(self) -> dict[str, object]:
        """The harness options a trace records beside the harness name."""
        return {"parts": list(self.parts), "charge_meta_actions": self.charge_meta_actions,
                "max_meta_actions": self.max_meta_actions, "observations_in_belief": self.observations_in_belief}


class FrameworkRunner(Protocol):
    """Plays one episode of `env` with `policy` under `config` and returns its `Trace`."""

    def __call__(self, env: Env, policy: Policy, store: ExperienceStore | None, config: EpisodeConfig) -> Trace: ...
