"""Recall quality: recall@3 and MRR of BM25 and hybrid recall on a hand-labelled set.

    python bench/recall_quality.py [--embedder minilm|keyword] [--no-tune]

The set (bench/data/recall_quality.txt) holds 315 lessons from the built-in domains (crm-migration,
compliance-review, ALFWorld, TextWorld) and general agent work, and 303 queries of three classes:
morphological variants of a lesson's words, paraphrases that share few or no words with it, and
distractor queries whose words also appear in lessons that mean something else. Figures are
printed for the test split; the fusion settings are chosen on the dev split (a quarter of the
topics) and the default settings are printed beside them. The baseline is the suffix-stripping
stemmer the project used before Snowball, measured in the same run over the same BM25 index.
"""

from __future__ import annotations

import argparse
import itertools
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from evoharness_bpe import ExperienceEntry, MemoryExperienceStore
from evoharness_bpe.embeddings import Fusion, as_embedder, default_embedder
from evoharness_bpe.stores.bm25 import BM25Index
from evoharness_bpe.stores.vectors import VectorIndex
from evoharness_bpe.text import terms

DATA = Path(__file__).parent / "data" / "recall_quality.txt"
CLASSES = {"m": "morphological", "p": "paraphrase", "d": "distractor"}
NS = ("bench", "quality")


@dataclass(frozen=True)
class Query:
    text: str
    kind: str
    relevant: str
    split: str


def load(path: Path = DATA) -> tuple[dict[str, str], list[Query]]:
    """The lessons (id → text) and the labelled queries of the set."""
    lessons: dict[str, str] = {}
    queries: list[Query] = []
    topic = -1
    domain = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("# "):
            continue
        if line.startswith("## "):
            topic += 1
            domain = line[3:].strip()
            continue
        head, text = line.split(":", 1)
        if re.fullmatch(r"[abc]", head):
            lessons[f"{domain}-{topic:03d}{head}"] = text.strip()
        else:
            kind, target = head.split(">")
            split = "dev" if topic % 4 == 0 else "test"
            queries.append(Query(text.strip(), CLASSES[kind], f"{domain}-{topic:03d}{target}", split))
    return lessons, queries


def scores(ranked: list[list[str]], queries: list[Query]) -> dict[str, tuple[float, float, int]]:
    """recall@3 and MRR (over the top 10) per query class and overall."""
    out = {}
    for kind in [*CLASSES.values(), "all"]:
        rows = [(r, q) for r, q in zip(ranked, queries) if kind in ("all", q.kind)]
        hit = [q.relevant in r[:3] for r, q in rows]
        rr = [1 / (r.index(q.relevant) + 1) if q.relevant in r[:10] else 0.0 for r, q in rows]
        out[kind] = (sum(hit) / len(rows), sum(rr) / len(rows), len(rows))
    return out


# -- the baseline: the project's term extraction before Snowball (commit 743a37c) -------------
_OLD_STOP = frozenset(
    "a an and are as at be been but by do does for from has have if in into is it its of on or so "
    "than that the their then there these this those to was were will with when which while".split()
)
_OLD_SUFFIXES = ("ations", "ation", "ingly", "ings", "ing", "edly", "ies", "ied", "es", "ed", "ly", "s")


def _old_terms(text: str) -> list[str]:
    def stem(word: str) -> str:
        for suffix in _OLD_SUFFIXES:
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                return word[: -len(suffix)]
        return word

    return [stem(w) for w in re.findall(r"[^\W_]+", text.lower()) if w not in _OLD_STOP]


def bm25_ranking(lessons: dict[str, str], queries: list[Query], extract: Callable[[str], list[str]]) -> list[list[str]]:
    index: BM25Index[str] = BM25Index()
    for lesson_id, text in lessons.items():
        index.add(lesson_id, extract(text))
    return [[d for d, _ in index.search(list(dict.fromkeys(extract(q.text))), 10)] for q in queries]


