"""Store connections have a lifecycle: one thread per request never leaks files or server connections."""

from __future__ import annotations

import gc
import os
import threading
import time
import uuid

import pytest

from evoharness_bpe import SQLiteExperienceStore, Workspace

THREADS = 300
AT_ONCE = 10

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def one_request(store, i: int, errors: list) -> None:
    try:
        ws = Workspace(f"request {i}", store=store, namespace=("svc",))
        name, args = ("note", {"text": f"{uuid.uuid4().hex} {uuid.uuid4().hex} {uuid.uuid4().hex} invoices"}) if i % 3 == 0 else ("recall", {"query": "invoices"})
        result = ws.act(name, args)
        assert result.ok, result.content
    except BaseException as exc:  # noqa: BLE001 - collected for the main thread
        errors.append(exc)


def run_requests(store, sample) -> list[int]:
    """`THREADS` requests, each in a new thread, `AT_ONCE` at a time; `sample()` after each batch."""
    errors: list[BaseException] = []
    samples = []
    for start in range(0, THREADS, AT_ONCE):
        batch = [threading.Thread(target=one_request, args=(store, i, errors)) for i in range(start, start + AT_ONCE)]
        for t in batch:
            t.start()
        for t in batch:
            t.join()
        samples.append(sample())
    assert not errors, errors[:3]
    return samples


def test_sqlite_connections_of_finished_threads_are_closed(tmp_path) -> None:
    gc.collect()
    base = open_fds()
    store = SQLiteExperienceStore(tmp_path / "experience.db")
    samples = run_requests(store, lambda: (gc.collect(), open_fds())[1])
    # Live connections: at most one per running thread (SQLite keeps a closed connection's file
    # open for reuse while another connection holds a lock on it, so not all go at once).
    assert max(samples) <= base + 3 * AT_ONCE + 5, samples
    assert store.count(("svc",)) == THREADS // 3
    assert store.integrity_check() == "ok"
    store.close()
    gc.collect()
    assert open_fds() <= base


def test_postgres_server_connections_are_bounded(postgres_dsn, postgres_table) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    from evoharness_bpe.stores.postgres import PostgresExperienceStore

    app = "evoharness-test-" + uuid.uuid4().hex[:8]
    store = PostgresExperienceStore(make_conninfo(postgres_dsn, application_name=app), table=postgres_table, max_connections=4)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:

        def server_connections() -> int:
            return admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]

        samples = run_requests(store, server_connections)
        assert max(samples) <= 4, samples
        assert store.count(("svc",)) == THREADS // 3
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store.close()
        for _ in range(100):  # a backend leaves pg_stat_activity shortly after its client
            if server_connections() == 0:
                break
            time.sleep(0.05)
        assert server_connections() == 0
