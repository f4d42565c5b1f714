"""A deterministic embedder for tests of hybrid recall: no model, no numpy, same vectors everywhere.

`KeywordEmbedder` hashes a text's stems, after mapping each through a table of synonyms onto
a shared concept, into a fixed number of dimensions. Texts that share a stem or a concept get
a positive cosine similarity; texts that share neither get zero (the dimensions are wide enough
that the suite's texts never collide). It exercises the vector path of every store — storage,
updates, deletes, namespaces, fusion — with results a test can predict.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from ..text import terms

__all__ = ["KeywordEmbedder", "SYNONYMS"]

SYNONYMS: Mapping[str, str] = {
    "telephon": "phone", "mobil": "phone", "prefix": "code", "dial": "code", "refus": "reject",
    "declin": "reject", "deni": "reject", "lack": "miss", "without": "miss", "cap": "limit",
    "throttl": "limit", "quota": "limit", "wait": "pause", "sleep": "pause", "backoff": "pause",
}
"""Stem → concept: the paraphrases the conformance suite's hybrid test relies on."""


class KeywordEmbedder:
    """Bag of concepts hashed into `dimensions` buckets, as a callable and as LangChain's shape."""

    def __init__(self, dimensions: int = 4096, synonyms: Mapping[str, str] = SYNONYMS) -> None:
        self.dimensions = dimensions
        self.synonyms = dict(synonyms)
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        self.calls += 1
        vector = [0.0] * self.dimensions
        for term in terms(text):
            concept = self.synonyms.get(term, term)
            bucket = int.from_bytes(hashlib.blake2b(concept.encode(), digest_size=8).digest(), "little")
            vector[bucket % self.dimensions] += 1.0
        if not any(vector):
            vector[0] = 1e-3  # a text without content words: a vector, similar to nothing
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector]

    def __call__(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self(texts)

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)
