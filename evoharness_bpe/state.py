"""The episode state a model manages: Belief, Progress and its view of Experience.

All three are pydantic models with a full JSON round trip (`BPEState.model_dump_json()` /
`BPEState.model_validate_json()`), so frameworks can keep them in a checkpoint. Mutating
methods validate everything first and change the state only when the whole change is legal:
a `MetaActionError` always leaves the state exactly as it was.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .exceptions import MetaActionError

__all__ = [
    "SubgoalStatus",
    "SUBGOAL_STATUSES",
    "Fact",
    "Belief",
    "Subgoal",
    "OpenException",
    "Progress",
    "Experience",
    "BPEState",
    "subgoal_id",
    "MAX_GOAL_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_NOTE_CHARS",
    "MAX_KEY_CHARS",
    "MAX_VALUE_CHARS",
    "MAX_SOURCE_CHARS",
    "MAX_MESSAGE_CHARS",
    "MAX_ENTRY_ID_CHARS",
    "MAX_EXPERIENCE_IDS",
    "MAX_HISTORY_LIMIT",
]

SubgoalStatus = Literal["todo", "doing", "done", "failed", "blocked"]
SUBGOAL_STATUSES: tuple[str, ...] = ("todo", "doing", "done", "failed", "blocked")
_CLOSED = frozenset({"done", "failed"})
_EXCEPTION_STATUSES = frozenset({"failed", "blocked"})
_SLUG_RE = re.compile(r"[^a-z0-9]+")

# What a workspace keeps of each text: the meta-actions' limits (`actions.py`), and the same
# bounds for state loaded from outside (`Workspace(state=...)`, `from_state`, `restore`).
MAX_GOAL_CHARS = 2_000
"""A goal is kept to its first 2,000 characters."""
MAX_TITLE_CHARS = 200
"""A subgoal title (``commit.subgoal``)."""
MAX_NOTE_CHARS = 1_000
"""A subgoal's note (``commit.note``)."""
MAX_KEY_CHARS = 200
"""A fact's key (``track.key``)."""
MAX_VALUE_CHARS = 4_000
"""A fact's value (``track.value``)."""
MAX_SOURCE_CHARS = 200
"""A fact's or an exception's source (``track.source``)."""
MAX_MESSAGE_CHARS = MAX_TITLE_CHARS + MAX_NOTE_CHARS + 20
"""An open exception's message (a commit's ``title status: note``)."""
MAX_ENTRY_ID_CHARS = 64
"""An experience entry id (``note.supersedes``)."""
MAX_EXPERIENCE_IDS = 1_000
"""Recalled or noted entry ids a loaded state keeps (the newest)."""
MAX_HISTORY_LIMIT = 1_000
"""The largest `Belief.history_limit` a loaded state keeps."""


def subgoal_id(text: str) -> str:
    """The id a subgoal title maps to: lower-case words joined by dashes, at most 64 chars."""
    return _SLUG_RE.sub("-", text.lower()).strip("-")[:64].rstrip("-")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Fact(_Model):
    """One belief about the environment."""

    key: str = Field(description="What the fact is about, e.g. 'api.rate_limit'.")
    value: str = Field(description="What is believed now.")
    source: str = Field(default="agent", description="Where the fact came from (a tool, the agent).")
    step: int = Field(default=0, description="The episode step at which it was last set.")
    confidence: float = Field(default=1.0, ge=0.0, le=1.0, description="How sure the source is.")


class Belief(_Model):
    """Keyed facts about the environment now; replaced values move to a bounded history."""

    facts: dict[str, Fact] = Field(default_factory=dict, description="Current facts by key.")
    history: list[Fact] = Field(
        default_factory=list, description="Replaced or retracted facts, oldest first (bounded)."
    )
    history_limit: int = Field(default=200, ge=0, description="How many old facts to keep.")

    def upsert(self, fact: Fact) -> Fact | None:
        """Set `fact`, moving the value it replaces into history; return the replaced fact."""
        old = self.facts.get(fact.key)
        if old is not None:
            self._remember(old)
        self.facts[fact.key] = fact
        return old

    def retract(self, key: str) -> Fact:
        """Remove the fact under `key` (kept in history); unknown keys are a `MetaActionError`."""
        old = self.facts.get(key)
        if old is None:
            known = ", ".join(sorted(self.facts)[:20]) or "none"
            raise MetaActionError(
                f"no belief with key {key!r} to retract; current keys: {known}", field="key"
            )
        del self.facts[key]
        self._remember(old)
        return old

    def _remember(self, fact: Fact) -> None:
        self.history.append(fact)
        overflow = len(self.history) - self.history_limit
        if overflow > 0:
            del self.history[:overflow]


class Subgoal(_Model):
    """One step towards the goal."""

    id: str = Field(description="Stable id (the title's slug unless given).")
    title: str = Field(description="What the subgoal is.")
    status: SubgoalStatus = Field(default="todo", description="todo, doing, done, failed or blocked.")
    note: str | None = Field(default=None, description="Why it has its status (reason, result).")
    step: int = Field(default=0, description="The episode step of the last status change.")


class OpenException(_Model):
    """A problem that is not resolved yet: a failed or blocked subgoal, or a tool error."""

    id: str = Field(description="Stable id: 'subgoal:<id>' or 'tool:<name>'.")
    message: str = Field(description="What went wrong.")
    source: str = Field(description="'commit' or the tool that failed.")
    step: int = Field(default=0, description="The step at which it was opened.")


class Progress(_Model):
    """The goal, its subgoals with status, and the open exceptions."""

    goal: str = Field(description="What the episode is for.")
    subgoals: dict[str, Subgoal] = Field(default_factory=dict, description="Subgoals by id, in order.")
    exceptions: dict[str, OpenException] = Field(
        default_factory=dict, description="Open exceptions by id."
    )

    def find(self, ref: str) -> Subgoal | None:
        """The subgoal whose id, or whose title's slug, is `ref`."""
        found = self.subgoals.get(ref)
        if found is None:
            found = self.subgoals.get(subgoal_id(ref))
        return found

    def counts(self) -> dict[str, int]:
        """How many subgoals have each status."""
        counts = dict.fromkeys(SUBGOAL_STATUSES, 0)
        for sub in self.subgoals.values():
            counts[sub.status] += 1
        return counts

    def open_subgoals(self) -> list[Subgoal]:
        """Subgoals still to work on: those in progress first, then the rest in plan order."""
        doing = [s for s in self.subgoals.values() if s.status == "doing"]
        todo = [s for s in self.subgoals.values() if s.status == "todo"]
        return doing + todo

    def active(self) -> Subgoal | None:
        """The subgoal being worked on, or the next one to start."""
        for sub in self.subgoals.values():
            if sub.status == "doing":
                return sub
        for sub in self.subgoals.values():
            if sub.status == "todo":
                return sub
        return None

    def commit(self, ref: str, status: str, note: str | None, step: int) -> tuple[Subgoal, str]:
        """Create the subgoal `ref` or move it to `status`; return it and the previous status.

        Reopening a done or failed subgoal needs a `note` giving the reason. Moving to failed or
        blocked opens an exception; moving anywhere else resolves it. The previous status is
        ``"new"`` for a created subgoal.
        """
        if status not in SUBGOAL_STATUSES:
            raise MetaActionError(
                f"unknown status {status!r}; expected one of {', '.join(SUBGOAL_STATUSES)}",
                field="status",
            )
        existing = self.find(ref)
        if existing is None:
            sid = subgoal_id(ref)
            if not sid:
                raise MetaActionError(
                    "subgoal must contain letters or digits (it becomes the subgoal's id)",
                    field="subgoal",
                )
            sub = Subgoal(id=sid, title=ref.strip(), status=status, note=note, step=step)  # type: ignore[arg-type]
            previous = "new"
            self.subgoals[sid] = sub
        else:
            previous = existing.status
            if previous in _CLOSED and status not in _CLOSED and status != previous and not note:
                raise MetaActionError(
                    f"subgoal {existing.id!r} is {previous}; reopening it as {status} needs a note "
                    "giving the reason",
                    field="note",
                )
            sub = existing
            sub.status = status  # type: ignore[assignment]
            if note is not None:
                sub.note = note
            sub.step = step
        exc_id = f"subgoal:{sub.id}"
        if status in _EXCEPTION_STATUSES:
            message = f"{sub.title} {status}" + (f": {note}" if note else "")
            self.exceptions[exc_id] = OpenException(
                id=exc_id, message=message, source="commit", step=step
            )
        else:
            self.exceptions.pop(exc_id, None)
        return sub, previous


class Experience(_Model):
    """The episode's view of the experience store: where it lives and what was used."""

    namespace: tuple[str, ...] = Field(default=("default",), description="Store namespace.")
    recalled: list[str] = Field(
        default_factory=list, description="Ids of entries recalled this episode (credited at finish)."
    )
    noted: list[str] = Field(default_factory=list, description="Ids of entries written this episode.")


class BPEState(_Model):
    """Everything the model manages in one episode; serialisable as JSON."""

    belief: Belief = Field(default_factory=Belief)
    progress: Progress
    experience: Experience = Field(default_factory=Experience)
    step: int = Field(default=0, description="Meta-actions applied and tool results observed so far.")
