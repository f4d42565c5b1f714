"""`LangGraphExperienceStore` passes the core conformance suite on InMemoryStore and SqliteStore."""

from __future__ import annotations

import sqlite3
import zlib

import pytest
from evoharness_bpe.exceptions import UserError
from evoharness_bpe.stores.base import ExperienceEntry
from evoharness_bpe.text import terms
from evoharness_bpe.testing.conformance import ExperienceStoreConformance
from evoharness_bpe.testing.embedders import KeywordEmbedder
from evoharness_bpe_langgraph.store import LangGraphExperienceStore, decode_label, encode_label
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore


class TestOnInMemoryStore(ExperienceStoreConformance):
    rolls_back = False  # documented on LangGraphExperienceStore: BaseStore has no transactions

    @pytest.fixture
    def store(self):
        yield LangGraphExperienceStore(InMemoryStore())


class TestOnSqliteStore(ExperienceStoreConformance):
    rolls_back = False  # documented on LangGraphExperienceStore: BaseStore has no transactions

    @pytest.fixture
    def store(self, tmp_path):
        conn = sqlite3.connect(tmp_path / "store.db", check_same_thread=False, isolation_level=None)
        base = SqliteStore(conn)
        base.setup()
        yield LangGraphExperienceStore(base)
        conn.close()


def _embed(texts: list[str]) -> list[list[float]]:
    """A deterministic bag-of-words embedding: each term hashed into one of 64 dimensions."""
    out = []
    for text in texts:
        vec = [0.0] * 64
        for term in terms(text):
            vec[zlib.crc32(term.encode()) % 64] += 1.0
        out.append(vec)
    return out


class TestOnInMemoryStoreWithIndex(ExperienceStoreConformance):
    """With an embedding index the store's semantic ranking is fused with BM25 (hybrid recall)."""

    rolls_back = False  # documented on LangGraphExperienceStore: BaseStore has no transactions
    hybrid = True

    @pytest.fixture
    def store(self):
        embedder = KeywordEmbedder()
        yield LangGraphExperienceStore(InMemoryStore(index={"dims": embedder.dimensions, "embed": embedder, "fields": ["text"]}))


class TestOnSqliteStoreWithIndex(ExperienceStoreConformance):
    """LangGraph's SqliteStore with a vector index (sqlite-vec) under the hybrid contract."""

    rolls_back = False  # documented on LangGraphExperienceStore: BaseStore has no transactions
    hybrid = True

    @pytest.fixture
    def store(self, tmp_path):
        conn = sqlite3.connect(tmp_path / "store.db", check_same_thread=False, isolation_level=None)
        if not hasattr(conn, "enable_load_extension"):
            conn.close()
            pytest.skip("this Python's sqlite3 was built without loadable extensions (sqlite-vec)")
        embedder = KeywordEmbedder()
        base = SqliteStore(conn, index={"dims": embedder.dimensions, "embed": embedder, "fields": ["text"]})
        base.setup()
        yield LangGraphExperienceStore(base)
        conn.close()


def test_semantic_search_uses_the_index() -> None:
    store = LangGraphExperienceStore(InMemoryStore(index={"dims": 64, "embed": _embed, "fields": ["text"]}))
    assert store._semantic
    best = store.add(("a",), ExperienceEntry(text="rate limit reached: wait before retry"))
    store.add(("a",), ExperienceEntry(text="rate of the currency exchange"))
    hits = store.search(("a",), "retry after rate limit")
    assert hits[0].entry.id == best.id and hits[0].score > hits[-1].score


def test_labels_round_trip_dots_and_percents() -> None:
    for seg in ["a.b", "50%", "%2E", "x..y%", "plain"]:
        assert "." not in encode_label(seg)
        assert decode_label(encode_label(seg)) == seg


def test_dotted_namespaces_stay_apart() -> None:
    store = LangGraphExperienceStore(InMemoryStore())
    dotted = store.add(("user.one", "crm"), ExperienceEntry(text="dotted tenant lesson"))
    store.add(("user%2Eone", "crm"), ExperienceEntry(text="percent tenant lesson"))
    assert [h.entry.id for h in store.search(("user.one", "crm"), "tenant lesson")] == [dotted.id]


def test_entries_sit_next_to_application_data() -> None:
    base = InMemoryStore()
    base.put(("evoharness", "acme", "crm", "entries", "deeper"), "x", {"text": "not an entry"})
    store = LangGraphExperienceStore(base)
    entry = store.add(("acme", "crm"), ExperienceEntry(text="real entry"))
    assert [e.id for e in store.list(("acme", "crm"))] == [entry.id]
    assert store.count(("acme", "crm")) == 1


def test_rejects_a_non_store() -> None:
    with pytest.raises(UserError):
        LangGraphExperienceStore({})  # type: ignore[arg-type]
