"""A read-only view of a store: episodes read the bank as it is, and change nothing.

An evaluation with a frozen bank (``evoharness run --bank frozen``), and each window of an
evolving one, plays its episodes on a `FrozenView`: `recall` and the dashboard's hints read the
underlying store; `note`, consolidation at note time and `credit` go through the contract as
usual but write nothing. What `credit` would have written (one use, and a win or a loss, per
recalled entry) is kept in `credits`, so a window's consolidation pass can book it later.

`content_hash` fingerprints what a namespace holds, for evaluation records that must say which
bank they were played against.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..exceptions import StoreError
from .base import ExperienceEntry, ExperienceStore, Namespace, ScoredEntry, validate_namespace

__all__ = ["FrozenView", "Credit", "content_hash"]

Credit = tuple[int, int, int]
"""Uses, wins and losses an entry gained."""


class FrozenView(ExperienceStore):
    """Reads go to `store`; writes are accepted and dropped (the store is never changed).

    `add` answers as a store would (the entry back) without storing it, so a note written in a
    frozen episode is not recalled in it; `delete` answers whether the entry exists; `update`
    of an entry that does not exist is a `StoreError`, as the contract says. An `update` that
    raises an entry's ``uses``, ``wins`` or ``losses`` (what `credit` does) adds the increase to
    `credits`; other changes are dropped. The view does not own `store`: `close` leaves it open.
    """

    def __init__(self, store: ExperienceStore) -> None:
        self.store = store
        self.credits: dict[tuple[Namespace, str], Credit] = {}
        self._lock = threading.Lock()

    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        validate_namespace(namespace)
        return entry.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        return self.store.get(namespace, entry_id)

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        ns = validate_namespace(namespace)
        stored = self.store.get(ns, entry.id)
        if stored is None:
            raise StoreError(f"no entry {entry.id!r} in namespace {ns!r} to update")
        gained = (max(0, entry.uses - stored.uses), max(0, entry.wins - stored.wins), max(0, entry.losses - stored.losses))
        if any(gained):
            with self._lock:
                uses, wins, losses = self.credits.get((ns, entry.id), (0, 0, 0))
                self.credits[(ns, entry.id)] = (uses + gained[0], wins + gained[1], losses + gained[2])

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        return self.store.get(namespace, entry_id) is not None

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        return self.store.list(namespace, limit=limit, offset=offset)

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        return self.store.search(namespace, query, k=k)

    def count(self, namespace: Namespace) -> int:
        return self.store.count(namespace)

    def take_credits(self, namespace: Namespace) -> dict[str, Credit]:
        """The credit gathered for `namespace` since the last call, by entry id; clears it."""
        ns = validate_namespace(namespace)
        with self._lock:
            taken = {entry_id: c for (n, entry_id), c in self.credits.items() if n == ns}
            for entry_id in taken:
                del self.credits[(ns, entry_id)]
        return taken

    @contextmanager
    def transaction(self) -> Iterator[None]:
        yield  # nothing is written, so nothing needs to be serialised

    def close(self) -> None:
        """Nothing to release: the underlying store stays open (its owner closes it)."""


def content_hash(store: ExperienceStore, namespace: Namespace) -> str:
    """A SHA-256 of what `namespace` holds: every entry's id, text, tags, kind and counts.

    Timestamps are left out, so a copy of a bank hashes like the bank; any change a
    consolidation or a credit makes changes the hash.
    """
    entries = store.list(namespace, limit=max(1, store.count(namespace)))
    rows = sorted(
        (e.id, e.text, sorted(e.tags), e.kind, e.uses, e.wins, e.losses, e.evidence, sorted(e.supersedes)) for e in entries
    )
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()
