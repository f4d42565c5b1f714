"""The one BM25 implementation of the stores that score in Python: an in-process inverted index.

`BM25Index` keeps, for every term, the documents that contain it with a precomputed impact (the
term-frequency and length part of BM25). A search multiplies impacts by the term's current IDF
and returns the exact top `k`, skipping most of a common term's postings with MaxScore-style
pruning: the query's rarest terms are scored first; once no document outside the candidates
can still reach the `k`-th score, the common terms only update the candidates, by lookup.

Scoring is Okapi BM25 with Lucene's always-positive IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
``k1 = 1.2`` and ``b = 0.75``. The length normalisation uses the average document length of the
last re-weighting; the index re-weights itself when the average drifts by more than 2%.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = ["BM25Index", "K1", "B"]

K1 = 1.2
B = 0.75
_DRIFT = 0.02

D = TypeVar("D", bound=Hashable)


class BM25Index(Generic[D]):
    """Documents (any hashable, orderable id) and their terms; exact BM25 top-k search.

    Not thread-safe: the stores that hold one guard it with their own lock.

    >>> index = BM25Index()
    >>> index.add("a", ["upload", "batch", "fifti"])
    >>> index.add("b", ["phone", "countri", "code"])
    >>> [doc for doc, _ in index.search(["phone"], k=3)]
    ['b']
    """

    def __init__(self) -> None:
        # Plain dicts of strings and numbers only: the garbage collector stops tracking them, so a
        # large index adds nothing to the pauses of a full collection.
        self._docs: dict[D, dict[str, int]] = {}
        self._length: dict[D, int] = {}
        self._postings: dict[str, dict[D, float]] = {}
        self._bound: dict[str, float] = {}  # an upper bound of each term's impacts
        self._total = 0
        self._avg = 0.0  # the average length the impacts were computed with

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc: object) -> bool:
        return doc in self._docs

    # -- maintenance -------------------------------------------------------------------------
    def add(self, doc: D, doc_terms: Iterable[str]) -> None:
        """Index `doc` with its terms, replacing what was indexed under it before."""
        if doc in self._docs:
            self.remove(doc)
        counts = dict(Counter(doc_terms))
        length = sum(counts.values())
        self._docs[doc] = counts
        self._length[doc] = length
        self._total += length
        if not self._avg or abs(self._total / len(self._docs) - self._avg) > _DRIFT * self._avg:
            self._reweight()
            return
        for term, tf in counts.items():
            impact = self._impact(tf, length)
            self._postings.setdefault(term, {})[doc] = impact
            if impact > self._bound.get(term, 0.0):
                self._bound[term] = impact

    def remove(self, doc: D) -> bool:
        """Forget `doc`; return whether it was indexed."""
        counts = self._docs.pop(doc, None)
        if counts is None:
            return False
        self._total -= self._length.pop(doc)
        for term in counts:
            posting = self._postings[term]
            del posting[doc]
            if not posting:
                del self._postings[term]
                del self._bound[term]
        return True

    def _impact(self, tf: int, length: int) -> float:
        return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / self._avg))

    def _reweight(self) -> None:
        self._avg = (self._total / len(self._docs)) if self._docs else 0.0
        self._postings = {}
        self._bound = {}
        if not self._avg:
            return
        for doc, counts in self._docs.items():
            length = self._length[doc]
            for term, tf in counts.items():
                self._postings.setdefault(term, {})[doc] = self._impact(tf, length)
        self._bound = {term: max(posting.values()) for term, posting in self._postings.items()}

    # -- search ------------------------------------------------------------------------------
    def idf(self, term: str) -> float:
        """The term's inverse document frequency in the current collection (0.0 if absent)."""
        df = len(self._postings.get(term, ()))
        return math.log(1 + (len(self._docs) - df + 0.5) / (df + 0.5)) if df else 0.0

    def score(self, doc_terms: Iterable[str], query: Sequence[str]) -> float:
        """BM25 of a document that need not be indexed, under this index's statistics."""
        counts = Counter(doc_terms)
        length = sum(counts.values())
        if not self._avg or not length:
            return 0.0
        return sum(self.idf(t) * self._impact(counts[t], length) for t in dict.fromkeys(query) if counts[t])

    def search(self, query: Sequence[str], k: int = 10, *, exclude: frozenset[D] = frozenset()) -> list[tuple[D, float]]:
        """The `k` best documents for the query terms as ``(doc, score)``, best first.

        Ties are broken by the document id; documents sharing no term with the query are never
        returned; `exclude` leaves the given documents out.
        """
        if k <= 0 or not self._docs:
            return []
        weighted = []
        for term in dict.fromkeys(query):
            posting = self._postings.get(term)
            if posting:
                idf = self.idf(term)
                weighted.append((len(posting), idf * self._bound[term], idf, posting))
        if not weighted:
            return []
        weighted.sort(key=lambda w: w[0])  # rarest (highest IDF) first
        # rest[i]: the most that terms i.. can add to a document's score
        rest = [0.0] * (len(weighted) + 1)
        for i in range(len(weighted) - 1, -1, -1):
            rest[i] = rest[i + 1] + weighted[i][1]
        want = k + len(exclude)
        acc: dict[D, float] = {}
        for i, (_, _, idf, posting) in enumerate(weighted):
            if len(acc) >= want:
                theta = heapq.nlargest(want, acc.values())[-1]
                if rest[i] < theta:  # no document outside `acc` can reach the top k any more
                    self._refine(acc, weighted, rest, i, theta)
                    break
            get = acc.get
            for doc, impact in posting.items():
                acc[doc] = get(doc, 0.0) + idf * impact
        for doc in exclude:
            acc.pop(doc, None)
        if len(acc) > k:  # keep the k-th score's ties, then order them by id
            theta = heapq.nlargest(k, acc.values())[-1]
            best = [(-s, d) for d, s in acc.items() if s >= theta]
        else:
            best = [(-s, d) for d, s in acc.items()]
        best.sort()
        return [(d, -s) for s, d in best[:k]]

    @staticmethod
    def _refine(acc: dict[D, float], weighted: list, rest: list[float], start: int, theta: float) -> None:
        """Add the remaining terms' impacts to the candidates that can still reach `theta`."""
        for i in range(start, len(weighted)):
            _, _, idf, posting = weighted[i]
            bound = rest[i]
            for doc in [d for d, s in acc.items() if s + bound < theta]:
                del acc[doc]
            for doc in acc:
                impact = posting.get(doc)
                if impact is not None:
                    acc[doc] += idf * impact
