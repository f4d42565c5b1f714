"""Experience logic on top of any `ExperienceStore`: consolidation, ranked recall, credit.

This is the one place where notes are merged, replaced and decayed, so every backend behaves
the same way. Each read-modify-write runs inside `store.transaction()`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .exceptions import MetaActionError, UserError
from .stores.base import ExperienceEntry, ExperienceKind, ExperienceStore, Namespace, ScoredEntry
from .text import has_negation, jaccard, numbers, terms

__all__ = ["ConsolidationPolicy", "NoteOutcome", "consolidate_note", "similar_entries", "recall", "credit", "is_decayed"]


@dataclass(frozen=True)
class ConsolidationPolicy:
    """How notes are merged, replaced, ranked and forgotten."""

    duplicate_threshold: float = 0.7
    """Jaccard similarity of content words above which two notes say the same thing."""
    candidates: int = 5
    """How many search hits are compared with a new note."""
    decay_margin: int = 3
    """An entry whose losses exceed its wins by this much no longer appears in recall."""
    max_entries: int | None = 10_000
    """Per-namespace cap; beyond it the least useful entries are evicted (None: no cap)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.duplicate_threshold <= 1.0:
            raise UserError("duplicate_threshold must be in (0, 1]")
        if self.candidates < 1 or self.decay_margin < 1:
            raise UserError("candidates and decay_margin must be at least 1")
        if self.max_entries is not None and self.max_entries < 1:
            raise UserError("max_entries must be at least 1, or None for no cap")


class NoteOutcome(BaseModel):
    """What a note did to the store."""

    model_config = ConfigDict(defer_build=True)

    action: Literal["added", "merged", "replaced"]
    entry: ExperienceEntry
    replaced: list[str] = []
    evicted: int = 0


def is_decayed(entry: ExperienceEntry, policy: ConsolidationPolicy) -> bool:
    """Whether the entry kept failing long enough to be left out of recall."""
    return entry.losses - entry.wins >= policy.decay_margin


def _content_terms(text: str) -> set[str]:
    return {t for t in terms(text) if not t.isdigit()}


def _contradicts(new: str, old: str) -> bool:
    # Same words, other numbers or the opposite polarity: the newer note corrects the older.
    return numbers(new) != numbers(old) or has_negation(new) != has_negation(old)


def similar_entries(
    store: ExperienceStore, namespace: Namespace, text: str, *, policy: ConsolidationPolicy = ConsolidationPolicy()
) -> list[tuple[ExperienceEntry, bool]]:
    """The stored entries that say what `text` says, best match first, each with whether `text`
    contradicts it (same words, other numbers or the opposite polarity).

    These are the near-duplicates `consolidate_note` merges a note into or replaces by it.
    """
    new_terms = _content_terms(text)
    return [
        (hit.entry, _contradicts(text, hit.entry.text))
        for hit in store.search(namespace, text, k=policy.candidates)
        if jaccard(new_terms, _content_terms(hit.entry.text)) >= policy.duplicate_threshold
    ]


def consolidate_note(
    store: ExperienceStore,
    namespace: Namespace,
    text: str,
    *,
    tags: list[str] | None = None,
    kind: ExperienceKind = "lesson",
    supersedes: str | None = None,
    policy: ConsolidationPolicy = ConsolidationPolicy(),
) -> NoteOutcome:
    """Write a note the consolidating way.

    A near-duplicate of an existing entry merges into it (evidence up, tags united); a note
    that repeats an entry with other numbers or the opposite polarity replaces it; `supersedes`
    replaces the named entry explicitly (an unknown id is a `MetaActionError` and nothing is
    written). When the namespace grows past the cap, the least useful entries are evicted.
    """
    tags = sorted(set(tags or []))
    now = time.time()
    with store.transaction():
        replaced: list[str] = []
        if supersedes is not None:
            if store.get(namespace, supersedes) is None:
                raise MetaActionError(
                    f"supersedes names no entry: {supersedes!r} does not exist (use an id from recall)",
                    field="supersedes",
                )
            replaced.append(supersedes)
        for old, contradicted in similar_entries(store, namespace, text, policy=policy):
            if old.id in replaced:
                continue
            if contradicted:
                replaced.append(old.id)
                continue
            if not replaced:
                old.evidence += 1
                old.tags = sorted(set(old.tags) | set(tags))
                old.updated = now
                store.update(namespace, old)
                return NoteOutcome(action="merged", entry=old)
        entry = ExperienceEntry(text=text, tags=tags, kind=kind, supersedes=replaced, created=now, updated=now)
        for old_id in replaced:
            store.delete(namespace, old_id)
        store.add(namespace, entry)
        evicted = _enforce_cap(store, namespace, policy, keep=entry.id)
    return NoteOutcome(action="replaced" if replaced else "added", entry=entry, replaced=replaced, evicted=evicted)


def _enforce_cap(store: ExperienceStore, namespace: Namespace, policy: ConsolidationPolicy, keep: str) -> int:
    if policy.max_entries is None:
        return 0
    total = store.count(namespace)
    if total <= policy.max_entries:
        return 0
    # Evict a tenth of the cap at once so that a full namespace does not rescan on every note.
    target = max(policy.max_entries - max(policy.max_entries // 10, 1), 1)
    entries = store.list(namespace, limit=total, offset=0)
    entries.sort(key=lambda e: (not is_decayed(e, policy), e.usefulness, e.evidence, e.updated))
    evicted = 0
    for entry in entries:
        if total - evicted <= target:
            break
        if entry.id != keep and store.delete(namespace, entry.id):
            evicted += 1
    return evicted


def recall(
    store: ExperienceStore,
    namespace: Namespace,
    query: str,
    *,
    k: int = 3,
    policy: ConsolidationPolicy = ConsolidationPolicy(),
) -> list[ScoredEntry]:
    """The `k` best entries for `query`: relevance weighted by usefulness, decayed ones left out."""
    hits = [h for h in store.search(namespace, query, k=4 * k + 4) if not is_decayed(h.entry, policy)]
    if not hits:
        return []
    top = max(h.score for h in hits) or 1.0
    ranked = [
        ScoredEntry(
            entry=h.entry,
            score=(h.score / top) * (0.5 + h.entry.usefulness) * (1 + 0.1 * math.log(h.entry.evidence)),
        )
        for h in hits
    ]
    ranked.sort(key=lambda s: -s.score)  # stable: equal scores keep the store's order
    return ranked[:k]


def credit(store: ExperienceStore, namespace: Namespace, entry_ids: list[str], success: bool) -> int:
    """Count one use and a win (or loss) for each recalled entry; return how many were found."""
    found = 0
    with store.transaction():
        for entry_id in dict.fromkeys(entry_ids):
            entry = store.get(namespace, entry_id)
            if entry is None:
                continue
            entry.uses += 1
            if success:
                entry.wins += 1
            else:
                entry.losses += 1
            store.update(namespace, entry)
            found += 1
    return found
