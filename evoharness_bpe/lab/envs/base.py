"""The `Env` contract: a seeded, deterministic, tool-driven task."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Env", "StepResult", "EnvOutcome"]


class StepResult(BaseModel):
    """What one tool call did in the environment."""

    model_config = ConfigDict(defer_build=True)

    observation: str = Field(description="What the agent reads back, also for malformed calls.")
    done: bool = Field(default=False, description="Whether the episode is over.")
    info: dict[str, Any] = Field(default_factory=dict, description="invalid: bool, error: str, …")


class EnvOutcome(BaseModel):
    """How well the episode went."""

    model_config = ConfigDict(defer_build=True)

    success: bool
    score: float = Field(ge=0.0, le=1.0, description="Partial credit in [0, 1].")
    info: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """A long-horizon task driven through tool calls.

    `reset(seed)` starts an episode and returns the task text and the first observation;
    `tools()` lists the environment's tools as OpenAI function specs; `step(tool_call)` applies
    one call ``{"name": str, "arguments": dict | JSON string}`` and never raises for a malformed
    call (it answers with an observation the model can read, ``info["invalid"] = True``);
    `outcome()` scores the episode so far. The same seed and difficulty give the same episode.

    An environment may also take ``tools(style="compact")``: shorter descriptions with the same
    argument shapes, and from then on shorter observations, for small models. Traces record the
    style (``Trace.metadata["spec_style"]``) so training and inference match.
    """

    name: str
    difficulty: int

    def reset(self, seed: int) -> tuple[str, str]: ...

    def tools(self) -> list[dict[str, Any]]: ...

    def step(self, tool_call: dict[str, Any]) -> StepResult: ...

    def outcome(self) -> EnvOutcome: ...
