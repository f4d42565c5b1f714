"""`Workspace`: one episode's Belief/Progress/Experience, its meta-actions and its dashboard."""

from __future__ import annotations

import functools
import inspect
import logging
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .actions import (
    PART_OF,
    PARTS,
    MAX_ARGUMENT_CHARS,
    MAX_RECORDED_CHARS,
    CommitArgs,
    NoteArgs,
    RecallArgs,
    ToolSpec,
    TrackArgs,
    parse_arguments,
    bounded_json,
    check_meta_action_cap,
    check_parts,
    meta_actions_of,
    tool_specs,
)
from .dashboard import MIN_DASHBOARD_TOKENS, InjectMode, render
from .exceptions import MetaActionError, UserError
from .experience import ConsolidationPolicy, consolidate_note, credit, recall
from .ledger import ActionCost, CostLedger, LedgerSummary
from .sanitize import identifier, inline, quote
from .recorder import EpisodeRecorder
from .state import (
    MAX_ENTRY_ID_CHARS,
    MAX_EXPERIENCE_IDS,
    MAX_GOAL_CHARS,
    MAX_HISTORY_LIMIT,
    MAX_KEY_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_NOTE_CHARS,
    MAX_SOURCE_CHARS,
    MAX_TITLE_CHARS,
    MAX_VALUE_CHARS,
    BPEState,
    Experience,
    Fact,
    OpenException,
    Progress,
    Subgoal,
    subgoal_id,
)
from .stores.base import ExperienceEntry, ExperienceStore, validate_namespace
from .stores.memory import MemoryExperienceStore
from .text import TokenCounter, approx_tokens
from .trace import DashboardSnapshot, MetaActionEvent, Outcome, Trace
from . import telemetry

if TYPE_CHECKING:  # the model consolidator's module loads only when one is used
    from .consolidator import ModelConsolidator

__all__ = ["Workspace", "WorkspaceOptions", "ActionResult", "EpisodeSummary", "observed_tool_name", "bounded_state"]

F = TypeVar("F", bound=Callable[..., Any])

_log = logging.getLogger(__name__)
_OBSERVED_CHARS = 300
_TOOL_NAME_CHARS = 64
_INJECT_MODES = ("full", "summary", "off")
_STORE_ACTIONS = frozenset({"recall", "note"})


@dataclass(frozen=True)
class WorkspaceOptions:
    """How a workspace renders and counts, validated once; share one across many workspaces.

    >>> WorkspaceOptions(dashboard_tokens=400, inject="summary").inject
    'summary'
    """

    dashboard_tokens: int = 600
    """Token budget of the dashboard."""
    inject: InjectMode = "full"
    """Dashboard mode: ``full``, ``summary`` (no hints) or ``off``."""
    token_counter: TokenCounter = approx_tokens
    """Counts the tokens of a text (dashboard budget, meta-action costs)."""
    consolidation: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    """How notes are merged, replaced and decayed in the experience store."""
    max_beliefs: int = 5_000
    """Facts Belief holds before `track` refuses new keys."""
    max_exceptions: int = 50
    """Open tool errors Belief keeps; the oldest observed ones make room."""
    max_subgoals: int = 200
    """Subgoals Progress holds before `commit` refuses new ones."""
    parts: tuple[str, ...] = PARTS
    """The parts shown and usable (an ablation leaves some out): a part switched off is left out
    of the dashboard and the tools, observations do not fill it, and its meta-actions are
    refused with a message the model can read."""
    max_meta_actions: int | None = None
    """Meta-action calls an episode may make (valid or not); later ones are refused. None: no cap."""

    def __post_init__(self) -> None:
        if not isinstance(self.dashboard_tokens, int) or self.dashboard_tokens < MIN_DASHBOARD_TOKENS:
            raise UserError(f"dashboard_tokens must be at least {MIN_DASHBOARD_TOKENS}")
        if self.inject not in _INJECT_MODES:
            raise UserError(f"inject must be one of {', '.join(_INJECT_MODES)}, not {self.inject!r}")
        if not callable(self.token_counter):
            raise UserError("token_counter must be a function text -> number of tokens")
        if not isinstance(self.consolidation, ConsolidationPolicy):
            raise UserError(f"consolidation must be a ConsolidationPolicy, not {type(self.consolidation).__name__}")
        if not isinstance(self.max_beliefs, int) or self.max_beliefs < 1:
            raise UserError("max_beliefs must be a positive number of facts")
        if not isinstance(self.max_exceptions, int) or self.max_exceptions < 1:
            raise UserError("max_exceptions must be a positive number of exceptions")
        if not isinstance(self.max_subgoals, int) or self.max_subgoals < 1:
            raise UserError("max_subgoals must be a positive number of subgoals")
        object.__setattr__(self, "parts", check_parts(self.parts))
        check_meta_action_cap(self.max_meta_actions)

    @property
    def meta_actions(self) -> tuple[str, ...]:
        """The meta-actions of the parts switched on, in the order track, commit, recall, note."""
        return meta_actions_of(self.parts)


