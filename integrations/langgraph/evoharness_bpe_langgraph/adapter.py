"""`WorkspaceAdapter`: the core `Workspace` behind LangGraph state, shared by middleware and node.

The graph state holds the serialised `BPEState` (the ``bpe`` channel). For every hook the
adapter rebuilds a `Workspace` from it (reusing the live one while the state is unchanged),
lets the core act, observe or render, and hands back a channel update. What is not part of the
state — meta-action events with their costs, dashboard snapshots, the ledger — goes to an
in-process `EpisodeLog` per run, which `TraceCallbackHandler` turns into a trace.

With a model consolidator, the adapter hands the run's notes to it (every N notes, and when
the run finishes) and remembers what it handed over in the run's log, since the workspace may
be rebuilt from the state between hooks; a finished run's noted ids are cleared from the
state, so a later run on the same thread does not hand them over again.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from evoharness_bpe import (
    BPEState,
    EpisodeRecorder,
    EpisodeSummary,
    Experience,
    ExperienceStore,
    MemoryExperienceStore,
    Workspace,
    WorkspaceOptions,
)
from evoharness_bpe.exceptions import UserError
from pydantic import ValidationError
from evoharness_bpe.ledger import CostLedger
from evoharness_bpe.stores.base import validate_namespace
from evoharness_bpe.text import inline
from evoharness_bpe.workspace import bounded_state, observed_tool_name
from evoharness_bpe.trace import DashboardSnapshot, MetaActionEvent

from .channel import BPE_KEY, RUN_KEY, Op, delta_update
from . import telemetry as _telemetry  # noqa: F401 - registers the OpenInference span source

__all__ = ["WorkspaceAdapter", "EpisodeLog", "NamespaceSpec", "goal_from_messages"]

NamespaceSpec = Sequence[str] | Callable[[Any], Sequence[str]]
"""A fixed namespace, or a function of the run's `Runtime` (e.g. ``lambda rt: ("users",
rt.context.user_id)``)."""

_MAX_LOGS = 256
_GOAL_CHARS = 300


@dataclass
class EpisodeLog:
    """One run beyond the state: its `EpisodeRecorder` (meta-action events with costs,
    dashboards, the ledger), its summary once finished, and the live workspace."""

    recorder: EpisodeRecorder = field(default_factory=EpisodeRecorder)
    summary: EpisodeSummary | None = None
    finishing: Future[EpisodeSummary] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    live: tuple[dict[str, Any], Workspace] | None = field(default=None, repr=False)
    consolidating: list[str] = field(default_factory=list, repr=False)
    """Noted ids already handed to the model consolidator in this run."""

    @property
    def ledger(self) -> CostLedger:
        return self.recorder.ledger

    @property
    def events(self) -> list[MetaActionEvent]:
        return self.recorder.events

    @property
    def snapshots(self) -> list[DashboardSnapshot]:
        return self.recorder.snapshots


def goal_from_messages(messages: Sequence[Any]) -> str | None:
    """The first user message's text, on one line and shortened, as an episode goal."""
    for message in messages:
        if getattr(message, "type", None) == "human":
            text = inline(message.text, _GOAL_CHARS)
            if text.strip():
                return text
    return None


