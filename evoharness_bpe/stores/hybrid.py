"""Ranking shared by the stores that search in process: BM25 alone, or fused with vectors."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

from ..embeddings import Fusion, reciprocal_rank_fusion
from .bm25 import BM25Index
from .vectors import VectorIndex, unpack

__all__ = ["rank"]

D = TypeVar("D", bound=Hashable)


def _best(hits: list[tuple[D, float]], n: int) -> list[tuple[D, float]]:
    return sorted(hits, key=lambda h: (-h[1], h[0]))[:n]


def rank(
    index: BM25Index[D],
    vectors: VectorIndex[D],
    wanted: Sequence[str],
    query_vector: Sequence[float] | None,
    k: int,
    fusion: Fusion,
    *,
    pending: Sequence[tuple[D, list[str] | None, bytes | None]] = (),
) -> list[tuple[D, float]]:
    """The `k` best documents: BM25, or (given a query vector) BM25 and cosine fused by RRF.

    `pending` holds documents written since the indexes were last brought up to date (an open
    transaction's writes) as ``(doc, terms or None if deleted, packed vector or None)``: they
    replace whatever the indexes hold under the same ids and are scored with the indexes'
    statistics. A query without content words (`wanted` empty) finds nothing.
    """
    if not wanted or k <= 0:
        return []
    n = k if query_vector is None else max(k, fusion.candidates)
    gone = frozenset(doc for doc, _, _ in pending)
    lexical = index.search(wanted, n, exclude=gone)
    if pending:
        extra = [(doc, index.score(t, wanted)) for doc, t, _ in pending if t is not None]
        lexical = _best(lexical + [h for h in extra if h[1] > 0], n)
    if query_vector is None:
        return lexical[:k]
    semantic = [h for h in vectors.search(query_vector, n + len(gone), fusion.min_similarity) if h[0] not in gone]
    if pending:
        extra = [(doc, sum(a * b for a, b in zip(query_vector, unpack(v)))) for doc, t, v in pending
                 if t is not None and v is not None]
        semantic = _best(semantic + [h for h in extra if h[1] >= fusion.min_similarity], n)
    return reciprocal_rank_fusion(lexical, semantic[:n], fusion)[:k]