class ActionResult(BaseModel):
    """What a meta-action call returns: whether it applied, what to tell the model, its cost."""

    model_config = ConfigDict(defer_build=True)

    ok: bool
    content: str
    cost: ActionCost = Field(default_factory=ActionCost)


class EpisodeSummary(BaseModel):
    """What `Workspace.finish` did."""

    model_config = ConfigDict(defer_build=True)

    success: bool
    credited: int = Field(description="Recalled entries credited with a win or a loss.")
    ledger: LedgerSummary


class Workspace:
    """One episode of an agent's Belief, Progress and Experience.

    Every text it keeps is bounded: the goal is cut to 2,000 characters, subgoal titles are at
    most 200 (longer ones are refused), the meta-actions' arguments have their own limits, and
    `max_beliefs`, `max_exceptions` and `max_subgoals` bound the counts. A state loaded from
    outside (``state=``, `from_state`, `restore`: a checkpoint, a framework's state channel) is
    held to the same bounds as one made here: subgoal and exception ids are re-derived as
    `commit` and `observe` derive them, texts are cut to the limits above, the oldest observed
    facts and tool errors beyond the caps are dropped, and a state with more tracked facts or
    subgoals than the caps, or with ids that reduce to nothing or collide, is refused with a
    `UserError`.

    >>> ws = Workspace("Migrate 40 customer records", subgoals=["batch 1", "batch 2"])
    >>> ws.act("track", {"key": "api.rate_limit", "value": "5 requests/s"}).ok
    True
    >>> ws.act("commit", '{"subgoal": "batch 1", "status": "done"}').content
    'batch-1: todo → done (1 done, 1 open; next batch-2)'
    >>> ws.act("commit", {"subgoal": "batch 1", "status": "nope"}).ok  # the model reads why
    False
    """

    def __init__(
        self,
        goal: str,
        subgoals: Sequence[str] | None = None,
        store: ExperienceStore | None = None,
        namespace: Sequence[str] = ("default",),
        dashboard_tokens: int | None = None,
        inject: InjectMode | None = None,
        *,
        token_counter: TokenCounter | None = None,
        consolidation: ConsolidationPolicy | None = None,
        max_beliefs: int | None = None,
        max_exceptions: int | None = None,
        max_subgoals: int | None = None,
        parts: Sequence[str] | None = None,
        max_meta_actions: int | None = None,
        options: WorkspaceOptions | None = None,
        consolidator: ModelConsolidator | None = None,
        state: BPEState | dict[str, Any] | str | None = None,
        recorder: EpisodeRecorder | None = None,
    ) -> None:
        if not isinstance(goal, str) or not goal.strip():
            raise UserError("goal must be a non-empty string describing what the episode is for")
        given = {
            "dashboard_tokens": dashboard_tokens,
            "inject": inject,
            "token_counter": token_counter,
            "consolidation": consolidation,
            "max_beliefs": max_beliefs,
            "max_exceptions": max_exceptions,
            "max_subgoals": max_subgoals,
            "parts": tuple(parts) if parts is not None and not isinstance(parts, str) else parts,
            "max_meta_actions": max_meta_actions,
        }
        given = {k: v for k, v in given.items() if v is not None}
        if options is not None and given:
            raise UserError(f"pass either options= or {', '.join(given)}, not both")
        self.options = options if options is not None else WorkspaceOptions(**given)
        self.namespace = validate_namespace(namespace)
        if consolidator is not None and store is None:
            store = consolidator.store  # the store its decisions are applied to
        elif consolidator is not None and consolidator.store is not store:
            raise UserError("the consolidator works on another store than this workspace: build it on the same store "
                            "(ModelConsolidator(teacher, store)), or leave store= out to use the consolidator's")
        self.store: ExperienceStore = store if store is not None else MemoryExperienceStore()
        self.recorder = recorder if recorder is not None else EpisodeRecorder()
        self._hint_cache: tuple[str, int, list[ExperienceEntry]] | None = None
        self._notes_written = 0
        self._finished: EpisodeSummary | None = None
        self.consolidator = consolidator
        self._consolidation_submitted = 0  # notes of this episode already handed to the consolidator
        if state is not None:
            self._state = _loaded(_as_state(state), self.options)
        else:
            titles = list(subgoals or ())
            if len(titles) > self.options.max_subgoals:
                raise UserError(f"{len(titles)} subgoals; a workspace holds at most {self.options.max_subgoals} "
                                "(raise max_subgoals)")
            progress = Progress(goal=_cut(goal.strip(), MAX_GOAL_CHARS))
            for title in titles:
                if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
                    shown = repr(title[:60]) + "…" if isinstance(title, str) else type(title).__name__
                    size = f"{len(title):,} characters" if isinstance(title, str) else "not text"
                    raise UserError(f"a subgoal title is at most {MAX_TITLE_CHARS} characters: {shown} is {size}")
                sid = subgoal_id(title)
                if not sid or sid in progress.subgoals:
                    raise UserError(f"subgoal titles must be distinct and contain letters or digits: {title[:60]!r}")
                progress.subgoals[sid] = Subgoal(id=sid, title=title.strip())
            self._state = BPEState(progress=progress, experience=Experience(namespace=self.namespace))
        self._handlers: dict[str, Callable[[Any], str]] = {
            "track": self._track,
            "commit": self._commit,
            "recall": self._recall,
            "note": self._note,
        }
        telemetry.start(self)  # the run's invoke_agent span, when a tracer provider is set

    # -- options and record ------------------------------------------------------------------
    @property
    def state(self) -> BPEState:
        """Belief, Progress and the episode's Experience view (replace it with `restore`)."""
        return self._state

    @property
    def dashboard_tokens(self) -> int:
        return self.options.dashboard_tokens

    @property
    def inject(self) -> InjectMode:
        return self.options.inject

    @property
    def token_counter(self) -> TokenCounter:
        return self.options.token_counter

    @property
    def consolidation(self) -> ConsolidationPolicy:
        return self.options.consolidation

    @property
    def parts(self) -> tuple[str, ...]:
        """The parts switched on (`WorkspaceOptions.parts`)."""
        return self.options.parts

    @property
    def meta_actions(self) -> tuple[str, ...]:
        """The meta-actions this workspace offers: those of the parts switched on."""
        return self.options.meta_actions

    @property
    def ledger(self) -> CostLedger:
        """The run's cost ledger (kept by `recorder`)."""
        return self.recorder.ledger

    @property
    def events(self) -> list[MetaActionEvent]:
        """The run's meta-action events (kept by `recorder`)."""
        return self.recorder.events

    @property
    def snapshots(self) -> list[DashboardSnapshot]:
        """The run's dashboard snapshots (kept by `recorder`)."""
        return self.recorder.snapshots

    # -- construction from saved state ------------------------------------------------------
    @classmethod
    def from_state(cls, state: BPEState | dict[str, Any] | str, **kwargs: Any) -> Workspace:
        """Build a workspace that continues from a saved `BPEState` (model, dict or JSON).

        `kwargs` are the constructor's (store, options, recorder, ...); the namespace defaults
        to the state's own.

        >>> ws = Workspace("Count to three")
        >>> _ = ws.act("track", {"key": "n", "value": "2"})
        >>> Workspace.from_state(ws.state.model_dump_json()).state.belief.facts["n"].value
        '2'
        """
        state = _as_state(state)
        kwargs.setdefault("namespace", state.experience.namespace)
        return cls(state.progress.goal, state=state, **kwargs)

    def restore(self, state: BPEState | dict[str, Any] | str) -> None:
        """Continue from a saved `BPEState` in place: same store, options and recorder.

        The state is checked as in the constructor (see `Workspace` on loaded state); a refused
        one leaves the workspace as it was.
        """
        self._state = _loaded(_as_state(state), self.options)
        self._hint_cache = None

    # -- tools -------------------------------------------------------------------------------
    @property
    def tools(self) -> list[ToolSpec]:
        """The meta-actions as tool specs (name, description, JSON-schema parameters): all four,
        or those of the parts switched on."""
        return [spec for spec in tool_specs() if spec.name in self.meta_actions]

    def openai_tools(self) -> list[dict[str, Any]]:
        """`tools` in the OpenAI function-calling format."""
        return [spec.openai() for spec in self.tools]

    # -- meta-actions ------------------------------------------------------------------------
    def act(self, name: str, args: Any = None, *, tool_call_id: str | None = None) -> ActionResult:
        """Apply meta-action `name` with `args` (a dict or a JSON string, as models emit them).

        Never raises for bad model input: `ok=False` and a message saying what to fix, with the
        state unchanged. Every call, valid or not, is recorded in the ledger and the events.
        """
        started = time.perf_counter()
        step = self.state.step
        parsed = self._span_detail = None
        try:
            self._check_allowed(name)
            parsed = parse_arguments(name, args)
            content = self._handlers[name](parsed)
            ok = True
            self.state.step += 1
        except MetaActionError as exc:
            ok = False
            content = f"Error: {exc}"
        except Exception as exc:  # a store or a bug must not end the model's run; it is logged
            _log.exception("meta-action %s failed", name if isinstance(name, str) else type(name).__name__)
            ok = False
            content = f"Error: {name if isinstance(name, str) else 'meta-action'} failed ({type(exc).__name__}); try again or continue without it"
        # The trace keeps JSON text, as models emit it; a refused call only its first part.
        raw = bounded_json(args, MAX_ARGUMENT_CHARS if ok else MAX_RECORDED_CHARS)
        cost = ActionCost(
            tokens_in=self.token_counter(raw),
            tokens_out=self.token_counter(content),
            wall_ms=(time.perf_counter() - started) * 1000,
        )
        label = name if isinstance(name, str) and name in self._handlers else "unknown"
        self.recorder.action(
            MetaActionEvent(step=step, name=_event_name(name), arguments=raw, ok=ok, content=content, cost=cost, tool_call_id=tool_call_id),
            label,
        )
        telemetry.meta_action(self, name, parsed, ok, content, raw, cost.wall_ms, tool_call_id, self._span_detail)
        return ActionResult(ok=ok, content=content, cost=cost)

    def _check_allowed(self, name: Any) -> None:
        """Refuse a meta-action of a part switched off, or one past the episode's cap."""
        part = PART_OF.get(name) if isinstance(name, str) else None
        if part is not None and part not in self.parts:
            raise MetaActionError(
                f"{name} is not available: {part.capitalize()} is switched off in this workspace; "
                "nothing was changed, continue with the other tools", action=name,
            )
        cap = self.options.max_meta_actions
        # The run's recorder counts the calls so far, whichever workspace of the run made them.
        if part is not None and cap is not None and len(self.recorder.events) >= cap:
            raise MetaActionError(
                f"the meta-action budget of this episode is spent ({cap} calls); nothing was changed, "
                "continue with the environment's tools", action=name,
            )

    def _track(self, args: TrackArgs) -> str:
        belief = self.state.belief
        if args.value is None:
            old = belief.retract(args.key)
            return f"retracted {args.key} (was {old.value!r})"
        if args.key not in belief.facts and len(belief.facts) >= self.options.max_beliefs and not self._evict_observed(1):
            raise MetaActionError(
                f"Belief is full ({self.options.max_beliefs} facts); retract facts that no longer matter first",
                field="key",
            )
        old = belief.upsert(
            Fact(key=args.key, value=args.value, source=args.source, step=self.state.step, confidence=args.confidence)
        )
        if old is None:
            return f"tracked {args.key} = {args.value!r}"
        return f"updated {args.key}: {old.value!r} → {args.value!r}"

    def _commit(self, args: CommitArgs) -> str:
        progress = self.state.progress
        if len(progress.subgoals) >= self.options.max_subgoals and progress.find(args.subgoal) is None:
            raise MetaActionError(
                f"Progress is full ({self.options.max_subgoals} subgoals); commit to an existing subgoal",
                field="subgoal",
            )
        sub, previous = self.state.progress.commit(args.subgoal, args.status, args.note, self.state.step)
        if previous == args.status:
            return f"{sub.id} is already {args.status}; nothing changed ({self._next_open()})"
        done = self.state.progress.counts()["done"]
        return f"{sub.id}: {previous} → {args.status} ({done} done, {self._next_open()})"

    def _next_open(self) -> str:
        """How many subgoals are open and which comes next, or that none is."""
        open_subgoals = self.state.progress.open_subgoals()
        if not open_subgoals:
            return "nothing open"
        return f"{len(open_subgoals)} open; next {open_subgoals[0].id}"

    def _recall(self, args: RecallArgs) -> str:
        hits = recall(self.store, self.namespace, args.query, k=args.k, policy=self.consolidation)
        self._span_detail = hits
        if not hits:
            return f"no experience matches {quote(args.query, 120)}"
        recalled = self.state.experience.recalled
        for hit in hits:
            if hit.entry.id not in recalled:
                recalled.append(hit.entry.id)
        lines = [
            f"[{identifier(h.entry.id)}] {h.entry.kind}: {quote(h.entry.text, 500)} "
            f"(seen {h.entry.evidence}x, wins {h.entry.wins}, losses {h.entry.losses})"
            for h in hits
        ]
        found = "1 entry" if len(hits) == 1 else f"{len(hits)} entries"
        return f"{found} for {quote(args.query, 120)}:\n" + "\n".join(lines)

    def _note(self, args: NoteArgs) -> str:
        outcome = consolidate_note(
            self.store,
            self.namespace,
            args.text,
            tags=args.tags,
            kind=args.kind,
            supersedes=args.supersedes,
            policy=self.consolidation,
        )
        self._span_detail = outcome
        self._notes_written += 1
        self._submit_notes(final=False)
        noted = self.state.experience.noted
        if outcome.entry.id not in noted:
            noted.append(outcome.entry.id)
        if outcome.action == "merged":
            return f"merged into existing entry {outcome.entry.id} (seen {outcome.entry.evidence}x)"
        if outcome.action == "replaced":
            return f"noted as {outcome.entry.id}, replacing {', '.join(outcome.replaced)}"
        return f"noted as {outcome.entry.id}"

    # -- dashboard ---------------------------------------------------------------------------
    def hints(self) -> list[ExperienceEntry]:
        """At most two experience entries for the active subgoal and the goal; cached (none when
        Experience is switched off)."""
        if "experience" not in self.parts:
            return []
        active = self.state.progress.active()
        goal = self.state.progress.goal
        query = f"{active.title} {goal}" if active else goal
        cached = self._hint_cache
        if cached is not None and cached[0] == query and cached[1] == self._notes_written:
            return cached[2]
        entries = [h.entry for h in recall(self.store, self.namespace, query, k=2, policy=self.consolidation)]
        self._hint_cache = (query, self._notes_written, entries)
        return entries

    def dashboard(self, *, record: bool = True) -> str:
        """The state-injection text for the next model call, within `dashboard_tokens`.

        Each render is counted in the ledger and kept as a snapshot for the trace, unless
        `record` is False. Returns "" when `inject` is "off".
        """
        if self.inject == "off":
            return ""
        started = time.perf_counter()
        text, tokens = render(
            self.state,
            ledger=self.ledger.totals(),
            hints=self.hints() if self.inject == "full" else (),
            budget=self.dashboard_tokens,
            mode=self.inject,
            token_counter=self.token_counter,
            parts=self.parts,
        )
        if record:
            self.recorder.dashboard(DashboardSnapshot(step=self.state.step, text=text, tokens=tokens), (time.perf_counter() - started) * 1000)
            telemetry.dashboard(self, self.state.step, tokens, text)
        return text

    # -- environment adapter ------------------------------------------------------------------
    def observe(self, tool: str, *, result: Any = None, error: BaseException | str | None = None) -> Fact | None:
        """Record an ordinary tool's outcome: its last result in Belief, an error as an exception.

        A later success of the same tool resolves the exception its error opened. Observations
        obey the meta-actions' limits whatever the tool returns: the tool's name is cut to
        64 characters (so a key stays within 200), the value to 300; when Belief holds
        `max_beliefs` facts or `max_exceptions` tool errors are open, the oldest observed
        ones make room (facts the model tracked itself are never dropped; if only those are
        left, the observation is not kept in Belief). `track` on a full Belief also drops the
        oldest observed fact before it refuses. Returns the fact recorded, if any.
        """
        step = self.state.step
        tool = observed_tool_name(tool)
        key = f"tool:{tool}"
        progress = self.state.progress
        if error is not None:
            message = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
            value = inline(message, _OBSERVED_CHARS)
            if "progress" in self.parts:  # a part switched off is not filled
                if key not in progress.exceptions:
                    self._drop_observed_exceptions(self.options.max_exceptions - 1)
                progress.exceptions[key] = OpenException(id=key, message=value, source=tool, step=step)
            fact = self._observe_fact(Fact(key=f"{key}:error", value=value, source=tool, step=step))
        else:
            value = inline(bounded_json(result, 4 * _OBSERVED_CHARS), _OBSERVED_CHARS)
            fact = self._observe_fact(Fact(key=f"{key}:last", value=value, source=tool, step=step))
            if progress.exceptions.pop(key, None) is not None:
                self.state.belief.facts.pop(f"{key}:error", None)
        telemetry.observed(self, tool, result, error)
        self.state.step += 1
        return fact

    def _observe_fact(self, fact: Fact) -> Fact | None:
        if "belief" not in self.parts:
            return None
        facts = self.state.belief.facts
        if fact.key not in facts and len(facts) >= self.options.max_beliefs:
            self._evict_observed(len(facts) - self.options.max_beliefs + 1)
            if len(facts) >= self.options.max_beliefs:
                return None
        self.state.belief.upsert(fact)
        return fact

    def _evict_observed(self, count: int) -> bool:
        """Drop the `count` oldest observed facts (with their exceptions); whether any went."""
        facts = self.state.belief.facts
        observed = sorted((f.step, k) for k, f in facts.items() if k.startswith("tool:") and f.source != "agent")
        for _, k in observed[:count]:
            facts.pop(k)
            if k.endswith(":error"):  # its exception goes with it
                self.state.progress.exceptions.pop(k[: -len(":error")], None)
        return bool(observed[:count])

    def _drop_observed_exceptions(self, keep: int) -> None:
        exceptions = self.state.progress.exceptions
        observed = sorted((e.step, k) for k, e in exceptions.items() if k.startswith("tool:"))
        for _, k in observed[: max(len(observed) - max(keep, 0), 0)]:
            exceptions.pop(k)
            self.state.belief.facts.pop(f"{k}:error", None)

    def wrap(self, fn: F, *, name: str | None = None) -> F:
        """Wrap a tool callable (sync or async) so its results and errors are observed.

        The wrapped callable behaves exactly like `fn`: same result, same exception.
        """
        tool = name or getattr(fn, "__name__", "tool")

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                with telemetry.tool_span(self, tool, args, kwargs):  # execute_tool, when tracing is on
                    try:
                        result = await fn(*args, **kwargs)
                    except Exception as exc:
                        self.observe(tool, error=exc)
                        raise
                    self.observe(tool, result=result)
                return result

            return awrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with telemetry.tool_span(self, tool, args, kwargs):
                try:
                    result = fn(*args, **kwargs)
                except Exception as exc:
                    self.observe(tool, error=exc)
                    raise
                self.observe(tool, result=result)
            return result

        return wrapper  # type: ignore[return-value]

    # -- episode end -------------------------------------------------------------------------
    def _submit_notes(self, *, final: bool) -> None:
        """Hand this episode's new notes to the model consolidator: every N notes, and at finish."""
        if self.consolidator is None:
            return
        noted = self.state.experience.noted
        fresh = noted[self._consolidation_submitted:]
        every = self.consolidator.every_notes
        if fresh and (final or (every is not None and len(fresh) >= every)):
            self.consolidator.submit(self.namespace, list(fresh))
            self._consolidation_submitted = len(noted)

    def finish(self, success: bool) -> EpisodeSummary:
        """End the episode: credit (or debit) the lessons recalled during it. Idempotent."""
        if self._finished is None:
            found = credit(self.store, self.namespace, self.state.experience.recalled, success)
            self._submit_notes(final=True)
            self._finished = EpisodeSummary(success=success, credited=found, ledger=self.ledger.summary())
            telemetry.finished(self, success, found)
        return self._finished

    async def afinish(self, success: bool) -> EpisodeSummary:
        """`finish` in a worker thread, so a store's I/O does not block the event loop."""
        import asyncio  # deferred: asyncio costs import time that sync users never need

        return await asyncio.to_thread(self.finish, success)

    # -- async twins: the store's I/O never runs on the event loop ---------------------------
    async def aact(self, name: str, args: Any = None, *, tool_call_id: str | None = None) -> ActionResult:
        """`act` for callers inside an event loop.

        `recall` and `note` (the meta-actions that read or write the store) run in a worker
        thread; `track` and `commit` touch only the in-memory state and run inline.
        """
        if name in _STORE_ACTIONS:
            import asyncio  # deferred, as in afinish

            return await asyncio.to_thread(self.act, name, args, tool_call_id=tool_call_id)
        return self.act(name, args, tool_call_id=tool_call_id)

    async def adashboard(self, *, record: bool = True) -> str:
        """`dashboard` for callers inside an event loop: the experience hints (a store search)
        are rendered in a worker thread; the summary and off modes never touch the store."""
        if self.inject == "full":
            import asyncio  # deferred, as in afinish

            return await asyncio.to_thread(self.dashboard, record=record)
        return self.dashboard(record=record)

    def trace(
        self,
        *,
        task: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        outcome: Outcome | None = None,
        framework: str = "core",
        harness: str = "bpe",
        env: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Trace:
        """The episode so far as a `Trace` (meta-action events, dashboards, ledger included)."""
        if outcome is None:
            outcome = Outcome(success=self._finished.success if self._finished else None)
        return Trace(
            task=task if task is not None else self.state.progress.goal,
            framework=framework,
            harness=harness,
            env=env,
            messages=list(messages or []),
            tools=list(tools if tools is not None else self.openai_tools()),
            meta_actions=list(self.events),
            dashboards=list(self.snapshots),
            outcome=outcome,
            ledger=self.ledger.summary(),
            metadata=dict(metadata or {}),
        )


def observed_tool_name(tool: Any) -> str:
    """The name an observed tool is recorded under: one sanitised line of at most 64 characters."""
    name = inline(tool[:1_000] if isinstance(tool, str) else str(tool)[:1_000], _TOOL_NAME_CHARS)
    return name or "tool"


def _event_name(name: Any) -> str:
    if isinstance(name, str):
        return name if len(name) <= 64 else inline(name[:256], 64)
    return "None" if name is None else f"<{type(name).__name__}>"


def _as_state(state: BPEState | dict[str, Any] | str) -> BPEState:
    if isinstance(state, BPEState):
        return state
    if isinstance(state, str):
        return BPEState.model_validate_json(state)
    if isinstance(state, dict):
        return BPEState.model_validate(state)
    raise UserError(f"state must be a BPEState, a dict or JSON text, not {type(state).__name__}")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def bounded_state(state: BPEState | dict[str, Any] | str, options: WorkspaceOptions | None = None) -> BPEState:
    """`state` (from outside: a checkpoint, a framework's channel) held to the bounds a workspace
    with `options` keeps: what ``Workspace(state=...)``, `from_state` and `restore` do to it.

    A copy; a state made by the meta-actions under the same options comes back equal. Raises
    `UserError` for what no workspace would hold (see `Workspace`).
    """
    return _loaded(_as_state(state), options or WorkspaceOptions())


def _loaded(state: BPEState, options: WorkspaceOptions) -> BPEState:
    """A copy of `state` (from outside) held to the bounds of a state made by the meta-actions."""
    state = state.model_copy(deep=True)
    progress, belief = state.progress, state.belief
    goal = progress.goal.strip()
    if not goal:
        raise UserError("a loaded state needs a non-empty goal")
    progress.goal = _cut(goal, MAX_GOAL_CHARS)
    if len(progress.subgoals) > options.max_subgoals:
        raise UserError(f"the loaded state has {len(progress.subgoals):,} subgoals; this workspace holds at most "
                        f"{options.max_subgoals} (raise max_subgoals)")
    subgoals: dict[str, Subgoal] = {}
    for sub in progress.subgoals.values():
        sid = subgoal_id(sub.id) or subgoal_id(sub.title)
        if not sid or sid in subgoals:
            raise UserError(f"the loaded state's subgoal ids must be distinct and contain letters or digits: "
                            f"{inline(sub.id[:200], 60)!r}")
        sub.id = sid
        sub.title = _cut(sub.title.strip(), MAX_TITLE_CHARS) or sid
        if sub.note is not None:
            sub.note = _cut(sub.note, MAX_NOTE_CHARS)
        subgoals[sid] = sub
    progress.subgoals = subgoals
    exceptions: dict[str, OpenException] = {}
    for exc in progress.exceptions.values():
        kind, _, name = exc.id.partition(":")
        if kind == "subgoal":
            sub = subgoals.get(subgoal_id(name))
            if sub is None or sub.status not in ("failed", "blocked"):
                continue  # commit keeps an exception only for a failed or blocked subgoal
            exc.id = f"subgoal:{sub.id}"
        elif kind == "tool":
            exc.id = f"tool:{observed_tool_name(name)}"
        else:
            continue  # only commit and observe open exceptions
        exc.message = _cut(exc.message, MAX_MESSAGE_CHARS)
        exc.source = _cut(exc.source, MAX_SOURCE_CHARS)
        exceptions[exc.id] = exc
    progress.exceptions = exceptions
    belief.facts = {f.key: f for f in map(_bounded_fact, belief.facts.values())}
    belief.history_limit = min(belief.history_limit, MAX_HISTORY_LIMIT)
    belief.history = [_bounded_fact(f) for f in belief.history[len(belief.history) - belief.history_limit:]] if belief.history_limit else []
    # the caps, with the rule `observe` uses: the oldest observed facts and tool errors make room
    tool_errors = sorted((e.step, k) for k, e in exceptions.items() if k.startswith("tool:"))
    for _, key in tool_errors[: max(len(tool_errors) - options.max_exceptions, 0)]:
        exceptions.pop(key)
        belief.facts.pop(f"{key}:error", None)
    facts = belief.facts
    if len(facts) > options.max_beliefs:
        observed = sorted((f.step, k) for k, f in facts.items() if k.startswith("tool:") and f.source != "agent")
        for _, key in observed[: len(facts) - options.max_beliefs]:
            facts.pop(key)
            if key.endswith(":error"):
                exceptions.pop(key[: -len(":error")], None)
        if len(facts) > options.max_beliefs:
            raise UserError(f"the loaded state has {len(facts):,} facts besides observations; this workspace holds at "
                            f"most {options.max_beliefs} (raise max_beliefs)")
    experience = state.experience
    for name in ("recalled", "noted"):
        ids = [i for i in dict.fromkeys(getattr(experience, name)) if 0 < len(i) <= MAX_ENTRY_ID_CHARS]
        setattr(experience, name, ids[-MAX_EXPERIENCE_IDS:])
    state.step = max(state.step, 0)
    return state


def _bounded_fact(fact: Fact) -> Fact:
    if len(fact.key) > MAX_KEY_CHARS or len(fact.value) > MAX_VALUE_CHARS or len(fact.source) > MAX_SOURCE_CHARS:
        return fact.model_copy(update={"key": _cut(fact.key, MAX_KEY_CHARS), "value": _cut(fact.value, MAX_VALUE_CHARS),
                                       "source": _cut(fact.source, MAX_SOURCE_CHARS)})
    return fact
