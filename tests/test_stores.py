"""Both built-in stores pass the conformance suite."""

from __future__ import annotations

import pytest

from evoharness_bpe import MemoryExperienceStore, SQLiteExperienceStore
from evoharness_bpe.testing.conformance import ExperienceStoreConformance


class TestMemoryStore(ExperienceStoreConformance):
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
