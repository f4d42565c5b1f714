"""`RunBinding`: a fresh BPE workspace for every run of a LlamaIndex agent.

One agent object serves many runs, one after another or at once (``asyncio.gather``). Each
``agent.run(...)`` opens its own episode when it starts: a run id goes into the run's `Context`
(``ctx.store["bpe_run"]``), Belief/Progress go there as JSON (``ctx.store["bpe_state"]``, so
``ctx.to_dict()`` carries them and a restored context continues them), and the live `Workspace`
with its recording (meta-action events, dashboards, ledger, model calls) stays in this process,
found through the run id. When the run ends — a final answer, or an exception — the episode is
finished (lessons recalled in it are credited with the run's outcome) and its trace goes to the
trace handler.

The Experience namespace of a run is decided by the configuration, for this run: the fixed
``namespace``, or ``namespace(run)`` called once when the run starts with what the run was
started with (`RunInfo`). Nothing that arrives through a context — a restored one, or one
edited by hand — can move a run to another namespace: a context whose BPE state names another
namespace is refused with a `UserError`.

With a model consolidator (``consolidator=``), the run's notes go to its teacher in the
background when the run ends (and every ``every_notes`` notes); the run's answer does not wait
for it. The finished run's noted ids are cleared from the context's state, so a later run that
continues the context does not hand them over again.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from evoharness_bpe import (
    ActionResult,
    BPEState,
    EpisodeSummary,
    ExperienceStore,
    MemoryExperienceStore,
    Outcome,
    Trace,
    Workspace,
)
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.stores.base import Namespace, validate_namespace
from evoharness_bpe.text import inline
from llama_index.core.agent.workflow import AgentOutput, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, TextBlock
from llama_index.core.workflow import Context, StartEvent

from .binding import DEFAULT_STATE_KEY, observe_results
from .recorder import TraceRecorder
from .trace_handler import BPETraceHandler

if TYPE_CHECKING:
    from evoharness_bpe import ModelConsolidator

__all__ = [
    "RunBinding",
    "RunInfo",
    "RunEpisode",
    "NamespaceSpec",
    "SuccessJudge",
    "default_success",
    "goal_from_input",
    "RUN_KEY",
]

RUN_KEY = "bpe_run"
"""Key of the run id in ``ctx.store``."""

_MAX_EPISODES = 256
_GOAL_CHARS = 300


@dataclass(frozen=True)
class RunInfo:
    """What a run was started with; the argument of a namespace function.

    ``run.get("user_id")`` reads a keyword given to ``agent.run(user_msg=..., user_id=...)``:
    per-call input, like LangGraph's ``context=``. Values read from ``ctx.store`` come back with
    a restored context, so do not take a tenant's identity from there unless you trust it.
    """

    ctx: Context
    start_event: StartEvent
    run_id: str

    def get(self, key: str, default: Any = None) -> Any:
        """A keyword the run was started with (``agent.run(..., key=value)``), else `default`."""
        return self.start_event.get(key, default)


NamespaceSpec = Union[Sequence[str], Callable[[RunInfo], Union[Sequence[str], Awaitable[Sequence[str]]]]]
"""A fixed namespace, or a function of the run (sync or async), e.g.
``lambda run: ("users", run.get("user_id"))``."""

SuccessJudge = Callable[[BPEState], bool]
"""Decides from the final Belief/Progress whether a run that ended normally succeeded."""


def default_success(state: BPEState) -> bool:
    """Success unless an exception is open or a subgoal is not done."""
    progress = state.progress
    if progress.exceptions:
        return False
    return all(sub.status == "done" for sub in progress.subgoals.values())


def _text(message: Any) -> str:
    if isinstance(message, str):
        return message
    if isinstance(message, ChatMessage):
        return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))
    return ""


def goal_from_input(start_event: StartEvent) -> str | None:
    """The run's user message (else the last user message of its chat history), on one line."""
    texts = [_text(start_event.get("user_msg", None))]
    history = start_event.get("chat_history", None) or []
    texts += [_text(m) for m in reversed(history) if isinstance(m, ChatMessage) and m.role.value == "user"]
    for text in texts:
        goal = inline(text, _GOAL_CHARS)
        if goal.strip():
            return goal
    return None


@dataclass
class RunEpisode:
    """One run's episode: its workspace, its recording and, once ended, its outcome."""

    run_id: str
    namespace: Namespace
    workspace: Workspace
    recorder: TraceRecorder
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    synced: str | None = field(default=None, repr=False)
    summary: EpisodeSummary | None = None
    trace: Trace | None = None
    error: BaseException | None = None

    @property
    def finished(self) -> bool:
        """Whether the run has ended and the episode was finished."""
        return self.summary is not None


