"""Stores written before the Snowball text processing are re-indexed when opened."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from evoharness_bpe import ExperienceEntry, SQLiteExperienceStore
from evoharness_bpe.text import TEXT_VERSION
from evoharness_bpe.testing.embedders import KeywordEmbedder

# Written by the SQLite store of commit 743a37c (FTS5 over the old suffix-stripping stems), whose
# search for "phone" found none of the entries below.
MAIN_DB = Path(__file__).parent / "data" / "sqlite-store-main-743a37c.db"
CRM = ("acme", "crm")


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "experience.db"
    shutil.copy(MAIN_DB, path)
    return path


def test_a_store_from_main_is_reindexed_on_open(old_file: Path) -> None:
    conn = sqlite3.connect(old_file)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'entries_fts'").fetchone()[0] == 1
    conn.close()

    store = SQLiteExperienceStore(old_file)
    assert [h.entry.id for h in store.search(CRM, "phone")] == ["phones"]
    assert [h.entry.id for h in store.search(CRM, "retry")] == ["retries"]
    assert [h.entry.id for h in store.search(CRM, "status process")] == ["statuses"]
    assert [h.entry.id for h in store.search(("other",), "phone")] == ["other-phones"]  # namespaces still apart
    got = store.get(CRM, "phones")
    assert got is not None and got.tags == ["crm"] and got.updated == 1.0  # bodies untouched
    assert store.count(CRM) == 3 and store.integrity_check() == "ok"
    store.add(CRM, ExperienceEntry(text="New phone lines need approval"))  # writes work after migration
    assert len(store.search(CRM, "phones")) == 2
    store.close()

    conn = sqlite3.connect(old_file)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "entries_fts" not in names and "entries_vocab" not in names and "entries_ai" not in names
    assert conn.execute("SELECT value FROM meta WHERE key = 'text_version'").fetchone() == (TEXT_VERSION,)
    assert conn.execute("SELECT terms FROM entries WHERE id = 'phones'").fetchone()[0].split() == [
        "custom", "phone", "must", "carri", "countri", "code", "crm"]
    conn.close()


def test_a_changed_text_version_reindexes(old_file: Path) -> None:
    SQLiteExperienceStore(old_file).close()
    conn = sqlite3.connect(old_file)
    conn.execute("UPDATE meta SET value = 'some-older-version' WHERE key = 'text_version'")
    conn.execute("UPDATE entries SET terms = 'stale'")
    conn.commit()
    conn.close()
    store = SQLiteExperienceStore(old_file)
    assert [h.entry.id for h in store.search(CRM, "phones")] == ["phones"]
    assert store.search(CRM, "stale") == []
    store.close()


def test_an_embedder_backfills_vectors_of_old_entries(old_file: Path) -> None:
    embedder = KeywordEmbedder()
    store = SQLiteExperienceStore(old_file, embedder=embedder)
    assert embedder.calls >= 4  # every old entry was embedded once, on open
    hits = store.search(CRM, "telephone numbers lacking a dialling prefix")  # no word in common with the entry
    assert [h.entry.id for h in hits] == ["phones"]
    store.close()
    calls = embedder.calls
    SQLiteExperienceStore(old_file, embedder=embedder).close()
    assert embedder.calls == calls + 1  # reopening embeds only the dimension probe


def test_other_processes_writes_reach_the_index(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    reader, writer = SQLiteExperienceStore(path), SQLiteExperienceStore(path)
    first = writer.add(CRM, ExperienceEntry(text="Phones need a country code"))
    assert [h.entry.id for h in reader.search(CRM, "phone")] == [first.id]  # builds the reader's index
    second = writer.add(CRM, ExperienceEntry(text="Phone lines close at six"))
    edited = first.model_copy(update={"text": "Faxes need a country code"})
    writer.update(CRM, edited)
    assert [h.entry.id for h in reader.search(CRM, "phone")] == [second.id]
    assert [h.entry.id for h in reader.search(CRM, "fax")] == [first.id]
    writer.delete(CRM, second.id)
    assert reader.search(CRM, "phone") == []
    reader.close()
    writer.close()


def test_a_rolled_back_write_leaves_no_trace_in_the_index(tmp_path: Path) -> None:
    store = SQLiteExperienceStore(tmp_path / "x.db")
    kept = store.add(CRM, ExperienceEntry(text="Phones need a country code"))
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.add(CRM, ExperienceEntry(text="Phone calls after six are refused"))
            assert len(store.search(CRM, "phone")) == 2  # the transaction sees its own write
            raise RuntimeError
    assert [h.entry.id for h in store.search(CRM, "phone")] == [kept.id]
    later = store.add(CRM, ExperienceEntry(text="Phone support moved to chat"))  # reuses the change numbers
    assert {h.entry.id for h in store.search(CRM, "phone")} == {kept.id, later.id}
    store.close()


def test_a_postgres_table_from_main_is_reindexed_on_open(postgres_dsn: str, postgres_table: str) -> None:
    from evoharness_bpe.stores.postgres import PostgresExperienceStore

    psycopg = pytest.importorskip("psycopg")
    entry = ExperienceEntry(id="phones", text="Customer phones must carry a country code", updated=1.0)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the table as commit 743a37c wrote it
        conn.execute(
            f"CREATE TABLE {postgres_table} (id TEXT PRIMARY KEY, ns TEXT NOT NULL, terms TEXT NOT NULL, "
            "updated DOUBLE PRECISION NOT NULL, body TEXT NOT NULL, "
            "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED)"
        )
        conn.execute(
            f"INSERT INTO {postgres_table} VALUES (%s, %s, %s, %s, %s)",
            ("phones", "acme/crm", "custom phon must carry country code", 1.0, entry.model_dump_json()),
        )
    store = PostgresExperienceStore(postgres_dsn, table=postgres_table)
    try:
        assert [h.entry.id for h in store.search(CRM, "phone")] == ["phones"]
        assert store.get(CRM, "phones") == entry
        version = store._conn().execute(f"SELECT value FROM {postgres_table}_meta WHERE key = 'text_version'")
        assert version.fetchone() == (TEXT_VERSION,)
    finally:
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store._conn().execute(f"DROP TABLE {postgres_table}_meta")
        store.close()
