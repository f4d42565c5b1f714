"""Both built-in stores pass the conformance suite."""

from __future__ import annotations

import pytest

from evoharness_bpe import MemoryExperienceStore, SQLiteExperienceStore
from evoharness_bpe.testing.conformance import ExperienceStoreConformance
from evoharness_bpe.testing.embedders import KeywordEmbedder


class TestMemoryStore(ExperienceStoreConformance):
    rolls_back = False  # documented on MemoryExperienceStore: transaction() only serialises

    @pytest.fixture
    def store(self):
        return MemoryExperienceStore()


class TestMemoryHybridStore(ExperienceStoreConformance):
    rolls_back = False
    hybrid = True

    @pytest.fixture
    def store(self):
        return MemoryExperienceStore(embedder=KeywordEmbedder())


class TestSQLiteFileStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self, tmp_path):
        store = SQLiteExperienceStore(tmp_path / "experience.db")
        yield store
        assert store.integrity_check() == "ok"
        store.close()


class TestSQLiteHybridStore(ExperienceStoreConformance):
    hybrid = True

    @pytest.fixture
    def store(self, tmp_path):
        store = SQLiteExperienceStore(tmp_path / "experience.db", embedder=KeywordEmbedder(), vector_search="python")
        yield store
        assert store.integrity_check() == "ok"
        store.close()


class TestSQLiteVecHybridStore(ExperienceStoreConformance):
    """Hybrid with the vectors scanned by the sqlite-vec extension instead of in process."""

    hybrid = True

    @pytest.fixture
    def store(self, tmp_path):
        from evoharness_bpe.stores.sqlite import _sqlite_vec_loads

        if not _sqlite_vec_loads():
            pytest.skip("sqlite-vec is not installed or this Python's sqlite3 was built without loadable extensions")
        store = SQLiteExperienceStore(tmp_path / "experience.db", embedder=KeywordEmbedder(), vector_search="sqlite-vec")
        yield store
        assert store.integrity_check() == "ok"
        store.close()


class TestSQLiteInMemoryStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self):
        store = SQLiteExperienceStore(":memory:")
        yield store
        store.close()


class TestSQLiteInMemoryHybridStore(ExperienceStoreConformance):
    hybrid = True

    @pytest.fixture
    def store(self):
        store = SQLiteExperienceStore(":memory:", embedder=KeywordEmbedder())
        yield store
        store.close()


class TestPostgresStore(ExperienceStoreConformance):
    @pytest.fixture
    def store(self, postgres_dsn, postgres_table):
        from evoharness_bpe.stores.postgres import PostgresExperienceStore

        store = PostgresExperienceStore(postgres_dsn, table=postgres_table)
        yield store
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store._conn().execute(f"DROP TABLE {postgres_table}_meta")
        store.close()


class TestPostgresHybridStore(ExperienceStoreConformance):
    hybrid = True

    @pytest.fixture
    def store(self, postgres_dsn, postgres_table):
        from evoharness_bpe.stores.postgres import PostgresExperienceStore

        store = PostgresExperienceStore(postgres_dsn, table=postgres_table, embedder=KeywordEmbedder())
        yield store
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store._conn().execute(f"DROP TABLE {postgres_table}_meta")
        store.close()
