"""An in-process experience store with a BM25 inverted index (and vectors, given an embedder)."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from ..embeddings import Embedder, Fusion, as_embedder
from ..exceptions import StoreError
from ..text import query_terms
from .base import ExperienceEntry, ExperienceStore, Namespace, ScoredEntry, entry_terms, entry_text, validate_namespace
from .bm25 import BM25Index
from .hybrid import rank
from .vectors import VectorIndex

__all__ = ["MemoryExperienceStore"]

class _Shelf:
    """One namespace: its entries and their indexes, keyed by the order entries were added in.

    Equal scores are ranked by that order (as the SQLite store ranks them by row), so that two
    runs that write the same entries recall them alike although their ids are random.
    """

    def __init__(self) -> None:
        self.entries: dict[str, ExperienceEntry] = {}
        self.index: BM25Index[int] = BM25Index()
        self.vectors: VectorIndex[int] = VectorIndex()
        self.seq: dict[str, int] = {}
        self.ids: dict[int, str] = {}
        self._next = 0

    def put(self, entry: ExperienceEntry, vector: list[float] | None) -> None:
        seq = self.seq.get(entry.id)
        if seq is None:
            seq = self._next
        if vector is not None:  # first: a vector of the wrong dimension is refused before any change
            self.vectors.add(seq, vector)
        if entry.id not in self.seq:
            self._next += 1
            self.seq[entry.id], self.ids[seq] = seq, entry.id
        self.entries[entry.id] = entry
        self.index.add(seq, entry_terms(entry))

    def drop(self, entry_id: str) -> None:
        seq = self.seq.pop(entry_id)
        del self.ids[seq]
        self.entries.pop(entry_id)
        self.index.remove(seq)
        self.vectors.remove(seq)


class MemoryExperienceStore(ExperienceStore):
    """Experience kept in this process only; fast, and lost when the process ends.

    `transaction()` serialises the callers in this process; it does not roll back: writes made
    before an exception inside the block are kept.

    `embedder` (any kind `evoharness_bpe.embeddings.as_embedder` accepts) turns on hybrid
    recall: BM25 and cosine similarity fused as `fusion` says.
    """

    def __init__(self, *, embedder: object | None = None, fusion: Fusion = Fusion()) -> None:
        self.embedder: Embedder | None = as_embedder(embedder) if embedder is not None else None
        self.fusion = fusion
        self._shelves: dict[Namespace, _Shelf] = defaultdict(_Shelf)
        self._owner: dict[str, Namespace] = {}
        self._lock = threading.RLock()

    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        ns = validate_namespace(namespace)
        vector = self._embed(entry)
        with self._lock:
            if entry.id in self._owner:
                raise StoreError(f"an entry with id {entry.id!r} already exists")
            stored = entry.model_copy(deep=True)
            self._shelves[ns].put(stored, vector)
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
            stored = entry.model_copy(deep=True)
            same_text = entry_text(shelf.entries[entry.id]) == entry_text(stored)
            shelf.put(stored, None if same_text else self._embed(stored))

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or entry_id not in shelf.entries:
                return False
            shelf.drop(entry_id)
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
        vector = self.embedder.embed_query(query) if self.embedder is not None and wanted else None
        with self._lock:
            shelf = self._shelves.get(ns)
            if shelf is None or not shelf.entries or not wanted:
                return []
            best = rank(shelf.index, shelf.vectors, wanted, vector, k, self.fusion)
            return [
                ScoredEntry(entry=shelf.entries[shelf.ids[seq]].model_copy(deep=True), score=score)
                for seq, score in best
            ]

    def _embed(self, entry: ExperienceEntry) -> list[float] | None:
        return self.embedder.embed_documents([entry_text(entry)])[0] if self.embedder is not None else None

    def count(self, namespace: Namespace) -> int:
        ns = validate_namespace(namespace)
        with self._lock:
            shelf = self._shelves.get(ns)
            return len(shelf.entries) if shelf else 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield
