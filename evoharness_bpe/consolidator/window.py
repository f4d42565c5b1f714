"""Consolidation in windows: the bank stays frozen while a window of episodes runs, then one
pass turns the window's evidence into validated edits.

The evidence of a window is what its episodes produced on a `evoharness_bpe.stores.frozen.FrozenView`:
their notes (`WindowNote`) and the credit of the entries they recalled. A pass
(`consolidate_window`) books the credit first, then a consolidator proposes edits — ``add``,
``update``, ``merge``, ``delete`` — and `EditApplier` checks each one against the store as it
stands before applying it:

* an edit that names an id the namespace does not hold is refused (``unknown``);
* an ``add`` to a kind that already holds `BankLimits.max_per_kind` entries is refused (``capacity``);
* a ``delete`` of an entry recalled `BankLimits.delete_veto` times or more is refused (``vetoed``).

The checks live in the applier, not in the consolidators, so they hold for both and for every
store. `RuleConsolidator` proposes edits with the rules `consolidate_note` applies at note time;
`ModelWindowConsolidator` asks a teacher model (the request and the decisions of
`ModelConsolidator`) and falls back to the rules for a batch whose answer is missing or invalid.
`WindowCounts` counts the edits by kind, so a run can show consolidation moving from adding
entries to updating them as the bank fills.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from ..exceptions import UserError
from ..experience import ConsolidationPolicy, is_decayed, similar_entries
from ..stores.base import ExperienceEntry, ExperienceKind, ExperienceStore, Namespace, new_entry_id
from ..stores.frozen import Credit
from .decisions import Add, Delete, DecisionError, Keep, Merge, Replace, parse_decisions, validate_decisions
from .request import SYSTEM_PROMPT, TeacherCaller, TeacherError, _view
from .teachers import as_teacher

__all__ = [
    "BankLimits", "WindowNote", "AddEdit", "UpdateEdit", "MergeEdit", "DeleteEdit", "Edit", "EDIT_KINDS", "REFUSALS",
    "WindowCounts", "EditApplier", "WindowConsolidator", "RuleConsolidator", "ModelWindowConsolidator",
    "book_credit", "consolidate_window",
]

EDIT_KINDS = ("add", "update", "merge", "delete")
"""The edits a consolidation pass makes, in the order reports show them."""
REFUSALS = ("unknown", "capacity", "vetoed")
"""Why an edit was refused: an id the namespace does not hold, a full kind, a delete veto."""


@dataclass(frozen=True)
class BankLimits:
    """The bounds every consolidation pass keeps (the reference's ``max_per_category`` and
    ``delete_veto_usage``, with its defaults)."""

    max_per_kind: int | None = 80
    """Entries a kind (lesson, procedure, pitfall) may hold; an ``add`` beyond it is refused. None: no cap."""
    delete_veto: int | None = 3
    """An entry recalled this many times or more (its ``uses``) cannot be deleted. None: no veto."""

    def __post_init__(self) -> None:
        for name in ("max_per_kind", "delete_veto"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise UserError(f"{name} must be a whole number of at least 1, or None, not {value!r}")


@dataclass(frozen=True)
class WindowNote:
    """A note an episode of the window wrote (the arguments of its accepted ``note`` call)."""

    text: str
    kind: ExperienceKind = "lesson"
    tags: tuple[str, ...] = ()
    supersedes: str | None = None

    @classmethod
    def from_arguments(cls, args: dict[str, Any]) -> WindowNote:
        """A note from ``note`` arguments as a trace holds them (unknown kinds read as lessons)."""
        kind = args.get("kind") if args.get("kind") in ("lesson", "procedure", "pitfall") else "lesson"
        tags = args.get("tags") if isinstance(args.get("tags"), list) else []
        supersedes = args.get("supersedes") if isinstance(args.get("supersedes"), str) else None
        return cls(text=str(args["text"]).strip(), kind=kind, tags=tuple(sorted({str(t) for t in tags})),
                   supersedes=supersedes)


@dataclass(frozen=True)
class AddEdit:
    """A new entry."""

    text: str
    kind: ExperienceKind = "lesson"
    tags: tuple[str, ...] = ()
    op: Literal["add"] = "add"


@dataclass(frozen=True)
class UpdateEdit:
    """An existing entry strengthened (more evidence, more tags) or, with `text`, reworded.

    `replaces` marks a correction (the note contradicts the entry): the text is replaced and the
    wins and losses, which measured the old claim, start again; the id and the uses stay.
    """

    id: str
    text: str | None = None
    tags: tuple[str, ...] = ()
    evidence: int = 0
    replaces: bool = False
    op: Literal["update"] = "update"


@dataclass(frozen=True)
class MergeEdit:
    """Entries `ids` say what `into` says: fold them into it (counts and tags summed) and drop them."""

    into: str
    ids: tuple[str, ...]
    op: Literal["merge"] = "merge"


@dataclass(frozen=True)
class DeleteEdit:
    """An entry removed."""

    id: str
    op: Literal["delete"] = "delete"


Edit = AddEdit | UpdateEdit | MergeEdit | DeleteEdit


@dataclass
class WindowCounts:
    """What one consolidation pass did: edits applied by kind, edits refused by reason."""

    window: int = 0
    episodes: int = 0
    notes: int = 0
    credited: int = 0
    add: int = 0
    update: int = 0
    merge: int = 0
    delete: int = 0
    unknown: int = 0
    capacity: int = 0
    vetoed: int = 0
    fallback: str | None = None
    """Why a batch of a model consolidator's pass was left to the rules (None: it was not)."""
    size: int = 0
    """Entries the namespace holds after the pass."""

    def as_dict(self) -> dict[str, Any]:
        """The counts as a JSON-ready dict."""
        return asdict(self)


class EditApplier:
    """Validates and applies edits to one namespace of a store; counts what it did in `counts`.

    Build it inside ``store.transaction()``: it counts the entries of each kind once, then keeps
    that count up to date as it applies edits.
    """

    def __init__(self, store: ExperienceStore, namespace: Namespace, limits: BankLimits, counts: WindowCounts) -> None:
        self.store, self.namespace, self.limits, self.counts = store, namespace, limits, counts
        total = store.count(namespace)
        self.kinds: Counter[str] = Counter(e.kind for e in store.list(namespace, limit=max(1, total)))

    def apply(self, edit: Edit) -> str:
        """Apply `edit` if it passes the checks; return its kind, or why it was refused."""
        outcome = self._apply(edit, time.time())
        setattr(self.counts, outcome, getattr(self.counts, outcome) + 1)
        return outcome

    def _apply(self, edit: Edit, now: float) -> str:
        store, ns = self.store, self.namespace
        if isinstance(edit, AddEdit):
            if self.limits.max_per_kind is not None and self.kinds[edit.kind] >= self.limits.max_per_kind:
                return "capacity"
            store.add(ns, ExperienceEntry(id=new_entry_id(), text=edit.text, kind=edit.kind, tags=sorted(set(edit.tags)),
                                          created=now, updated=now))
            self.kinds[edit.kind] += 1
            return "add"
        if isinstance(edit, UpdateEdit):
            entry = store.get(ns, edit.id)
            if entry is None:
                return "unknown"
            entry.tags = sorted(set(entry.tags) | set(edit.tags))
            if edit.replaces:
                entry.text = edit.text or entry.text
                entry.evidence, entry.wins, entry.losses = 1, 0, 0
            else:
                entry.text = edit.text or entry.text
                entry.evidence += max(0, edit.evidence)
            entry.updated = now
            store.update(ns, entry)
            return "update"
        if isinstance(edit, MergeEdit):
            target = store.get(ns, edit.into)
            others = [store.get(ns, i) for i in dict.fromkeys(edit.ids) if i != edit.into]
            if target is None or not others or any(o is None for o in others):
                return "unknown"
            for other in others:
                assert other is not None
                target.evidence += other.evidence
                target.uses, target.wins, target.losses = (target.uses + other.uses, target.wins + other.wins,
                                                           target.losses + other.losses)
                target.tags = sorted(set(target.tags) | set(other.tags))
                target.supersedes = sorted(set(target.supersedes) | {other.id})
            target.updated = now
            store.update(ns, target)
            for other in others:
                assert other is not None
                store.delete(ns, other.id)
                self.kinds[other.kind] -= 1
            return "merge"
        entry = store.get(ns, edit.id)
        if entry is None:
            return "unknown"
        if self.limits.delete_veto is not None and entry.uses >= self.limits.delete_veto:
            return "vetoed"
        store.delete(ns, edit.id)
        self.kinds[entry.kind] -= 1
        return "delete"


