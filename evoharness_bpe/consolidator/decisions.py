"""What a teacher may decide about a batch of notes, how that is checked, and how it is applied.

Decisions are refused as a whole when any of them names an id that was not shown to the teacher
(an invented id, or another namespace's), breaks a text limit, or contradicts another decision;
the rule-based consolidation done at `note` time then stands. Application is idempotent, so a
batch re-applied after a crash changes nothing more.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..exceptions import EvoHarnessError
from ..sanitize import sanitize
from ..stores.base import ExperienceEntry, ExperienceStore, Namespace

__all__ = ["Decision", "DecisionBatch", "DecisionError", "parse_decisions", "validate_decisions", "apply_decisions", "MAX_TEXT"]

MAX_TEXT = 2_000
_Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]
_Id = Annotated[str, Field(min_length=1, max_length=64)]


class DecisionError(EvoHarnessError):
    """A teacher's answer that cannot be applied (unparseable, invalid, or naming unknown ids)."""


class Keep(BaseModel):
    """Leave the entry as it is."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["keep"]
    id: _Id


class Merge(BaseModel):
    """The note `id` says the same as entry `into`: fold it in (optionally rewording `into`)."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["merge"]
    id: _Id
    into: _Id
    text: _Text | None = None


class Replace(BaseModel):
    """Entry `id` is out of date; the note `by` replaces it."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["replace"]
    id: _Id
    by: _Id


class Delete(BaseModel):
    """Entry `id` is wrong or useless."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["delete"]
    id: _Id


class Add(BaseModel):
    """A new entry distilled from the notes."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["add"]
    text: _Text
    kind: Literal["lesson", "procedure", "pitfall"] = "lesson"
    tags: list[Annotated[str, Field(min_length=1, max_length=40)]] = Field(default_factory=list, max_length=16)


Decision = Annotated[Keep | Merge | Replace | Delete | Add, Field(discriminator="op")]


class DecisionBatch(BaseModel):
    """A teacher's whole answer."""

    model_config = ConfigDict(extra="forbid")
    decisions: list[Decision] = Field(max_length=200)


_BATCH = TypeAdapter(DecisionBatch)
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$")


def parse_decisions(raw: str) -> DecisionBatch:
    """The teacher's JSON answer (a fenced block is accepted); `DecisionError` otherwise."""
    text = _FENCE_RE.sub("", raw.strip()) if isinstance(raw, str) else ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise DecisionError("the answer holds no JSON object")
    try:
        return _BATCH.validate_json(text[start:end + 1])
    except ValidationError as exc:
        first = exc.errors()[0]
        raise DecisionError(f"invalid decisions: {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def validate_decisions(batch: DecisionBatch, notes: set[str], shown: set[str]) -> DecisionBatch:
    """Check ids against what the teacher was shown and sanitise texts; return the clean batch.

    `notes` are the episode's note ids, `shown` every id in the request (notes and related
    entries of the same namespace).
    """
    touched: set[str] = set()
    clean: list[Any] = []
    for d in batch.decisions:
        ids = [d.id] if not isinstance(d, Add) else []
        if isinstance(d, Merge):
            ids.append(d.into)
            if d.id not in notes:
                raise DecisionError(f"merge: {d.id!r} is not a note of this episode")
            if d.into == d.id:
                raise DecisionError("merge: an entry cannot merge into itself")
        if isinstance(d, Replace):
            ids.append(d.by)
            if d.by not in notes:
                raise DecisionError(f"replace: {d.by!r} is not a note of this episode")
            if d.id == d.by:
                raise DecisionError("replace: an entry cannot replace itself")
        for entry_id in ids:
            if entry_id not in shown:
                raise DecisionError(f"unknown id {entry_id!r}: use only ids from the request")
        removed = {d.id} if isinstance(d, Merge | Replace | Delete) else set()
        if removed & touched or (set(ids) - removed) & _removed(clean):
            raise DecisionError(f"conflicting decisions about {sorted(set(ids))}")
        touched |= removed
        if isinstance(d, Merge) and d.text is not None:
            d = d.model_copy(update={"text": _clean(d.text)})
        elif isinstance(d, Add):
            d = d.model_copy(update={"text": _clean(d.text), "tags": sorted({_clean(t)[:40] for t in d.tags})})
        clean.append(d)
    return DecisionBatch(decisions=clean)


def _removed(decisions: list[Any]) -> set[str]:
    return {d.id for d in decisions if isinstance(d, Merge | Replace | Delete)}


def _clean(text: str) -> str:
    cleaned = sanitize(text).strip()
    if not cleaned:
        raise DecisionError("a text is empty once invisible characters are removed")
    return cleaned[:MAX_TEXT]


def added_id(job_id: str, index: int) -> str:
    """The id an ``add`` decision gets: derived from the job, so re-applying finds it."""
    return hashlib.sha256(f"{job_id}:{index}".encode()).hexdigest()[:16]


def apply_decisions(store: ExperienceStore, namespace: Namespace, batch: DecisionBatch, job_id: str) -> dict[str, int]:
    """Apply a validated batch in one transaction; idempotent. Returns counts by operation."""
    counts = {"keep": 0, "merge": 0, "replace": 0, "delete": 0, "add": 0}
    now = time.time()
    with store.transaction():
        for index, d in enumerate(batch.decisions):
            if isinstance(d, Keep):
                counts["keep"] += 1
            elif isinstance(d, Merge):
                note, target = store.get(namespace, d.id), store.get(namespace, d.into)
                if note is None or target is None:
                    continue  # applied before (the note is gone) or the target was removed meanwhile
                target.evidence += note.evidence
                target.tags = sorted(set(target.tags) | set(note.tags))
                target.wins, target.losses, target.uses = target.wins + note.wins, target.losses + note.losses, target.uses + note.uses
                if d.text:
                    target.text = d.text
                target.updated = now
                store.update(namespace, target)
                store.delete(namespace, note.id)
                counts["merge"] += 1
            elif isinstance(d, Replace):
                old, note = store.get(namespace, d.id), store.get(namespace, d.by)
                if old is None or note is None:
                    continue
                store.delete(namespace, old.id)
                note.supersedes = sorted(set(note.supersedes) | {old.id})
                note.updated = now
                store.update(namespace, note)
                counts["replace"] += 1
            elif isinstance(d, Delete):
                counts["delete"] += int(store.delete(namespace, d.id))
            elif isinstance(d, Add):
                entry_id = added_id(job_id, index)
                if store.get(namespace, entry_id) is None:
                    store.add(namespace, ExperienceEntry(id=entry_id, text=d.text, kind=d.kind, tags=d.tags, created=now, updated=now))
                    counts["add"] += 1
    return counts


def canonical(batch: DecisionBatch) -> str:
    """The batch as compact JSON (what the dataset's completion holds)."""
    return json.dumps(batch.model_dump(mode="json", exclude_none=True), ensure_ascii=False, separators=(",", ":"))