class RunBinding:
    """Opens, serves and finishes one `RunEpisode` per run (see the module docstring).

    Takes the options of `with_bpe`'s per-run form; `consolidator` (a `ModelConsolidator`)
    and `workspace_options` go to each run's `Workspace`.
    """

    def __init__(
        self,
        *,
        store: ExperienceStore | None = None,
        namespace: NamespaceSpec = ("default",),
        goal: str | None = None,
        subgoals: Sequence[str] | None = None,
        dashboard_tokens: int = 600,
        inject: str = "full",
        success: SuccessJudge = default_success,
        trace: BPETraceHandler | None = None,
        state_key: str = DEFAULT_STATE_KEY,
        consolidator: ModelConsolidator | None = None,
        **workspace_options: Any,
    ) -> None:
        if consolidator is not None:
            if not callable(getattr(consolidator, "submit", None)):
                raise UserError(f"consolidator must be an evoharness_bpe.ModelConsolidator, not {type(consolidator).__name__}")
            if store is None:
                store = consolidator.store  # the store the teacher's decisions are applied to
            elif store is not consolidator.store:
                raise UserError("the consolidator works on another store than this agent's: build it on the same "
                                "store (ModelConsolidator(teacher, store)), or leave store= out to use the consolidator's")
        if store is not None and not isinstance(store, ExperienceStore):
            raise UserError(f"store must be an evoharness_bpe ExperienceStore, not {type(store).__name__}")
        if not callable(namespace):
            namespace = validate_namespace(namespace)
        if goal is not None and (not isinstance(goal, str) or not goal.strip()):
            raise UserError("goal must be a non-empty string, or None to take the run's user message")
        if trace is not None and not isinstance(trace, BPETraceHandler):
            raise UserError(f"trace must be a BPETraceHandler, not {type(trace).__name__}")
        if not state_key or not isinstance(state_key, str):
            raise UserError("state_key must be a non-empty string")
        self.store: ExperienceStore = store if store is not None else MemoryExperienceStore()
        self.namespace = namespace
        self.goal = goal
        self.subgoals = list(subgoals or [])
        self.dashboard_tokens = dashboard_tokens
        self.inject = inject
        self.success = success
        self.trace_handler = trace
        self.state_key = state_key
        self.consolidator = consolidator
        self.workspace_options = workspace_options
        self._episodes: OrderedDict[str, RunEpisode] = OrderedDict()
        # Fail when the agent is wrapped, not at its first run, on bad workspace options.
        probe = Workspace(goal or "check", subgoals=self.subgoals, dashboard_tokens=dashboard_tokens, inject=inject, **workspace_options)  # type: ignore[arg-type]
        self.meta_actions: tuple[str, ...] = probe.meta_actions
        """The meta-actions each run's workspace offers (those of the parts switched on)."""

    # -- run boundaries ----------------------------------------------------------------------
    async def start(self, ctx: Context, start_event: StartEvent) -> RunEpisode:
        """Open this run's episode: resolve its namespace, build or continue its workspace."""
        run_id = uuid.uuid4().hex
        namespace = await self._namespace(RunInfo(ctx, start_event, run_id))
        data = await ctx.store.get(self.state_key, default=None)
        options = dict(
            store=self.store, dashboard_tokens=self.dashboard_tokens, inject=self.inject,
            consolidator=self.consolidator, **self.workspace_options,
        )
        if data is None:
            goal = self.goal or goal_from_input(start_event) or "Answer the user's request"
            ws = Workspace(goal, subgoals=self.subgoals, namespace=namespace, **options)  # type: ignore[arg-type]
        else:
            state = self._checked_state(data, namespace)
            ws = Workspace.from_state(state, namespace=namespace, **options)
        episode = RunEpisode(run_id=run_id, namespace=namespace, workspace=ws, recorder=TraceRecorder(ws))
        self._episodes[run_id] = episode
        while len(self._episodes) > _MAX_EPISODES:
            self._episodes.popitem(last=False)
        await ctx.store.set(RUN_KEY, run_id)
        await self._save(ctx, episode)
        return episode

    async def end(self, ctx: Context, error: BaseException | None = None) -> RunEpisode | None:
        """Finish this run's episode (once): credit recalled lessons, hand its trace over.

        A run that raised failed; one that ended with an answer succeeded if `success` says so.
        """
        episode = await self._current(ctx, required=False)
        if episode is None or episode.finished:
            return episode
        async with episode.lock:
            if episode.finished:
                return episode
            ws = episode.workspace
            success = False
            if error is None:
                try:
                    success = bool(self.success(ws.state))
                except Exception as exc:  # a broken judge must not leave the episode open
                    error = exc
            episode.error = error
            episode.summary = await ws.afinish(success)
            # Lessons are credited once, notes consolidated once: a context that continues in a
            # later run starts clean.
            ws.state.experience.recalled = []
            if self.consolidator is not None:
                ws.state.experience.noted = []
            await self._save(ctx, episode)
            info: dict[str, Any] = {"run_id": episode.run_id}
            if error is not None:
                info["error"] = f"{type(error).__name__}: {error}"
            episode.trace = episode.recorder.trace(
                task=ws.state.progress.goal,
                outcome=Outcome(success=success, info=info),
                metadata={"namespace": list(episode.namespace)},
            )
        if self.trace_handler is not None:
            await self.trace_handler.ahandle(episode.trace)
        return episode

    # -- lookups -----------------------------------------------------------------------------
    def episode(self, run_id: str) -> RunEpisode | None:
        """The episode of run `run_id` (live or finished; the oldest are dropped after 256)."""
        return self._episodes.get(run_id)

    async def run_id(self, ctx: Context) -> str | None:
        """The id of the run `ctx` belongs to (``await ctx.store.get("bpe_run")``)."""
        return await ctx.store.get(RUN_KEY, default=None)

    async def _current(self, ctx: Context, *, required: bool = True) -> RunEpisode | None:
        run_id = await ctx.store.get(RUN_KEY, default=None)
        episode = self._episodes.get(run_id) if isinstance(run_id, str) else None
        if episode is None and required:
            raise UserError(
                "this context has no open BPE run: the agent's run did not start through with_bpe "
                "(wrap the AgentWorkflow itself, not only its agents)"
            )
        return episode

    async def _namespace(self, run: RunInfo) -> Namespace:
        if not callable(self.namespace):
            return self.namespace
        try:
            value = self.namespace(run)
            if inspect.isawaitable(value):
                value = await value
            return validate_namespace(value)
        except UserError:
            raise
        except Exception as exc:
            raise UserError(f"the namespace function failed on this run: {exc!r}") from exc

    def _checked_state(self, data: Any, namespace: Namespace) -> BPEState:
        try:
            state = BPEState.model_validate_json(data) if isinstance(data, str) else BPEState.model_validate(data)
        except ValueError as exc:
            raise UserError(f"the context's {self.state_key!r} is not a BPE state: {exc}") from exc
        if tuple(state.experience.namespace) != namespace:
            raise UserError(
                f"the context's BPE state belongs to namespace {tuple(state.experience.namespace)!r}, but this run "
                f"is configured for {namespace!r}; a context cannot move a run to another namespace"
            )
        return state

    # -- state in the context ----------------------------------------------------------------
    async def _save(self, ctx: Context, episode: RunEpisode) -> None:
        data = episode.workspace.state.model_dump_json()
        await ctx.store.set(self.state_key, data)
        episode.synced = data

    async def _load(self, ctx: Context, episode: RunEpisode) -> Workspace:
        # A step or tool of this run may have replaced the JSON; it is re-read, and re-checked.
        data = await ctx.store.get(self.state_key, default=None)
        if data is not None and data != episode.synced:
            state = self._checked_state(data, episode.namespace)
            episode.workspace.restore(state)
            episode.synced = data if isinstance(data, str) else None
        return episode.workspace

    # -- what the agent's hooks call ---------------------------------------------------------
    async def dashboard(self, ctx: Context) -> str:
        """The dashboard for this run's next model call (the store is read off the loop)."""
        episode = await self._current(ctx)
        async with episode.lock:
            ws = await self._load(ctx, episode)
            return await ws.adashboard()

    async def act_indexed(self, ctx: Context, name: str, arguments: Any) -> tuple[ActionResult, int]:
        """Apply a meta-action; returns its result and the index of its event."""
        episode = await self._current(ctx)
        async with episode.lock:
            ws = await self._load(ctx, episode)
            result = await ws.aact(name, arguments)
            if result.ok:
                await self._save(ctx, episode)
            return result, len(ws.events) - 1

    async def observe(self, ctx: Context, results: Iterable[ToolCallResult]) -> None:
        """Feed the agent's own tool results into Belief/Progress and the run's recording."""
        episode = await self._current(ctx)
        results = list(results)
        for result in results:
            episode.recorder.on_event(result)
        async with episode.lock:
            ws = await self._load(ctx, episode)
            if observe_results(ws, results):
                await self._save(ctx, episode)

    async def recorder(self, ctx: Context) -> TraceRecorder | None:
        """This run's recorder (model calls, conversation)."""
        episode = await self._current(ctx, required=False)
        return episode.recorder if episode is not None else None


def record_input(recorder: TraceRecorder | None, messages: Sequence[ChatMessage], agent: str) -> None:
    """Record a step's input (the first one opens the conversation) on `recorder`."""
    if recorder is not None:
        from llama_index.core.agent.workflow import AgentInput

        recorder.on_event(AgentInput(input=list(messages), current_agent_name=agent))


def record_output(recorder: TraceRecorder | None, output: AgentOutput) -> None:
    """Record a step's output (the assistant's reply and its tool calls) on `recorder`."""
    if recorder is not None:
        recorder.on_event(output)