class WorkspaceAdapter:
    """Builds, acts on and persists a `Workspace` for LangGraph runs (see the module docstring)."""

    def __init__(
        self,
        *,
        goal: str | None = None,
        subgoals: Sequence[str] | None = None,
        store: ExperienceStore | Any | None = None,
        namespace: NamespaceSpec = ("default",),
        dashboard_tokens: int = 600,
        inject: str = "full",
        finish_in_background: bool = False,
        consolidator: Any | None = None,
        **workspace_options: Any,
    ) -> None:
        if consolidator is not None:
            if not callable(getattr(consolidator, "submit", None)):
                raise UserError(f"consolidator must be an evoharness_bpe.ModelConsolidator, not {type(consolidator).__name__}")
            if store is None:
                store = consolidator.store  # the store the teacher's decisions are applied to
            elif store is not consolidator.store and getattr(consolidator.store, "store", None) is not store:
                raise UserError("the consolidator works on another store than this agent's: build it on the same "
                                "store (ModelConsolidator(teacher, store)), or leave store= out to use the consolidator's")
        self.consolidator = consolidator
        if not callable(namespace):
            namespace = validate_namespace(namespace)
        self.goal = goal
        self.subgoals = list(subgoals or [])
        self.namespace = namespace
        # Validated once, here, and shared by every workspace of every run.
        try:
            self.options = WorkspaceOptions(dashboard_tokens=dashboard_tokens, inject=inject, **workspace_options)  # type: ignore[arg-type]
        except TypeError as exc:
            raise UserError(f"unknown workspace option ({exc}); see evoharness_bpe.WorkspaceOptions") from None
        self.finish_in_background = finish_in_background
        self._store = _as_experience_store(store) if store is not None else None
        self._fallback_store: ExperienceStore | None = None
        self._wrapped: dict[int, ExperienceStore] = {}
        self._logs: OrderedDict[str, EpisodeLog] = OrderedDict()
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    # -- resolution --------------------------------------------------------------------------
    def store_for(self, runtime: Any) -> ExperienceStore:
        """The explicit store, else the graph's `BaseStore` (wrapped), else one in memory."""
        if self._store is not None:
            return self._store
        base = getattr(runtime, "store", None)
        with self._lock:
            if base is not None:
                wrapped = self._wrapped.get(id(base))
                if wrapped is None or getattr(wrapped, "store", None) is not base:
                    wrapped = self._wrapped[id(base)] = _as_experience_store(base)
                return wrapped
            if self._fallback_store is None:
                self._fallback_store = MemoryExperienceStore()
            return self._fallback_store

    def namespace_for(self, runtime: Any) -> tuple[str, ...]:
        if callable(self.namespace):
            try:
                return validate_namespace(self.namespace(runtime))
            except UserError:
                raise
            except Exception as exc:
                raise UserError(f"the namespace function failed on this run's context: {exc!r}") from exc
        return self.namespace  # type: ignore[return-value]

    def log(self, run: str | None) -> EpisodeLog:
        """The episode log of run `run` (created on first use; the oldest are dropped)."""
        key = run or "default"
        with self._lock:
            log = self._logs.get(key)
            if log is None:
                log = self._logs[key] = EpisodeLog()
                while len(self._logs) > _MAX_LOGS:
                    self._logs.popitem(last=False)
            return log

    def pop_log(self, run: str | None) -> EpisodeLog | None:
        with self._lock:
            return self._logs.pop(run or "default", None)

    # -- state <-> workspace -----------------------------------------------------------------
    def _new_workspace(self, messages: Sequence[Any], runtime: Any, recorder: EpisodeRecorder | None = None) -> Workspace:
        goal = self.goal or goal_from_messages(messages) or "Answer the user's request"
        return Workspace(
            goal,
            subgoals=self.subgoals,
            namespace=self.namespace_for(runtime),
            store=self.store_for(runtime),
            options=self.options,
            recorder=recorder,
        )

    def new_state(self, messages: Sequence[Any], runtime: Any) -> dict[str, Any]:
        """A fresh serialised `BPEState` for a thread that has none."""
        return self._new_workspace(messages, runtime).state.model_dump(mode="json")

    def start(self, state: dict[str, Any], runtime: Any) -> dict[str, Any]:
        """The update that opens a run: a fresh state if the thread has none, a new run id.

        A state that names another namespace than this run's (from the input, or a thread
        restored under another context) is rewritten to this run's namespace, see `workspace`.
        """
        run = uuid.uuid4().hex
        update: dict[str, Any] = {RUN_KEY: run}
        if not state.get(BPE_KEY):
            log = self.log(run)
            ws = self._new_workspace(state.get("messages", ()), runtime, log.recorder)
            value = update[BPE_KEY] = ws.state.model_dump(mode="json")
            log.live = (value, ws)  # the first model call reuses it instead of rebuilding
        else:
            rebound = self.rebind(state[BPE_KEY], runtime)
            if rebound is not None:
                update[BPE_KEY] = rebound
        return update

    def rebind(self, value: Any, runtime: Any) -> dict[str, Any] | None:
        """`value` moved to this run's namespace and held to the workspace's bounds (ids, text
        sizes, caps: `bounded_state`), or None when it already is both."""
        namespace = self.namespace_for(runtime)
        bounded = bounded_state(_in_namespace(_parse_state(value), namespace), self.options).model_dump(mode="json")
        return None if bounded == value else bounded

    def workspace(self, state: dict[str, Any], runtime: Any) -> tuple[Workspace, EpisodeLog, dict[str, Any]]:
        """The live workspace for `state` (rebuilt only when the state changed), its log, and
        the channel value it was built from. Call with ``log.lock`` held when acting.

        The Experience namespace is always the one this adapter's configuration gives this run
        (the fixed namespace, or ``namespace(runtime)``), never the one stored in the state: a
        ``bpe`` value in the input or a restored thread of another user cannot redirect reads,
        writes or credits. A stored state from another namespace is used without its recalled
        and noted ids, which belong to that namespace.
        """
        log = self.log(state.get(RUN_KEY))
        value = state.get(BPE_KEY) or self.new_state(state.get("messages", ()), runtime)
        namespace = self.namespace_for(runtime)
        live = log.live
        if live is not None and (live[0] is value or live[0] == value) and live[1].namespace == namespace:
            return live[1], log, value
        ws = Workspace.from_state(
            _in_namespace(_parse_state(value), namespace),
            namespace=namespace,
            store=self.store_for(runtime),
            options=self.options,
            recorder=log.recorder,
        )
        log.live = (value, ws)
        return ws, log, value

    def _commit(self, log: EpisodeLog, ws: Workspace, base_step: int, ops: list[Op]) -> dict[str, Any]:
        new = ws.state.model_dump(mode="json")
        log.live = (new, ws)
        return delta_update(base_step, new, ops)

    # -- operations --------------------------------------------------------------------------
    def dashboard(self, state: dict[str, Any], runtime: Any) -> str:
        ws, log, _ = self.workspace(state, runtime)
        with log.lock:
            return ws.dashboard()

    def act(
        self, state: dict[str, Any], runtime: Any, name: str, args: Any, tool_call_id: str | None
    ) -> tuple[bool, str, dict[str, Any] | None]:
        """Apply a meta-action; returns (ok, text for the model, channel update or None)."""
        ws, log, _ = self.workspace(state, runtime)
        with log.lock:
            base = ws.state.step
            experience = ws.state.experience
            recalled, noted = len(experience.recalled), len(experience.noted)
            result = ws.act(name, args, tool_call_id=tool_call_id)
            if not result.ok:
                return False, result.content, None
            if name == "recall":
                ops: list[Op] = [{"op": "recalled", "ids": experience.recalled[recalled:]}]
            elif name == "note":
                ops = [{"op": "noted", "ids": experience.noted[noted:]}]
                self._consolidate(ws, log, state.get(RUN_KEY), final=False)
            else:
                ops = [{"op": "act", "name": name, "args": args, "limits": _limits(ws)}]
            return True, result.content, self._commit(log, ws, base, ops)

    def observe(
        self, state: dict[str, Any], runtime: Any, tool: str, result: Any = None, error: str | None = None
    ) -> dict[str, Any]:
        """Record an ordinary tool's result or error; returns the channel update."""
        ws, log, _ = self.workspace(state, runtime)
        with log.lock:
            base = ws.state.step
            fact = ws.observe(tool, result=result, error=error)
            op: Op = {
                "op": "observe",
                "tool": observed_tool_name(tool),
                "result": None,
                "error": None,
                "limits": _limits(ws),
            }
            op["error" if error is not None else "result"] = fact.value if fact else ""
            return self._commit(log, ws, base, [op])

    def finish(self, state: dict[str, Any], runtime: Any, success: bool) -> dict[str, Any] | None:
        """End the run's episode: credit recalled lessons (now, or in the background).

        Returns the update that clears ``recalled``, so a resumed thread does not credit the
        same lessons twice.
        """
        if not state.get(BPE_KEY):
            return None
        ws, log, _ = self.workspace(state, runtime)
        if log.summary is not None or log.finishing is not None:
            return None
        run = state.get(RUN_KEY)
        if self.finish_in_background:
            log.finishing = self._pool().submit(self._finish_now, ws, log, success, run)
        else:
            self._finish_now(ws, log, success, run)
        experience = ws.state.experience
        clear_noted = self.consolidator is not None and bool(experience.noted)
        if not experience.recalled and not clear_noted:
            return None
        cleared = ws.state.model_copy(deep=True)
        cleared.experience.recalled = []
        if clear_noted:
            cleared.experience.noted = []
        return {BPE_KEY: cleared.model_dump(mode="json")}

    # -- async twins: store I/O (dashboard hints, recall, note, credit) in a worker thread -----
    async def adashboard(self, state: dict[str, Any], runtime: Any) -> str:
        """`dashboard` without blocking the event loop on the store."""
        return await asyncio.to_thread(self.dashboard, state, runtime)

    async def aact(
        self, state: dict[str, Any], runtime: Any, name: str, args: Any, tool_call_id: str | None
    ) -> tuple[bool, str, dict[str, Any] | None]:
        """`act` without blocking the event loop on the store."""
        return await asyncio.to_thread(self.act, state, runtime, name, args, tool_call_id)

    async def afinish(self, state: dict[str, Any], runtime: Any, success: bool) -> dict[str, Any] | None:
        """`finish` without blocking the event loop on the store."""
        return await asyncio.to_thread(self.finish, state, runtime, success)

    def _finish_now(self, ws: Workspace, log: EpisodeLog, success: bool, run: str | None = None) -> EpisodeSummary:
        with log.lock:
            log.summary = ws.finish(success)
            self._consolidate(ws, log, run, final=True)
            return log.summary

    def _consolidate(self, ws: Workspace, log: EpisodeLog, run: str | None, *, final: bool) -> None:
        """Hand the run's new notes to the model consolidator: every N notes, and at the end."""
        if self.consolidator is None:
            return
        fresh = [i for i in ws.state.experience.noted if i not in log.consolidating]
        every = self.consolidator.every_notes
        if fresh and (final or (every is not None and len(fresh) >= every)):
            # keyed by run and notes: a hook that runs twice queues one job
            self.consolidator.submit(ws.namespace, fresh, key=f"{run}:{','.join(fresh)}")
            log.consolidating.extend(fresh)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bpe-finish")
            return self._executor

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every background `finish` is done (re-raising the first error)."""
        with self._lock:
            pending = [log.finishing for log in self._logs.values() if log.finishing is not None]
        done, _ = wait(pending, timeout=timeout)
        for fut in done:
            fut.result()


def _limits(ws: Workspace) -> list[int]:
    """The caps a replay of this workspace's operations keeps (`channel._replay`)."""
    return [ws.options.max_beliefs, ws.options.max_exceptions, ws.options.max_subgoals]


def _parse_state(value: Any) -> BPEState:
    try:
        return BPEState.model_validate(value)
    except ValidationError as exc:
        raise UserError(
            f"the {BPE_KEY!r} channel does not hold a BPEState ({exc.error_count()} problems, first: "
            f"{inline(str(exc.errors(include_url=False, include_input=False)[0]), 200)}); start a new thread "
            f"or pass no {BPE_KEY!r} value in the input"
        ) from None


def _in_namespace(state: BPEState, namespace: tuple[str, ...]) -> BPEState:
    if state.experience.namespace == namespace:
        return state
    moved = state.model_copy()
    moved.experience = Experience(namespace=namespace)
    return moved


def _as_experience_store(store: Any) -> ExperienceStore:
    if isinstance(store, ExperienceStore):
        return store
    from langgraph.store.base import BaseStore

    if isinstance(store, BaseStore):
        from .store import LangGraphExperienceStore

        return LangGraphExperienceStore(store)
    raise UserError(
        f"store must be an evoharness ExperienceStore or a langgraph BaseStore, not {type(store).__name__}"
    )
