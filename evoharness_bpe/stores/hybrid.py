"""Ranking shared by the stores that search in process: BM25 alone, or fused with vectors."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from ..embeddings import Fusion, reciprocal_rank_fusion
from .bm25 import BM25Index
from .vectors import VectorIndex

__all__ = ["rank"]

D = TypeVar("D", bound=Hashable)


def rank(
    index: BM25Index[D],
    vectors: VectorIndex[D],
    wanted: Sequence[str],
    query_vector: Sequence[float] | None,
    k: int,
    fusion: Fusion,
) -> list[tuple[D, float]]:
    """The `k` best documents: BM25, or (given a query vector) BM25 and cosine fused by RRF.

    A query without content words (`wanted` empty) finds nothing, with or without vectors.
    """
    if not wanted or k <= 0:
        return []
    if query_vector is None:
        return index.search(wanted, k)
    n = max(k, fusion.candidates)
    lexical = index.search(wanted, n)
    semantic = vectors.search(query_vector, n, fusion.min_similarity)
    return reciprocal_rank_fusion(lexical, semantic, fusion)[:k]
