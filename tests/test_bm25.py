"""`BM25Index.search` returns exactly what scoring every document returns, on both of its paths."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evoharness_bpe import ExperienceEntry, MemoryExperienceStore, SQLiteExperienceStore
from evoharness_bpe.stores import bm25
from evoharness_bpe.stores.bm25 import BM25Index
from evoharness_bpe.testing.conformance import ExperienceStoreConformance
from evoharness_bpe.testing.embedders import KeywordEmbedder


def exhaustive(index: BM25Index, query: list[str], k: int, exclude: frozenset = frozenset()) -> list:
    """Score every document (`BM25Index.score`, terms in query order) and sort."""
    scored = []
    for doc, counts in index._docs.items():
        if doc in exclude or not any(t in counts for t in query):
            continue
        doc_terms = [t for t, tf in counts.items() for _ in range(tf)]
        scored.append((-index.score(doc_terms, query), doc))
    scored.sort()
    return [(doc, -score) for score, doc in scored[:k]]


@pytest.fixture(params=["sets", "arrays"])
def search_path(request, monkeypatch):
    """Run a test on the set-based search, then on the numpy one (the same for every example)."""
    if request.param == "arrays":
        pytest.importorskip("numpy")
        monkeypatch.setattr(bm25, "_ARRAY_MIN_DOCS", 0)
    else:
        monkeypatch.setattr(bm25, "_ARRAY_MIN_DOCS", 10**12)
    return request.param


_corpus = st.lists(
    st.lists(st.integers(0, 11), min_size=1, max_size=14),  # a document: term numbers, repeats allowed
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    corpus=_corpus,
    removed=st.sets(st.integers(0, 59), max_size=20),
    readded=st.sets(st.integers(0, 59), max_size=10),
    queries=st.lists(
        st.tuples(st.lists(st.integers(0, 13), min_size=1, max_size=6), st.integers(1, 20),
                  st.sets(st.integers(0, 59), max_size=3)),
        min_size=1,
        max_size=5,
    ),
)
def test_search_equals_exhaustive_scoring(search_path, corpus, removed, readded, queries) -> None:
    index: BM25Index[int] = BM25Index()

    def check() -> None:
        for words, k, exclude in queries:
            query = [f"t{w}" for w in words]  # t12 only in documents added back, t13 never
            assert index.search(query, k, exclude=frozenset(exclude)) == exhaustive(index, query, k, frozenset(exclude))

    for doc, words in enumerate(corpus):
        index.add(doc, [f"t{w}" for w in words])
    check()
    for doc in removed:  # frees slots that the documents added back reuse
        index.remove(doc)
    check()
    for doc in readded:
        if doc < len(corpus):
            index.add(doc, [f"t{w}" for w in reversed(corpus[doc])] + ["t0", "t12"])
    check()


def test_search_equals_exhaustive_scoring_on_zipf_corpora(search_path) -> None:
    """Larger corpora with Zipf-distributed words and lengths, the shape the benchmark uses."""
    rng = random.Random(3)
    for trial in range(6):
        vocab = [f"w{i}" for i in range(rng.choice([20, 200, 2000]))]
        weights = [1 / (r + 10) for r in range(len(vocab))]
        index: BM25Index[int] = BM25Index()
        for doc in range(rng.choice([300, 3000])):
            index.add(doc, rng.choices(vocab, weights=weights, k=rng.randint(3, 30)))
        for _ in range(40):
            query = rng.choices(vocab, weights=weights, k=rng.randint(1, 8))
            k = rng.choice([1, 3, 16, 50])
            assert index.search(query, k) == exhaustive(index, query, k)
        for doc in rng.sample(range(len(index)), 50):  # changes after the arrays were built
            index.remove(doc)
        index.add(10**6, vocab[:5])
        query = vocab[:3]
        assert index.search(query, 16) == exhaustive(index, query, 16)


def test_changes_after_searches_keep_the_arrays_exact(search_path) -> None:
    """Adds and removes between searches, with lessons of one length so that nothing re-weights."""
    index: BM25Index[int] = BM25Index()
    for doc in range(300):
        index.add(doc, [f"w{doc % 7}", f"w{doc % 11}", f"w{doc % 13}"])
    for query in (["w1", "w2"], ["w3", "w4", "w5"]):  # the first search, then the second
        assert index.search(query, 5) == exhaustive(index, query, 5)
    index.add(1000, ["new", "w1", "w2"])  # a term no search has seen
    index.add(1001, ["new", "w3", "w9"])
    index.remove(5)
    index.remove(1001)
    for query in (["new", "w1"], ["w1", "w2", "w5"], ["new", "w9", "w3"]):
        assert index.search(query, 4) == exhaustive(index, query, 4)


def test_excluded_documents_are_left_out_even_when_they_hold_the_rarest_term(search_path) -> None:
    index: BM25Index[int] = BM25Index()
    for doc in range(40):
        index.add(doc, ["common"] + (["rare"] if doc < 3 else []) + ["filler"] * (doc % 4))
    for k in (1, 2, 3, 10):
        for exclude in (frozenset({0, 1, 2}), frozenset(range(40)), frozenset({5})):
            got = index.search(["rare", "common"], k, exclude=exclude)
            assert got == exhaustive(index, ["rare", "common"], k, exclude)


def test_another_connection_s_changes_replace_what_a_store_has_read(search_path, tmp_path) -> None:
    """A store keeps the bodies it returned; another process's update or delete still shows."""
    ns = ("t", "a")
    ours = SQLiteExperienceStore(tmp_path / "x.db")
    theirs = SQLiteExperienceStore(tmp_path / "x.db")  # stands for another process: its own connections
    first = ours.add(ns, ExperienceEntry(text="phone numbers need a country code"))
    second = ours.add(ns, ExperienceEntry(text="phone calls are retried twice"))
    assert {h.entry.text for h in ours.search(ns, "phone", k=3)} == {first.text, second.text}
    first.text = "phone numbers need the country code +44"
    theirs.update(ns, first)
    theirs.delete(ns, second.id)
    assert [h.entry.text for h in ours.search(ns, "phone", k=3)] == [first.text]
    with pytest.raises(RuntimeError):
        with ours.transaction():
            first.text = "phone numbers are written without spaces"
            ours.update(ns, first)
            assert [h.entry.text for h in ours.search(ns, "phone", k=3)] == [first.text]
            raise RuntimeError("roll back")
    assert [h.entry.text for h in ours.search(ns, "phone", k=3)] == ["phone numbers need the country code +44"]
    ours.close()
    theirs.close()


class TestSQLiteStoreOnTheArraySearch(ExperienceStoreConformance):
    """The conformance suite with every search of two or more terms on the numpy path."""

    @pytest.fixture
    def store(self, tmp_path, monkeypatch):
        pytest.importorskip("numpy")
        monkeypatch.setattr(bm25, "_ARRAY_MIN_DOCS", 0)
        store = SQLiteExperienceStore(tmp_path / "experience.db")
        yield store
        store.close()


class TestMemoryHybridStoreOnTheArraySearch(ExperienceStoreConformance):
    rolls_back = False
    hybrid = True

    @pytest.fixture
    def store(self, monkeypatch):
        pytest.importorskip("numpy")
        monkeypatch.setattr(bm25, "_ARRAY_MIN_DOCS", 0)
        return MemoryExperienceStore(embedder=KeywordEmbedder())
