"""Both built-in stores pass the conformance suite."""

from __future__ import annotations

import pytest

from evoharness_bpe import MemoryExperienceStore, SQLiteExperienceStore
from evoharness_bpe.testing.conformance import ExperienceStoreConformance


class TestMemoryStore(ExperienceStoreConformance):
    rolls_back = False  # documented on MemoryExperienceStore: transaction() only serialises

    @pytest.fixture
    def store(self):
        return MemoryExperienceStore()


class TestSQLiteFileStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self, tmp_path):
        store = SQLiteExperienceStore(tmp_path / "experience.db")
        yield store
        assert store.integrity_check() == "ok"
        store.close()


class TestSQLiteInMemoryStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self):
        store = SQLiteExperienceStore(":memory:")
        yield store
        store.close()


class TestPostgresStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self, postgres_dsn, postgres_table):
        from evoharness_bpe.stores.postgres import PostgresExperienceStore

        store = PostgresExperienceStore(postgres_dsn, table=postgres_table)
        yield store
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store.close()


def test_sqlite_common_terms_only_rerank(tmp_path) -> None:
    """In a large namespace a very common query term re-ranks rather than drives the search."""
    from evoharness_bpe import ExperienceEntry

    path = tmp_path / "big.db"
    fast = SQLiteExperienceStore(path, common_term_fraction=0.02)
    ns = ("big",)
    with fast.transaction():
        for i in range(3000):
            words = ["upload"]  # in every entry: common
            if i % 100 == 0:
                words.append("checksum")  # rare
            if i % 3 == 0:
                words.append("upload")
            fast.add(ns, ExperienceEntry(text=" ".join(words) + f" filler{i}"))
    exact = SQLiteExperienceStore(path, common_term_fraction=1.0)
    got = [h.entry.text for h in fast.search(ns, "upload checksum", k=5)]
    want = [h.entry.text for h in exact.search(ns, "upload checksum", k=5)]
    assert all("checksum" in text for text in got)
    assert set(got) == set(want)  # same entries; scores come from two BM25 implementations
    assert any(key.startswith("n") for key in fast._df_cache)  # the split path was taken
    assert fast.search(ns, "upload", k=3)  # a query of common terms alone still answers
    fast.close()
    exact.close()
