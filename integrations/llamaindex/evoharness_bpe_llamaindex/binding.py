"""`WorkspaceBinding`: a `Workspace` whose Belief/Progress live in a workflow `Context`.

The context store holds the `BPEState` as JSON under one key, so ``ctx.to_dict()`` carries it
and a run restored from a saved context continues with the same Belief and Progress. The
workspace object keeps what is not state: the experience store, the ledger, the meta-action
events and the dashboard snapshots of this process.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from typing import Any

from evoharness_bpe import META_ACTIONS, ActionResult, Workspace
from evoharness_bpe.exceptions import UserError
from llama_index.core.agent.workflow import ToolCallResult
from llama_index.core.workflow import Context

from .messages import RAW_ARGUMENTS

__all__ = ["WorkspaceBinding", "DEFAULT_STATE_KEY", "UNOBSERVED_TOOLS", "observe_results", "label_event"]

DEFAULT_STATE_KEY = "bpe_state"
UNOBSERVED_TOOLS = frozenset({*META_ACTIONS, "handoff"})
"""Tools whose results are not environment observations (the meta-actions, agent handoffs)."""


class WorkspaceBinding:
    """Keeps a `Workspace` and the `BPEState` JSON in a workflow context in step.

    Before each use the context's state is loaded into the workspace when it differs from what
    this binding last wrote (a restored or foreign context); after each change it is written
    back. One binding serves one run at a time.
    """

    def __init__(self, workspace: Workspace, *, state_key: str = DEFAULT_STATE_KEY) -> None:
        if not isinstance(workspace, Workspace):
            raise UserError(f"expected an evoharness_bpe.Workspace, got {type(workspace).__name__}")
        if not state_key or not isinstance(state_key, str):
            raise UserError("state_key must be a non-empty string")
        self.workspace = workspace
        self.state_key = state_key
        self._synced: str | None = None
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()

    @property
    def meta_actions(self) -> tuple[str, ...]:
        """The meta-actions the workspace offers (those of the parts switched on)."""
        return self.workspace.meta_actions

    def _lock(self) -> asyncio.Lock:
        # Parallel tool calls of one step run as concurrent tasks: load, change and save must not
        # interleave, or an older state could be written last. One lock per event loop.
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock

    async def load(self, ctx: Context | None) -> Workspace:
        """Bring the workspace up to the context's state (and seed a context that has none)."""
        if ctx is None:
            return self.workspace
        data = await ctx.store.get(self.state_key, default=None)
        if data is None:
            await self.save(ctx)
        elif data != self._synced:
            self.workspace.restore(data)
            self._synced = data if isinstance(data, str) else None
        return self.workspace

    async def save(self, ctx: Context | None) -> None:
        """Write the workspace's state into the context."""
        if ctx is None:
            return
        data = self.workspace.state.model_dump_json()
        await ctx.store.set(self.state_key, data)
        self._synced = data

    async def act(self, ctx: Context | None, name: str, kwargs: dict[str, Any]) -> ActionResult:
        """Apply a meta-action with the model's raw arguments; the workspace validates them."""
        return (await self.act_indexed(ctx, name, kwargs))[0]

    async def act_indexed(self, ctx: Context | None, name: str, kwargs: Any) -> tuple[ActionResult, int]:
        """`act`, plus the index of the event it recorded (the store is used off the loop)."""
        async with self._lock():
            ws = await self.load(ctx)
            args: Any = kwargs.get(RAW_ARGUMENTS) if isinstance(kwargs, dict) and set(kwargs) == {RAW_ARGUMENTS} else kwargs
            result = await ws.aact(name, args)
            if result.ok:
                await self.save(ctx)
            return result, len(ws.events) - 1

    async def dashboard(self, ctx: Context | None) -> str:
        """The dashboard for the next model call, rendered from the context's state."""
        async with self._lock():
            ws = await self.load(ctx)
            return await ws.adashboard()

    async def observe(self, ctx: Context | None, results: Iterable[ToolCallResult]) -> None:
        """Feed the agent's own tool results into Belief/Progress; label meta-action events."""
        async with self._lock():
            ws = await self.load(ctx)
            if observe_results(ws, results):
                await self.save(ctx)

    # -- run boundaries: one fixed workspace is not opened or finished per run ---------------
    async def start(self, ctx: Context, start_event: Any) -> None:
        """Nothing to open: the workspace was given. Finish it yourself (`Workspace.afinish`)."""

    async def end(self, ctx: Context, error: BaseException | None = None) -> None:
        """Nothing to finish per run (see `start`)."""

    async def recorder(self, ctx: Context) -> None:
        """No per-run recording: use `TraceRecorder` around the run."""
        return None


def observe_results(ws: Workspace, results: Iterable[ToolCallResult]) -> bool:
    """Observe ordinary tool results into `ws`, label meta-action events; whether state changed."""
    changed = False
    for result in results:
        output = result.tool_output
        if result.tool_name in META_ACTIONS:
            label_event(ws, output.raw_output, result.tool_id)
            continue
        if result.tool_name in UNOBSERVED_TOOLS:
            continue
        if output.is_error:
            ws.observe(result.tool_name, error=output.content or "error")
        else:
            ws.observe(result.tool_name, result=output.content)
        changed = True
    return changed


def label_event(ws: Workspace, raw_output: Any, tool_id: str) -> None:
    """Give the meta-action event a tool result points at (``raw_output["event"]``) its call id.

    The tool cannot see its call id; the result carries the index of the event it appended.
    """
    if not isinstance(raw_output, dict) or not tool_id:
        return
    index = raw_output.get("event")
    if isinstance(index, int):
        ws.recorder.label(index, tool_id, raw_output.get("name"))

