"""`LangGraphExperienceStore`: the core's `ExperienceStore` on any LangGraph `BaseStore`.

Entries live under ``(*prefix, *namespace, "entries")`` with the entry id as the key, so the
experience of ``("acme", "crm")`` sits next to the application's own data in the same
`InMemoryStore`, `SqliteStore` or `PostgresStore`. LangGraph labels cannot contain ``.`` and a
prefix search also returns sub-namespaces, so segments are percent-encoded reversibly and every
read keeps the exact namespace only. Without an embedding index `BaseStore.search` ignores the
query, so relevance is BM25 over the namespace's entries (the core's term extraction and BM25
index); with an index configured, that ranking is fused (reciprocal rank fusion, as the core
stores do with an embedder) with the store's own semantic ranking.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from evoharness_bpe.embeddings import Fusion, reciprocal_rank_fusion
from evoharness_bpe.exceptions import StoreError, UserError
from evoharness_bpe.stores.base import (
    ExperienceEntry,
    ExperienceStore,
    Namespace,
    ScoredEntry,
    entry_terms,
    validate_namespace,
)
from evoharness_bpe.stores.bm25 import BM25Index
from evoharness_bpe.text import query_terms
from langgraph.store.base import BaseStore

__all__ = ["LangGraphExperienceStore", "encode_label", "decode_label"]

_PAGE = 500
_LEAF = "entries"


def encode_label(segment: str) -> str:
    """A namespace segment as a LangGraph label: ``%`` and ``.`` percent-encoded."""
    return segment.replace("%", "%25").replace(".", "%2E")


def decode_label(label: str) -> str:
    """The inverse of `encode_label`."""
    return label.replace("%2E", ".").replace("%25", "%")


class LangGraphExperienceStore(ExperienceStore):
    """Experience entries kept in a LangGraph `BaseStore`.

    >>> from langgraph.store.memory import InMemoryStore
    >>> store = LangGraphExperienceStore(InMemoryStore())
    >>> _ = store.add(("acme", "crm"), ExperienceEntry(text="Batch uploads of 50 records"))
    >>> [h.entry.text for h in store.search(("acme", "crm"), "batch upload")]
    ['Batch uploads of 50 records']

    `transaction()` serialises the callers in this process (consolidation's read-modify-write);
    it does not roll back, since `BaseStore` has no transactions. Entry ids are unique per
    namespace.
    """

    def __init__(self, store: BaseStore, *, prefix: Sequence[str] = ("evoharness",), fusion: Fusion = Fusion()) -> None:
        if not isinstance(store, BaseStore):
            raise UserError(f"LangGraphExperienceStore needs a langgraph BaseStore, got {type(store).__name__}")
        self.store = store
        self.prefix = tuple(encode_label(p) for p in validate_namespace(prefix))
        self._lock = threading.RLock()
        self._semantic = getattr(store, "index_config", None) is not None
        self.fusion = fusion

    # -- namespaces --------------------------------------------------------------------------
    def _ns(self, namespace: Namespace) -> tuple[str, ...]:
        return (*self.prefix, *(encode_label(s) for s in validate_namespace(namespace)), _LEAF)

    def _items(self, ns: tuple[str, ...]) -> list[Any]:
        found: list[Any] = []
        offset = 0
        while True:
            page = self.store.search(ns, limit=_PAGE, offset=offset)
            found.extend(item for item in page if tuple(item.namespace) == ns)
            if len(page) < _PAGE:
                return found
            offset += _PAGE

    @staticmethod
    def _entry(value: dict[str, Any]) -> ExperienceEntry:
        try:
            return ExperienceEntry.model_validate(value)
        except ValueError as exc:
            raise StoreError(f"a stored experience entry is not readable: {exc}") from exc

    def _put(self, ns: tuple[str, ...], entry: ExperienceEntry) -> None:
        value = entry.model_dump(mode="json")
        try:
            if self._semantic:
                self.store.put(ns, entry.id, value, index=["text"])
            else:
                self.store.put(ns, entry.id, value, index=False)
        except Exception as exc:  # the backend's own error types differ (sqlite3, psycopg, …)
            raise StoreError(f"could not write entry {entry.id!r}: {exc}") from exc

    # -- contract ----------------------------------------------------------------------------
    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        ns = self._ns(namespace)
        with self._lock:
            if self.store.get(ns, entry.id) is not None:
                raise StoreError(f"an entry with id {entry.id!r} already exists")
            self._put(ns, entry)
        return entry.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        ns = self._ns(namespace)
        with self._lock:
            item = self.store.get(ns, entry_id)
        return self._entry(item.value) if item is not None else None

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        ns = self._ns(namespace)
        with self._lock:
            if self.store.get(ns, entry.id) is None:
                raise StoreError(f"no entry {entry.id!r} in namespace {tuple(namespace)!r} to update")
            self._put(ns, entry)

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        ns = self._ns(namespace)
        with self._lock:
            if self.store.get(ns, entry_id) is None:
                return False
            self.store.delete(ns, entry_id)
            return True

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        ns = self._ns(namespace)
        with self._lock:
            entries = [self._entry(item.value) for item in self._items(ns)]
        entries.sort(key=lambda e: (e.updated, e.id), reverse=True)
        return entries[offset : offset + limit]

    def count(self, namespace: Namespace) -> int:
        ns = self._ns(namespace)
        with self._lock:
            return len(self._items(ns))

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        ns = self._ns(namespace)
        wanted = query_terms(query)
        if not wanted or k <= 0:
            return []
        with self._lock:
            entries = {e.id: e for e in (self._entry(item.value) for item in self._items(ns))}
            semantic = self._semantic_ranking(ns, query, max(k, self.fusion.candidates)) if self._semantic else None
        index: BM25Index[str] = BM25Index()
        for entry in entries.values():
            index.add(entry.id, entry_terms(entry))
        if semantic is None:
            ranked = index.search(wanted, k)
        else:
            lexical = index.search(wanted, max(k, self.fusion.candidates))
            ranked = reciprocal_rank_fusion(lexical, [h for h in semantic if h[0] in entries], self.fusion)[:k]
        return [ScoredEntry(entry=entries[entry_id], score=score) for entry_id, score in ranked]

    def _semantic_ranking(self, ns: tuple[str, ...], query: str, n: int) -> list[tuple[str, float]]:
        items = self.store.search(ns, query=query, limit=n)
        return [
            (item.key, float(item.score))
            for item in items
            if tuple(item.namespace) == ns and item.score is not None and item.score >= self.fusion.min_similarity
        ]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield
