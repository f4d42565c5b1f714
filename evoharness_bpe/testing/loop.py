"""`LoopGuardStore`: an experience store that refuses to be called on an event loop's thread.

Async code paths must reach a store through its async twins (or a worker thread), never with a
blocking call on the loop. Wrap any store in `LoopGuardStore` and run the async path: a sync
call made on a thread with a running event loop raises `StoreError` and is kept in
`violations`, so a test can assert that the list stays empty.

>>> import asyncio
>>> from evoharness_bpe import MemoryExperienceStore
>>> store = LoopGuardStore(MemoryExperienceStore())
>>> asyncio.run(store.acount(("ns",)))   # the async twin: a worker thread
0
>>> store.violations
[]
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ..exceptions import StoreError
from ..stores.base import ExperienceEntry, ExperienceStore, Namespace, ScoredEntry

__all__ = ["LoopGuardStore"]


class LoopGuardStore(ExperienceStore):
    """Delegates to `store`; a sync call on a thread running an event loop is refused."""

    def __init__(self, store: ExperienceStore) -> None:
        self.store = store
        self.violations: list[str] = []
        self.calls = 0
        self._lock = threading.Lock()

    def _check(self, method: str) -> None:
        with self._lock:
            self.calls += 1
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop on this thread: a worker thread or sync code
        with self._lock:
            self.violations.append(method)
        raise StoreError(f"ExperienceStore.{method} was called on the event loop's thread")

    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        self._check("add")
        return self.store.add(namespace, entry)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        self._check("get")
        return self.store.get(namespace, entry_id)

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        self._check("update")
        self.store.update(namespace, entry)

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        self._check("delete")
        return self.store.delete(namespace, entry_id)

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        self._check("list")
        return self.store.list(namespace, limit=limit, offset=offset)

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        self._check("search")
        return self.store.search(namespace, query, k=k)

    def count(self, namespace: Namespace) -> int:
        self._check("count")
        return self.store.count(namespace)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._check("transaction")
        with self.store.transaction():
            yield

    def close(self) -> None:
        self.store.close()
