"""An in-process experience store with a BM25 inverted index."""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from ..exceptions import StoreError
from ..text import query_terms, terms
from .base import ExperienceEntry, ExperienceStore, Namespace, ScoredEntry, validate_namespace

__all__ = ["MemoryExperienceStore"]

_K1 = 1.2
_B = 0.75


class _Shelf:
    """One namespace: entries, their term counts and the postings of each term."""

    def __init__(self) -> None:
        self.entries: dict[str, ExperienceEntry] = {}
        self.doc_terms: dict[str, Counter[str]] = {}
        self.doc_length: dict[str, int] = {}
        self.postings: dict[str, set[str]] = defaultdict(set)
        self.total_length = 0

    def index(self, entry: ExperienceEntry) -> None:
        counts = Counter(terms(entry.text + " " + " ".join(entry.tags)))
        self.entries[entry.id] = entry
        self.doc_terms[entry.id] = counts
        self.doc_length[entry.id] = length = sum(counts.values())
        self.total_length += length
        for term in counts:
            self.postings[term].add(entry.id)

    def unindex(self, entry_id: str) -> None:
        self.entries.pop(entry_id)
        counts = self.doc_terms.pop(entry_id)
        self.total_length -= self.doc_length.pop(entry_id)
        for term in counts:
            ids = self.postings[term]
            ids.discard(entry_id)
            if not ids:
                del self.postings[term]


class MemoryExperienceStore(ExperienceStore):
    """Experience kept in this process only; fast, and lost when the process ends.

    `transaction()` serialises the callers in this process; it does not roll back: writes made
    before an exception inside the block are kept.
    """

    def __init__(self) -> None:
        self._shelves: dict[Namespace, _Shelf] = defaultdict(_Shelf)
        self._owner: dict[str, Namespace] = {}
        self._lock = threading.RLock()

    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        ns = validate_namespace(namespace)
        with self._lock:
            if entry.id in self._owner:
                raise StoreError(f"an entry with id {entry.id!r} already exists")
            stored = entry.model_copy(deep=True)
            self._shelves[ns].index(stored)
            self._owner[entry.id] = ns
            return stored.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            entry = shelf.entries.get(entry_id) if shelf else None
            return entry.model_copy(deep=True) if entry else None

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or entry.id not in shelf.entries:
                raise StoreError(f"no entry {entry.id!r} in namespace {ns!r} to update")
            shelf.unindex(entry.id)
            shelf.index(entry.model_copy(deep=True))

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or entry_id not in shelf.entries:
                return False
            shelf.unindex(entry_id)
            del self._owner[entry_id]
            return True

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None:
                return []
            ordered = sorted(shelf.entries.values(), key=lambda e: (e.updated, e.id), reverse=True)
            return [e.model_copy(deep=True) for e in ordered[offset : offset + limit]]

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        ns = validate_namespace(namespace)
        wanted = query_terms(query)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or not shelf.entries or not wanted:
                return []
            n_docs = len(shelf.entries)
            avg_len = shelf.total_length / n_docs or 1.0
            scores: dict[str, float] = defaultdict(float)
            for term in wanted:
                ids = shelf.postings.get(term)
                if not ids:
                    continue
                idf = math.log(1 + (n_docs - len(ids) + 0.5) / (len(ids) + 0.5))
                for entry_id in ids:
                    tf = shelf.doc_terms[entry_id][term]
                    norm = _K1 * (1 - _B + _B * shelf.doc_length[entry_id] / avg_len)
                    scores[entry_id] += idf * tf * (_K1 + 1) / (tf + norm)
            best = sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
            return [
                ScoredEntry(entry=shelf.entries[eid].model_copy(deep=True), score=score)
                for eid, score in best
            ]

    def count(self, namespace: Namespace) -> int:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            return len(shelf.entries) if shelf else 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield
