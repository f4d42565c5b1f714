"""`LangGraphExperienceStore`: the core's `ExperienceStore` on any LangGraph `BaseStore`.

Entries live under ``(*prefix, *namespace, "entries")`` with the entry id as the key, so the
experience of ``("acme", "crm")`` sits next to the application's own data in the same
`InMemoryStore`, `SqliteStore` or `PostgresStore`. LangGraph labels cannot contain ``.`` and a
prefix search also returns sub-namespaces, so segments are percent-encoded reversibly and every
read keeps the exact namespace only. Without an embedding index `BaseStore.search` ignores the
query, so relevance is BM25 over the namespace's entries (the core's term extraction); with an
index configured, the store's semantic score ranks the entries that share a term with the query.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from evoharness_bpe.exceptions import StoreError, UserError
from evoharness_bpe.stores.base import ExperienceEntry, ExperienceStore, Namespace, ScoredEntry, validate_namespace
from evoharness_bpe.text import terms
from langgraph.store.base import BaseStore

__all__ = ["LangGraphExperienceStore", "encode_label", "decode_label"]

_K1 = 1.2
_B = 0.75
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

    def __init__(self, store: BaseStore, *, prefix: Sequence[str] = ("evoharness",)) -> None:
        if not isinstance(store, BaseStore):
            raise UserError(f"LangGraphExperienceStore needs a langgraph BaseStore, got {type(store).__name__}")
        self.store = store
        self.prefix = tuple(encode_label(p) for p in validate_namespace(prefix))
        self._lock = threading.RLock()
        self._semantic = getattr(store, "index_config", None) is not None

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
        query_terms = set(terms(query))
        if not query_terms or k <= 0:
            return []
        if self._semantic:
            return self._semantic_search(ns, query, query_terms, k)
        with self._lock:
            entries = [self._entry(item.value) for item in self._items(ns)]
        return _bm25(entries, query_terms, k)

    def _semantic_search(self, ns: tuple[str, ...], query: str, query_terms: set[str], k: int) -> list[ScoredEntry]:
        with self._lock:
            items = self.store.search(ns, query=query, limit=max(4 * k, 20))
        hits = []
        for item in items:
            if tuple(item.namespace) != ns:
                continue
            entry = self._entry(item.value)
            if query_terms & set(terms(entry.text + " " + " ".join(entry.tags))):
                hits.append(ScoredEntry(entry=entry, score=max(float(item.score or 0.0), 1e-9)))
        hits.sort(key=lambda h: (-h.score, h.entry.id))
        return hits[:k]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._lock:
            yield


def _bm25(entries: list[ExperienceEntry], query_terms: set[str], k: int) -> list[ScoredEntry]:
    docs = [Counter(terms(e.text + " " + " ".join(e.tags))) for e in entries]
    if not docs:
        return []
    lengths = [sum(d.values()) for d in docs]
    avg_len = (sum(lengths) / len(docs)) or 1.0
    df = {t: sum(1 for d in docs if t in d) for t in query_terms}
    scored = []
    for entry, doc, length in zip(entries, docs, lengths, strict=False):
        score = 0.0
        for term in query_terms:
            tf = doc.get(term, 0)
            if not tf:
                continue
            idf = math.log(1 + (len(docs) - df[term] + 0.5) / (df[term] + 0.5))
            score += idf * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avg_len))
        if score > 0:
            scored.append(ScoredEntry(entry=entry, score=score))
    scored.sort(key=lambda h: (-h.score, h.entry.id))
    return scored[:k]
