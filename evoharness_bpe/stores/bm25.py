"""The one BM25 implementation of the stores that score in Python: an in-process inverted index.

`BM25Index` keeps, for every term, the documents that contain it with a precomputed impact (the
term-frequency and length part of BM25). A search returns the exact top `k` (the same documents
and scores as scoring every document) without adding up most postings: the documents that hold
two or more query terms are found by set intersections and scored exactly; every other
document holds one term, so its score is that term's IDF times its impact, and a term's
postings are read only if its best impact can still reach the `k`-th score found so far.
With numpy installed, a large index also keeps each term's postings as arrays and adds them up
in vector operations instead (same sums, in the same order, so the same results).

Scoring is Okapi BM25 with Lucene's always-positive IDF, ``ln(1 + (N - df + 0.5) / (df + 0.5))``,
``k1 = 1.2`` and ``b = 0.75``. The length normalisation uses the average document length of the
last re-weighting; the index re-weights itself when the average drifts by more than 2%.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from operator import itemgetter
from typing import Generic, TypeVar

__all__ = ["BM25Index", "K1", "B"]

K1 = 1.2
B = 0.75
_DRIFT = 0.02
# From this many documents, a search adds postings up with numpy when it is installed (below it
# the set-based search is as fast, and small stores never import numpy).
_ARRAY_MIN_DOCS = 2048
_MISSING = object()
_numpy: object = _MISSING


def _load_numpy():
    """numpy, or None when it is not installed (looked up once)."""
    global _numpy
    if _numpy is _MISSING:
        try:
            import numpy
        except ImportError:
            numpy = None
        _numpy = numpy
    return _numpy

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
        # For the numpy search: a dense slot per document, terms' postings as arrays of slots and
        # impacts (the query's terms built on the first such search, every term on the next one,
        # so that an index searched once builds little; then kept current by `add` and `remove`
        # until a re-weighting drops them), and a scratch array of scores, zero between searches.
        self._slot: dict[D, int] = {}
        self._slot_doc: list[D | None] = []
        self._free: list[int] = []
        self._arrays: dict[str, tuple] | None = None
        self._all_arrays = False
        self._scratch = None

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
        slot = self._free.pop() if self._free else len(self._slot_doc)
        if slot == len(self._slot_doc):
            self._slot_doc.append(doc)
        else:
            self._slot_doc[slot] = doc
        self._slot[doc] = slot
        if not self._avg or abs(self._total / len(self._docs) - self._avg) > _DRIFT * self._avg:
            self._reweight()
            return
        arrays = self._arrays
        for term, tf in counts.items():
            impact = self._impact(tf, length)
            self._postings.setdefault(term, {})[doc] = impact
            if impact > self._bound.get(term, 0.0):
                self._bound[term] = impact
            if arrays is not None:
                np = _numpy
                old = arrays.get(term)
                if old is not None:
                    arrays[term] = (np.append(old[0], slot), np.append(old[1], impact))
                elif self._all_arrays:
                    arrays[term] = (np.array([slot], dtype=np.intp), np.array([impact]))

    def remove(self, doc: D) -> bool:
        """Forget `doc`; return whether it was indexed."""
        counts = self._docs.pop(doc, None)
        if counts is None:
            return False
        self._total -= self._length.pop(doc)
        slot = self._slot.pop(doc)
        self._slot_doc[slot] = None
        self._free.append(slot)
        arrays = self._arrays
        for term in counts:
            posting = self._postings[term]
            del posting[doc]
            if not posting:
                del self._postings[term]
                del self._bound[term]
                if arrays is not None:
                    arrays.pop(term, None)
            elif arrays is not None and term in arrays:
                slots, impacts = arrays[term]
                keep = slots != slot
                arrays[term] = (slots[keep], impacts[keep])
        return True

    def _impact(self, tf: int, length: int) -> float:
        return tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / self._avg))

    def _reweight(self) -> None:
        self._avg = (self._total / len(self._docs)) if self._docs else 0.0
        self._postings = {}
        self._bound = {}
        self._arrays = None
        self._all_arrays = False
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
        returned; `exclude` leaves the given documents out. Each score is the sum `score`
        gives (the terms' contributions added in query order).
        """
        if k <= 0 or not self._docs:
            return []
        n = len(self._docs)
        found = []  # (term, posting, idf) of the query's indexed terms, in query order
        for term in dict.fromkeys(query):
            posting = self._postings.get(term)
            if posting:
                df = len(posting)
                found.append((term, posting, math.log(1 + (n - df + 0.5) / (df + 0.5))))
        if not found:
            return []
        if n >= _ARRAY_MIN_DOCS and len(found) > 1:
            np = _load_numpy()
            if np is not None:
                try:
                    return self._search_arrays(np, found, k, exclude)
                except BaseException:
                    self._scratch = None  # it may hold scores of the interrupted search
                    raise
        return self._search_sets(found, k, exclude)

    def _search_sets(self, found: list, k: int, exclude: frozenset[D]) -> list[tuple[D, float]]:
        # 1. The documents with two or more of the terms, found by set intersections (in C), are
        #    scored exactly, term by term in query order.
        several = _shared([posting for _, posting, _ in found]) if len(found) > 1 else set()
        several.difference_update(exclude)
        acc: dict[D, float] = dict.fromkeys(several, 0.0)
        if several:
            for _, posting, idf in found:
                for doc in posting.keys() & several:
                    acc[doc] += idf * posting[doc]
        theta = heapq.nlargest(k, acc.values())[-1] if len(acc) >= k else -math.inf
        # 2. Every other document has one term, so its score is that term's idf times its
        #    impact: a term's postings are read only if its best impact reaches the k-th best
        #    score so far, and only the documents whose impact reaches it are kept.
        bounds = sorted(((idf * self._bound[term], idf, posting) for term, posting, idf in found),
                        key=lambda f: -f[0])
        for bound, idf, posting in bounds:
            if bound < theta:
                break
            if theta == -math.inf:
                hits = [(doc, idf * impact) for doc, impact in posting.items()]
            else:
                cut = theta / idf * (1 - 1e-9)  # at or below the k-th score, whatever the rounding
                hits = [(doc, idf * impact) for doc, impact in posting.items() if impact >= cut]
            for doc, score in hits:
                if doc not in several and doc not in exclude:
                    acc[doc] = score
            if len(acc) >= k:
                theta = heapq.nlargest(k, acc.values())[-1]
        return _top(acc.items(), k, theta if len(acc) > k else -math.inf)

    def _search_arrays(self, np, found: list, k: int, exclude: frozenset[D]) -> list[tuple[D, float]]:
        """The same search, adding the postings up with numpy into a dense array of scores."""
        arrays = self._arrays
        if arrays is None:  # the first search builds its own terms' arrays
            arrays = self._arrays = {}
            wanted = [(term, posting) for term, posting, _ in found]
        elif not self._all_arrays:  # the second builds all the others
            self._all_arrays = True
            wanted = [(term, posting) for term, posting in self._postings.items() if term not in arrays]
        else:
            wanted = []
        slot = self._slot
        for term, posting in wanted:
            arrays[term] = (np.fromiter((slot[d] for d in posting), dtype=np.intp, count=len(posting)),
                            np.fromiter(posting.values(), dtype=np.float64, count=len(posting)))
        size = len(self._slot_doc)
        if self._scratch is None or len(self._scratch) < size:
            self._scratch = np.full(2 * size, 0.0)  # written now, so no search pays for first-touch page faults
        acc = self._scratch
        columns = []
        for term, _, idf in found:
            slots, impacts = arrays[term]
            acc[slots] += idf * impacts  # a term lists each slot once, so no update is lost
            columns.append(slots)
        if exclude:
            gone = [self._slot[d] for d in exclude if d in self._slot]
            acc[gone] = 0.0
        # Read each term's documents and zero them, so a document read once reads 0 after
        # (every BM25 score is positive) and the scratch array is all zero again. The rarest
        # term goes first: its documents, all distinct and fully scored, give a lower bound of
        # the k-th score that leaves few candidates to select from.
        columns.sort(key=len)
        scores = []
        for slots in columns:
            scores.append(acc[slots])
            acc[slots] = 0.0
        first = scores[0]
        slots, scores = np.concatenate(columns), np.concatenate(scores)
        bound = -np.partition(-first, k - 1)[k - 1] if len(first) >= k else 0.0
        keep = scores >= bound if bound > 0.0 else scores > 0.0  # (excluded documents read 0)
        slots, scores = slots[keep], scores[keep]
        docs = self._slot_doc
        if len(scores) <= k:
            return _top(zip([docs[s] for s in slots.tolist()], scores.tolist()), k, -math.inf)
        # (selecting among the negated scores is several times faster with many ties)
        theta = -np.partition(-scores, k - 1)[k - 1]
        above = scores > theta
        hits = list(zip([docs[s] for s in slots[above].tolist()], scores[above].tolist()))
        tied = slots[scores == theta].tolist()  # the k-th score's ties, ordered by id below
        tied = sorted(itemgetter(*tied)(docs)) if len(tied) > 1 else [docs[tied[0]]]
        theta = float(theta)
        hits += [(doc, theta) for doc in tied[: k - len(hits)]]
        return _top(hits, k, -math.inf)


def _top(hits: Iterable, k: int, theta: float) -> list:
    """The `k` best ``(doc, score)`` of `hits` with a score of at least `theta`, ties by doc."""
    best = [(-s, d) for d, s in hits if s >= theta]
    best.sort()
    return [(d, -s) for s, d in best[:k]]


def _shared(postings: list[dict]) -> set:
    """The documents that appear in at least two of the postings."""
    postings = sorted(postings, key=len)
    sizes = [len(p) for p in postings]
    # Pairwise intersections cost the smaller posting of each pair; a running union costs
    # every posting but the last once, plus an intersection with each.
    pairwise = sum(size * (len(sizes) - 1 - i) for i, size in enumerate(sizes))
    running = 2 * sum(sizes) - sizes[-1]
    out: set = set()
    if pairwise <= running:
        for i, a in enumerate(postings):
            keys = a.keys()
            for b in postings[i + 1 :]:
                out |= keys & b.keys()
    else:
        seen = set(postings[0])
        for posting in postings[1:-1]:
            out |= posting.keys() & seen
            seen.update(posting)
        out |= postings[-1].keys() & seen
    return out
