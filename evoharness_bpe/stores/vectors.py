"""An in-process set of unit vectors with exact cosine top-k (numpy when installed)."""

from __future__ import annotations

import heapq
import sys
from array import array
from collections.abc import Hashable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["VectorIndex", "pack", "unpack"]

D = TypeVar("D", bound=Hashable)


def pack(vector: Sequence[float]) -> bytes:
    """A vector as little-endian float32 bytes (sqlite-vec's storage format)."""
    data = array("f", vector)
    if sys.byteorder != "little":  # pragma: no cover
        data.byteswap()
    return data.tobytes()


def unpack(blob: bytes) -> list[float]:
    """The inverse of `pack`."""
    data = array("f")
    data.frombytes(blob)
    if sys.byteorder != "little":  # pragma: no cover
        data.byteswap()
    return data.tolist()


class VectorIndex(Generic[D]):
    """Unit vectors by document id; a search is an exact scan (a matrix product with numpy).

    Not thread-safe: the stores that hold one guard it with their own lock.
    """

    def __init__(self) -> None:
        self._vectors: dict[D, Sequence[float]] = {}
        self._matrix: Any = None  # (ids, numpy matrix), rebuilt after a change
        self.dimension: int | None = None

    def __len__(self) -> int:
        return len(self._vectors)

    def add(self, doc: D, vector: Sequence[float]) -> None:
        """Store `doc`'s vector, replacing any before it."""
        self._vectors[doc] = vector
        self.dimension = len(vector)
        self._matrix = None

    def remove(self, doc: D) -> bool:
        """Forget `doc`'s vector; return whether there was one."""
        self._matrix = None
        return self._vectors.pop(doc, None) is not None

    def search(self, query: Sequence[float], k: int, min_similarity: float) -> list[tuple[D, float]]:
        """The `k` most similar documents with similarity at least `min_similarity`, best first."""
        if k <= 0 or not self._vectors:
            return []
        if len(query) != self.dimension:
            from ..exceptions import StoreError

            raise StoreError(f"the query vector has {len(query)} dimensions, the stored ones {self.dimension}")
        try:
            import numpy as np
        except ImportError:
            scored = [(sum(a * b for a, b in zip(query, v)), d) for d, v in self._vectors.items()]
            hits = [(d, s) for s, d in scored if s >= min_similarity]
            return heapq.nsmallest(k, hits, key=lambda h: (-h[1], h[0]))
        if self._matrix is None:
            ids = list(self._vectors)
            self._matrix = (ids, np.asarray([self._vectors[d] for d in ids], dtype=np.float32))
        ids, matrix = self._matrix
        sims = matrix @ np.asarray(query, dtype=np.float32)
        top = np.argpartition(-sims, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        hits = [(ids[i], float(sims[i])) for i in top if sims[i] >= min_similarity]
        return sorted(hits, key=lambda h: (-h[1], h[0]))