class WindowConsolidator(Protocol):
    """Turns a window's notes into edits, applied through an `EditApplier` (which counts them)."""

    name: str

    def consolidate(self, store: ExperienceStore, namespace: Namespace, notes: Sequence[WindowNote],
                    limits: BankLimits, counts: WindowCounts) -> None: ...


@dataclass
class RuleConsolidator:
    """The rules of `consolidate_note`, as edits: a note that repeats an entry updates it (and
    merges the other entries it repeats into it), a note that contradicts an entry (or names it
    in ``supersedes``) rewrites it, any other note is added. Entries that kept failing
    (`is_decayed`) are then deleted, unless the veto keeps them."""

    policy: ConsolidationPolicy = field(default_factory=ConsolidationPolicy)
    name: str = "rules"

    def propose(self, store: ExperienceStore, namespace: Namespace, note: WindowNote) -> list[Edit]:
        """The edits `note` asks for, against the store as it stands now."""
        replaced = [note.supersedes] if note.supersedes else []
        agreeing: list[str] = []
        for entry, contradicted in similar_entries(store, namespace, note.text, policy=self.policy):
            if entry.id in replaced:
                continue
            if contradicted:
                if not agreeing:  # as at note time: a match before any contradiction decides
                    replaced.append(entry.id)
            elif not replaced:
                agreeing.append(entry.id)
        if agreeing:
            edits: list[Edit] = [UpdateEdit(agreeing[0], tags=note.tags, evidence=1)]
            if len(agreeing) > 1:
                edits.append(MergeEdit(agreeing[0], tuple(agreeing[1:])))
            return edits
        if replaced:
            return [UpdateEdit(replaced[0], text=note.text, tags=note.tags, replaces=True),
                    *(DeleteEdit(old) for old in replaced[1:])]
        return [AddEdit(note.text, note.kind, note.tags)]

    def consolidate(self, store: ExperienceStore, namespace: Namespace, notes: Sequence[WindowNote],
                    limits: BankLimits, counts: WindowCounts) -> None:
        with store.transaction():
            applier = EditApplier(store, namespace, limits, counts)
            for note in notes:
                for edit in self.propose(store, namespace, note):
                    applier.apply(edit)
            total = store.count(namespace)
            for entry in store.list(namespace, limit=max(1, total)):
                if is_decayed(entry, self.policy):
                    applier.apply(DeleteEdit(entry.id))


class ModelWindowConsolidator:
    """A teacher model decides a window's edits; the rules stand in where it fails.

    The teacher gets the request `ModelConsolidator` sends (the system prompt and a JSON payload
    of ``notes`` and ``related`` entries), in batches of `batch` notes, and answers with the same
    decisions (keep, merge, replace, delete, add), validated the same way. They become edits:
    a note kept, or not named, is added; ``merge`` of a note into an entry updates the entry;
    ``replace`` of an entry by a note rewrites the entry; ``delete`` of an entry deletes it
    (``delete`` of a note drops it); ``add`` adds. A batch whose answer is missing or invalid is
    consolidated by `fallback`, and `WindowCounts.fallback` says why.

    `teacher` is anything `as_teacher` takes (a callable, a LangChain chat model, a LlamaIndex
    LLM, an `OpenAITeacher`).
    """

    name = "model"

    def __init__(self, teacher: Any, *, related: int = 5, batch: int = 20, timeout: float = 60.0, retries: int = 2,
                 backoff: float = 1.0, fallback: WindowConsolidator | None = None) -> None:
        if related < 0 or batch < 1:
            raise UserError("related must be at least 0 and batch at least 1")
        self.related, self.batch = related, batch
        self.fallback: WindowConsolidator = fallback or RuleConsolidator()
        self._calls = TeacherCaller(as_teacher(teacher), timeout=timeout, retries=retries, backoff=backoff)

    def request(self, store: ExperienceStore, namespace: Namespace,
                notes: Sequence[WindowNote]) -> tuple[list[dict[str, str]], dict[str, WindowNote], set[str]]:
        """The messages for `notes` (ids ``note-1``, ``note-2`` …), the notes by id, every id shown."""
        by_id = {f"note-{i}": note for i, note in enumerate(notes, 1)}
        shown: dict[str, ExperienceEntry] = {}
        for note in notes:
            for hit in store.search(namespace, note.text, k=self.related) if self.related else ():
                if len(shown) < self.related * len(notes):
                    shown.setdefault(hit.entry.id, hit.entry)
        payload = {
            "notes": [{"id": i, "kind": n.kind, "text": n.text, "tags": list(n.tags), "evidence": 1, "wins": 0, "losses": 0}
                      for i, n in by_id.items()],
            "related": [_view(e) for e in shown.values()],
        }
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": json.dumps(payload, ensure_ascii=False, indent=1)}]
        return messages, by_id, set(by_id) | set(shown)

    def consolidate(self, store: ExperienceStore, namespace: Namespace, notes: Sequence[WindowNote],
                    limits: BankLimits, counts: WindowCounts) -> None:
        for start in range(0, len(notes), self.batch):
            chunk = list(notes[start:start + self.batch])
            messages, by_id, shown = self.request(store, namespace, chunk)
            try:
                batch = validate_decisions(parse_decisions(self._calls(messages)), set(by_id), shown)
            except (TeacherError, DecisionError) as exc:
                counts.fallback = f"{type(exc).__name__}: {exc}"[:300]
                self.fallback.consolidate(store, namespace, chunk, limits, counts)
                continue
            with store.transaction():
                applier = EditApplier(store, namespace, limits, counts)
                for edit in _decision_edits(batch.decisions, by_id):
                    applier.apply(edit)

    def close(self) -> None:
        """Stop waiting for the teacher."""
        self._calls.close()


