"""One MCP session's episode: a workspace opened by `start_episode`, closed by `finish_episode`.

A session runs one episode at a time. A meta-action with no open episode opens one with the
server's default goal, so clients that never call `start_episode` still get a workspace.
Requests of one session may arrive concurrently; a lock serialises them, and the workspace's
store I/O runs in a worker thread so the event loop never blocks on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evoharness_bpe import ActionResult, Outcome, TraceWriter, Workspace
from evoharness_bpe.actions import PARTS, check_meta_action_cap, check_parts, meta_actions_of
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.stores.base import ExperienceStore, Namespace

__all__ = ["EpisodeSession", "SessionSettings", "StartEpisodeArgs", "FinishEpisodeArgs"]


class StartEpisodeArgs(BaseModel):
    """Arguments of `start_episode`."""

    model_config = ConfigDict(extra="forbid")
    goal: str = Field(min_length=1, max_length=2_000, description="What the task is for, in one sentence.")
    subgoals: list[str] = Field(default_factory=list, max_length=200, description="Steps to track, in order.")


class FinishEpisodeArgs(BaseModel):
    """Arguments of `finish_episode`."""

    model_config = ConfigDict(extra="forbid", strict=True)
    success: bool = Field(description="Whether the task succeeded; credits or debits the lessons recalled.")


@dataclass(frozen=True)
class SessionSettings:
    """What every session of one server shares."""

    store: ExperienceStore
    default_goal: str = "the user's current task"
    dashboard_tokens: int = 600
    traces: TraceWriter | None = None
    parts: tuple[str, ...] = PARTS
    """The workspace parts switched on; a part left out is not offered, not shown, and refused."""
    max_meta_actions: int | None = None
    """Meta-action calls an episode may make; later ones are refused. None: no cap."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "parts", check_parts(self.parts))
        check_meta_action_cap(self.max_meta_actions)

    @property
    def meta_actions(self) -> tuple[str, ...]:
        """The meta-actions the server offers: those of the parts switched on."""
        return meta_actions_of(self.parts)


@dataclass
class EpisodeSession:
    """The workspace of one MCP session, in one tenant's namespace."""

    namespace: Namespace
    settings: SessionSettings
    workspace: Workspace | None = None
    episodes: int = 0
    subscribed: set[str] = field(default_factory=set)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def _open(self, goal: str, subgoals: list[str]) -> Workspace:
        self.workspace = Workspace(
            goal,
            subgoals=subgoals,
            store=self.settings.store,
            namespace=self.namespace,
            dashboard_tokens=self.settings.dashboard_tokens,
            parts=self.settings.parts,
            max_meta_actions=self.settings.max_meta_actions,
        )
        self.episodes += 1
        return self.workspace

    async def start(self, arguments: dict[str, Any]) -> ActionResult:
        """Open an episode; refused (state unchanged) while one is open or on bad arguments."""
        if self.workspace is not None:
            return _error("an episode is open: call finish_episode(success) before starting another")
        try:
            args = StartEpisodeArgs.model_validate(arguments)
        except ValidationError as exc:
            return _error(f"invalid arguments for start_episode: {_first_error(exc)}")
        try:
            ws = self._open(args.goal.strip() or self.settings.default_goal, args.subgoals)
        except Exception as exc:  # noqa: BLE001 - a UserError for duplicate subgoals; the model reads it
            self.workspace = None
            return _error(f"invalid arguments for start_episode: {exc}")
        return ActionResult(ok=True, content=f"episode {self.episodes} started: {ws.state.progress.goal}")

    async def act(self, name: str, arguments: dict[str, Any]) -> ActionResult:
        """Apply a meta-action, opening an episode with the default goal when none is open."""
        ws = self.workspace or self._open(self.settings.default_goal, [])
        return await asyncio.to_thread(ws.act, name, arguments)

    async def finish(self, arguments: dict[str, Any]) -> ActionResult:
        """Close the episode: credit recalled lessons, write its trace."""
        try:
            args = FinishEpisodeArgs.model_validate(arguments)
        except ValidationError as exc:
            return _error(f"invalid arguments for finish_episode: {_first_error(exc)}")
        ws = self.workspace
        if ws is None:
            return _error("no episode is open: call start_episode(goal) first")
        summary = await asyncio.to_thread(ws.finish, args.success)
        if self.settings.traces is not None:
            trace = ws.trace(framework="mcp", outcome=Outcome(success=args.success), metadata={"namespace": list(self.namespace)})
            await asyncio.to_thread(self.settings.traces.write, trace)
        self.workspace = None
        return ActionResult(
            ok=True,
            content=f"episode {self.episodes} finished ({'success' if args.success else 'failure'}); "
            f"{summary.credited} recalled lesson(s) credited",
        )

    async def dashboard(self) -> str:
        """The dashboard of the open episode, or a line saying there is none."""
        if self.workspace is None:
            return "No open episode. Call start_episode(goal, subgoals) to open one."
        return await asyncio.to_thread(self.workspace.dashboard)


def _error(message: str) -> ActionResult:
    return ActionResult(ok=False, content=f"Error: {message}")


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
    return f"field {where!r}: {err.get('msg', 'invalid')}"