class _Cached:
    """An embedder whose vectors are computed once per text (the stores below share it)."""

    def __init__(self, inner: object) -> None:
        self.inner = as_embedder(inner)
        self.cache: dict[str, list[float]] = {}
        self.query_ms: list[float] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in texts if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.inner.embed_documents(missing)))
        return [self.cache[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        key = "\0query\0" + text
        if key not in self.cache:
            t = time.perf_counter()
            self.cache[key] = self.inner.embed_query(text)
            self.query_ms.append((time.perf_counter() - t) * 1000)
        return self.cache[key]


def store_ranking(lessons: dict[str, str], queries: list[Query], embedder: object | None, fusion: Fusion) -> list[list[str]]:
    store = MemoryExperienceStore(embedder=embedder, fusion=fusion)
    for lesson_id, text in lessons.items():
        store.add(NS, ExperienceEntry(id=lesson_id, text=text))
    return [[h.entry.id for h in store.search(NS, q.text, k=10)] for q in queries]


def vector_ranking(lessons: dict[str, str], queries: list[Query], embedder: _Cached) -> list[list[str]]:
    index: VectorIndex[str] = VectorIndex()
    for lesson_id, vector in zip(lessons, embedder.embed_documents(list(lessons.values()))):
        index.add(lesson_id, vector)
    return [[d for d, _ in index.search(embedder.embed_query(q.text), 10, -1.0)] for q in queries]


def tune(lessons: dict[str, str], dev: list[Query], embedder: object) -> tuple[Fusion, float, float]:
    """Fusion settings chosen on the dev queries (the mean of recall@3 and MRR decides).

    Among the settings within 0.01 of the best, the one with the highest similarity floor wins:
    a floor that loses nothing on dev keeps unrelated lessons out of recall.
    """
    results = []
    for rrf_k, weight, floor in itertools.product([1, 5, 10, 30, 60], [1.0, 1.5, 2.0, 3.0, 5.0, 8.0], [0.1, 0.2, 0.3, 0.4]):
        fusion = Fusion(rrf_k=rrf_k, semantic_weight=weight, min_similarity=floor)
        s = scores(store_ranking(lessons, dev, embedder, fusion), dev)["all"]
        results.append(((s[0] + s[1]) / 2, fusion))
    top = max(value for value, _ in results)
    value, chosen = max((r for r in results if r[0] >= top - 0.01),
                        key=lambda r: (r[1].min_similarity, r[0], -r[1].semantic_weight))
    return chosen, value, top


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", choices=["minilm", "keyword"], default="minilm",
                        help="minilm: all-MiniLM-L6-v2 (the [embeddings] extra); keyword: the test double")
    parser.add_argument("--no-tune", action="store_true", help="skip the search over fusion settings on dev")
    args = parser.parse_args()
    lessons, queries = load()
    dev = [q for q in queries if q.split == "dev"]
    test = [q for q in queries if q.split == "test"]
    print(f"{len(lessons)} lessons; {len(queries)} queries ({len(dev)} dev, {len(test)} test): "
          + ", ".join(f"{sum(q.kind == c for q in queries)} {c}" for c in CLASSES.values()))

    if args.embedder == "minilm":
        t = time.perf_counter()
        inner = default_embedder()
        print(f"all-MiniLM-L6-v2 loaded in {time.perf_counter() - t:.1f} s")
    else:
        from evoharness_bpe.testing.embedders import KeywordEmbedder

        inner = KeywordEmbedder()
    embedder = _Cached(inner)
    t = time.perf_counter()
    embedder.embed_documents(list(lessons.values()))
    embed_s = time.perf_counter() - t

    rows = [
        ("BM25, suffix stripping (before; baseline)", bm25_ranking(lessons, test, _old_terms)),
        ("BM25, Snowball (default recall)", bm25_ranking(lessons, test, terms)),
        ("vectors alone (cosine)", vector_ranking(lessons, test, embedder)),
        ("hybrid, standard RRF (k=60, weight 1, min sim 0.3)",
         store_ranking(lessons, test, embedder, Fusion(rrf_k=60, semantic_weight=1.0, min_similarity=0.3))),
        (f"hybrid, the store's default Fusion() (k={Fusion().rrf_k}, weight {Fusion().semantic_weight}, min sim "
         f"{Fusion().min_similarity})", store_ranking(lessons, test, embedder, Fusion())),
    ]
    if not args.no_tune:
        tuned, value, top = tune(lessons, dev, embedder)
        rows.append((f"hybrid, tuned on dev (k={tuned.rrf_k}, weight {tuned.semantic_weight}, min sim "
                     f"{tuned.min_similarity})", store_ranking(lessons, test, embedder, tuned)))
    header = f"{'test split':<72}" + "".join(f"{c[:5] + ' r@3':>11}{'MRR':>6}" for c in [*CLASSES.values(), "all"])
    print(header)
    for name, ranked in rows:
        s = scores(ranked, test)
        print(f"{name:<72}" + "".join(f"{s[c][0]:>11.2f}{s[c][1]:>6.2f}" for c in [*CLASSES.values(), "all"]))
    if not args.no_tune:
        print(f"(tuned settings: dev mean of recall@3 and MRR {value:.3f}; the best setting on dev {top:.3f})")
    q_ms = embedder.query_ms
    print(f"embedding the {len(lessons)} lessons: {embed_s:.1f} s; one query: "
          f"{statistics.median(q_ms):.1f} ms p50 over {len(q_ms)} queries ({args.embedder})")


if __name__ == "__main__":
    main()