def _decision_edits(decisions: Iterable[Any], notes: dict[str, WindowNote]) -> list[Edit]:
    """Validated decisions about window notes (not stored yet) as edits of the store."""
    pending = dict(notes)
    edits: list[Edit] = []
    for d in decisions:
        if isinstance(d, Keep):
            continue
        if isinstance(d, Merge):
            note = pending.pop(d.id, None)
            if note is None:
                continue
            if d.into in pending:  # two notes of the window say the same: one stays, with both tags
                kept = pending[d.into]
                pending[d.into] = WindowNote(d.text or kept.text, kept.kind, tuple(sorted(set(kept.tags) | set(note.tags))),
                                             kept.supersedes)
            elif d.into not in notes:
                edits.append(UpdateEdit(d.into, text=d.text, tags=note.tags, evidence=1))
        elif isinstance(d, Replace):
            note = pending.get(d.by)
            if d.id in notes:
                pending.pop(d.id, None)
            elif note is not None:
                edits.append(UpdateEdit(d.id, text=note.text, tags=note.tags, replaces=True))
                pending.pop(d.by)
        elif isinstance(d, Delete):
            if d.id in notes:
                pending.pop(d.id, None)
            else:
                edits.append(DeleteEdit(d.id))
        elif isinstance(d, Add):
            edits.append(AddEdit(d.text, d.kind, tuple(d.tags)))
    edits.extend(AddEdit(n.text, n.kind, n.tags) for n in pending.values())
    return edits


def book_credit(store: ExperienceStore, namespace: Namespace, credits: dict[str, Credit]) -> int:
    """Add the uses, wins and losses gathered in a window to the entries; return how many were found."""
    found = 0
    with store.transaction():
        for entry_id, (uses, wins, losses) in credits.items():
            entry = store.get(namespace, entry_id)
            if entry is None:
                continue
            entry.uses, entry.wins, entry.losses = entry.uses + uses, entry.wins + wins, entry.losses + losses
            store.update(namespace, entry)
            found += 1
    return found


def consolidate_window(
    store: ExperienceStore,
    namespace: Namespace,
    notes: Sequence[WindowNote],
    *,
    credits: dict[str, Credit] | None = None,
    consolidator: WindowConsolidator | None = None,
    limits: BankLimits = BankLimits(),
    window: int = 0,
    episodes: int = 0,
) -> WindowCounts:
    """One consolidation pass at the end of a window: book `credits`, then consolidate `notes`.

    `consolidator` defaults to `RuleConsolidator`. Returns the pass's `WindowCounts`.
    """
    counts = WindowCounts(window=window, episodes=episodes, notes=len(notes))
    counts.credited = book_credit(store, namespace, credits or {})
    (consolidator or RuleConsolidator()).consolidate(store, namespace, notes, limits, counts)
    counts.size = store.count(namespace)
    return counts
