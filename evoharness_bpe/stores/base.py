"""The `ExperienceStore` contract every backend implements.

A store keeps `ExperienceEntry` records under namespaces (tuples of strings such as
``("acme", "crm-agent")``) and answers keyword queries with a relevance score. It knows
nothing of consolidation or usefulness ranking: that logic lives once, in
`evoharness_bpe.experience`, on top of these primitives. A backend is correct when it passes
`evoharness_bpe.testing.conformance.ExperienceStoreConformance` unchanged.

Namespaces are isolated: no method may return, change or delete an entry of another namespace,
and a namespace is never a prefix match of another one.
"""

from __future__ import annotations

import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import UserError
from ..text import terms

__all__ = [
    "ExperienceKind",
    "ExperienceEntry",
    "ScoredEntry",
    "ExperienceStore",
    "Namespace",
    "validate_namespace",
    "namespace_key",
    "new_entry_id",
    "entry_terms",
    "entry_text",
]

ExperienceKind = Literal["lesson", "procedure", "pitfall"]
Namespace = tuple[str, ...]

T = TypeVar("T")

_MAX_SEGMENT = 128
_BAD_SEGMENT_RE = re.compile(r"[/\x00-\x1f\x7f]")


def validate_namespace(namespace: Sequence[str]) -> Namespace:
    """Check a namespace and return it as a tuple.

    Each segment is a non-empty string of at most 128 characters without ``/`` or control
    characters; there are one to eight segments.
    """
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise UserError(f"a namespace is a tuple of strings such as ('tenant', 'agent'), not {namespace!r}")
    ns = tuple(namespace)
    if not 1 <= len(ns) <= 8:
        raise UserError(f"a namespace has 1 to 8 segments, got {len(ns)}")
    for seg in ns:
        if not isinstance(seg, str) or not seg or len(seg) > _MAX_SEGMENT or _BAD_SEGMENT_RE.search(seg):
            raise UserError(
                f"invalid namespace segment {seg!r}: use 1-{_MAX_SEGMENT} characters without '/' "
                "or control characters"
            )
    return ns


def namespace_key(namespace: Namespace) -> str:
    """The namespace as one string (segments joined by ``/``), for backends that need a key."""
    return "/".join(namespace)


def new_entry_id() -> str:
    """A fresh, random entry id."""
    return uuid.uuid4().hex[:16]


class ExperienceEntry(BaseModel):
    """A lesson, procedure or pitfall that outlives the episode."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    id: str = Field(default_factory=new_entry_id, description="Unique id within the store.")
    text: str = Field(description="The lesson itself, as the model wrote it.")
    tags: list[str] = Field(default_factory=list, description="Free-form labels, sorted, unique.")
    kind: ExperienceKind = Field(default="lesson", description="lesson, procedure or pitfall.")
    uses: int = Field(default=0, ge=0, description="How often it was recalled.")
    wins: int = Field(default=0, ge=0, description="Episodes that recalled it and succeeded.")
    losses: int = Field(default=0, ge=0, description="Episodes that recalled it and failed.")
    evidence: int = Field(default=1, ge=1, description="How many notes were merged into it.")
    supersedes: list[str] = Field(default_factory=list, description="Ids of entries it replaced.")
    created: float = Field(default_factory=time.time, description="Unix time it was written.")
    updated: float = Field(default_factory=time.time, description="Unix time of the last change.")

    @property
    def usefulness(self) -> float:
        """Laplace-smoothed success rate of the episodes that recalled it (0.5 when unused)."""
        return (self.wins + 1) / (self.wins + self.losses + 2)


def entry_text(entry: ExperienceEntry) -> str:
    """What a store indexes (and embeds) for an entry: its text, then its tags."""
    return entry.text + " " + " ".join(entry.tags) if entry.tags else entry.text


def entry_terms(entry: ExperienceEntry) -> list[str]:
    """The terms a store indexes for an entry: those of its text and of its tags."""
    return terms(entry_text(entry))


class ScoredEntry(BaseModel):
    """An entry with the relevance a store's search gave it (higher is better)."""

    model_config = ConfigDict(defer_build=True)

    entry: ExperienceEntry
    score: float


async def _in_thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    import asyncio  # deferred: sync users of the core never pay for importing asyncio

    return await asyncio.to_thread(fn, *args, **kwargs)


class ExperienceStore(ABC):
    """Namespaced storage and keyword search of experience entries.

    Implementations must be safe to share between threads. `transaction()` groups a
    read-modify-write (consolidation) so that concurrent writers to the same store — threads,
    and for backends that support it, processes — do not interleave inside it.

    Every method has an async twin (`aadd`, `aget`, `aupdate`, `adelete`, `alist`, `asearch`,
    `acount`) for callers inside an event loop. By default a twin runs the sync method in a
    worker thread (`asyncio.to_thread`), so the loop never waits on the store's I/O; a backend
    with a native async driver may override them.
    """

    @abstractmethod
    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        """Insert a new entry; an id already present in the store is a `StoreError`."""

    @abstractmethod
    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        """The entry with this id in this namespace, or None."""

    @abstractmethod
    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        """Replace the stored entry with the same id; a missing entry is a `StoreError`."""

    @abstractmethod
    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        """Delete the entry; return whether it existed in this namespace."""

    @abstractmethod
    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        """Entries of the namespace, most recently updated first."""

    @abstractmethod
    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        """The `k` entries most relevant to `query` (keyword/BM25 or better), best first.

        Without an embedder, entries sharing no term with the query are not returned. A store
        given an embedder (hybrid recall) also returns entries whose meaning is close to the
        query's (cosine similarity at least its `min_similarity`) without a shared term.
        """

    @abstractmethod
    def count(self, namespace: Namespace) -> int:
        """How many entries the namespace holds."""

    # -- async twins (a worker thread unless a backend overrides them) -----------------------
    async def aadd(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        """`add` without blocking the event loop."""
        return await _in_thread(self.add, namespace, entry)

    async def aget(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        """`get` without blocking the event loop."""
        return await _in_thread(self.get, namespace, entry_id)

    async def aupdate(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        """`update` without blocking the event loop."""
        await _in_thread(self.update, namespace, entry)

    async def adelete(self, namespace: Namespace, entry_id: str) -> bool:
        """`delete` without blocking the event loop."""
        return await _in_thread(self.delete, namespace, entry_id)

    async def alist(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        """`list` without blocking the event loop."""
        return await _in_thread(self.list, namespace, limit=limit, offset=offset)

    async def asearch(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        """`search` without blocking the event loop."""
        return await _in_thread(self.search, namespace, query, k=k)

    async def acount(self, namespace: Namespace) -> int:
        """`count` without blocking the event loop."""
        return await _in_thread(self.count, namespace)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group several calls into one atomic read-modify-write; re-entrant."""
        yield

    def close(self) -> None:
        """Release connections; the store is not used afterwards."""
