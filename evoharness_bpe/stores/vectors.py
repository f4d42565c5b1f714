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
    """Unit vectors by document id, kept packed (4 bytes a dimension); exact cosine search.

    With numpy the search is one matrix product over a matrix rebuilt after each change; without
    it, a pure-Python scan. Not thread-safe: the stores that hold one guard it with their lock.
    """

    def __init__(self) -> None:
        self._packed: dict[D, bytes] = {}
        self._matrix: Any = None  # (ids, numpy matrix), rebuilt after a change
        self.dimension: int | None = None

    def __len__(self) -> int:
        return len(self._packed)

    def add(self, doc: D, vector: Sequence[float] | bytes) -> None:
        """Store `doc`'s vector (a sequence of floats or `pack`'s bytes), replacing any before it."""
        packed = vector if isinstance(vector, bytes) else pack(vector)
        dimension = len(packed) // 4
        if self.dimension is not None and dimension != self.dimension and len(self._packed) > (doc in self._packed):
            from ..exceptions import StoreError

            raise StoreError(f"a vector of {dimension} dimensions among vectors of {self.dimension}")
        self._packed[doc] = packed
        self.dimension = dimension
        self._matrix = None

    def remove(self, doc: D) -> bool:
        """Forget `doc`'s vector; return whether there was one."""
        if self._packed.pop(doc, None) is None:
            return False
        self._matrix = None
        return True

    def search(self, query: Sequence[float], k: int, min_similarity: float) -> list[tuple[D, float]]:
        """The `k` most similar documents with similarity at least `min_similarity`, best first."""
        if k <= 0 or not self._packed:
            return []
        if len(query) != self.dimension:
            from ..exceptions import StoreError

            raise StoreError(f"the query vector has {len(query)} dimensions, the stored ones {self.dimension}")
        try:
            import numpy as np
        except ImportError:
            hits = []
            for doc, packed in self._packed.items():
                similarity = sum(a * b for a, b in zip(query, unpack(packed)))
                if similarity >= min_similarity:
                    hits.append((doc, similarity))
            return heapq.nsmallest(k, hits, key=lambda h: (-h[1], h[0]))
        if self._matrix is None:
            ids = list(self._packed)
            matrix = np.frombuffer(b"".join(self._packed[d] for d in ids), dtype="<f4").reshape(len(ids), -1)
            self._matrix = (ids, matrix)
        ids, matrix = self._matrix
        sims = matrix @ np.asarray(query, dtype=np.float32)
        top = np.argpartition(-sims, k - 1)[:k] if k < len(ids) else np.arange(len(ids))
        hits = [(ids[i], float(sims[i])) for i in top if sims[i] >= min_similarity]
        return sorted(hits, key=lambda h: (-h[1], h[0]))
