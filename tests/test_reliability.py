"""Concurrency, crash safety and tenant isolation across the built-in stores."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp

import pytest

from evoharness_bpe import SQLiteExperienceStore, Workspace, read_traces
from evoharness_bpe.testing.workloads import SHARED_LESSONS, open_store, shared_lesson, unique_lesson, write_notes

PROCESSES = 8
NOTES = 500


def run_writers(spec, namespace) -> None:
    with ProcessPoolExecutor(PROCESSES, mp_context=mp.get_context("spawn")) as pool:
        results = list(pool.map(write_notes, [spec] * PROCESSES, [namespace] * PROCESSES, range(PROCESSES), [NOTES] * PROCESSES))
    assert len(results) == PROCESSES


def check_notes(store, namespace) -> None:
    entries = store.list(namespace, limit=100_000)
    texts = {e.text for e in entries}
    missing = [(w, i) for w in range(PROCESSES) for i in range(NOTES) if i % 5 and unique_lesson(w, i) not in texts]
    assert missing == []
    shared = [e for e in entries if e.text.startswith("Shared pitfall")]
    assert len(shared) == SHARED_LESSONS, "near-duplicates written concurrently must merge into one entry each"
    assert sum(e.evidence for e in shared) == PROCESSES * NOTES // 5
    assert len(entries) == PROCESSES * NOTES * 4 // 5 + SHARED_LESSONS


@pytest.mark.slow  # eight processes
def test_eight_processes_sqlite(tmp_path) -> None:
    path = str(tmp_path / "exp.db")
    SQLiteExperienceStore(path).close()
    run_writers(("sqlite", path), ("load",))
    store = SQLiteExperienceStore(path)
    assert store.integrity_check() == "ok"
    check_notes(store, ("load",))
    store.close()


@pytest.mark.slow  # eight processes
def test_eight_processes_postgres(postgres_dsn, postgres_table) -> None:
    spec = ("postgres", postgres_dsn, postgres_table)
    open_store(spec).close()
    run_writers(spec, ("load",))
    store = open_store(spec)
    try:
        check_notes(store, ("load",))
    finally:
        store._conn().execute(f"DROP TABLE {postgres_table}")
        store.close()


CRASHING_WRITER = textwrap.dedent(
    """
    import sys
    from evoharness_bpe import SQLiteExperienceStore, TraceWriter, Workspace
    store = SQLiteExperienceStore(sys.argv[2])
    with TraceWriter(sys.argv[1]) as writer:
        for episode in range(10_000):
            ws = Workspace(f"episode {episode}", store=store, namespace=("crash",))
            for i in range(5):
                ws.act("track", {"key": f"k{i}", "value": "v" * 2000})
                ws.act("note", {"text": f"episode{episode} lesson{i} unique{episode}x{i}"})
            writer.write(ws.trace())
            print(episode, flush=True)
    """
)


def test_kill_9_mid_episode_loses_no_completed_episode(tmp_path) -> None:
    traces, db = tmp_path / "traces.jsonl", tmp_path / "exp.db"
    recovered = 0
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, "-c", CRASHING_WRITER, str(traces), str(db)], stdout=subprocess.PIPE, text=True)
        done = []
        target = random.Random(attempt).randint(3, 12)
        while len(done) < target:
            line = proc.stdout.readline()
            assert line, "the writer died on its own"
            done.append(int(line))
        time.sleep(random.Random(attempt).random() * 0.05)  # land somewhere inside the next episode
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            episodes = list(read_traces(traces))
        recovered += len(done)
        assert len(episodes) >= recovered, "an episode reported as written is missing"
        store = SQLiteExperienceStore(db)
        assert store.integrity_check() == "ok"
        store.close()
    print(f"crash safety: 3 kill -9, {recovered} episodes reported written, {len(episodes)} readable")


NAMESPACES = [("tenant-%d" % t, agent) for t in range(4) for agent in ("support", "billing")]


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres"])
def test_randomized_tenant_isolation(backend, tmp_path, request) -> None:
    if backend == "postgres":
        spec = ("postgres", request.getfixturevalue("postgres_dsn"), request.getfixturevalue("postgres_table"))
    elif backend == "sqlite":
        spec = ("sqlite", str(tmp_path / "iso.db"))
    else:
        spec = ("memory",)
    store = open_store(spec)
    rng = random.Random(1234)
    marker = {ns: f"marker{idx}q" for idx, ns in enumerate(NAMESPACES)}
    vocab = ["refund", "invoice", "retry", "batch", "email", "phone", "escalate", "limit"]
    spaces = {ns: Workspace("serve customers", subgoals=["refund invoice"], store=store, namespace=ns) for ns in NAMESPACES}
    ids = {ns: [] for ns in NAMESPACES}
    attempts = 0
    try:
        for _ in range(300):
            ns = rng.choice(NAMESPACES)
            ws = spaces[ns]
            words = " ".join(rng.sample(vocab, 3))
            op = rng.random()
            if op < 0.35:
                result = ws.act("note", {"text": f"{marker[ns]} {words} {rng.random()}"})
                ids[ns].extend(ws.state.experience.noted[-1:])
            elif op < 0.55:
                other = rng.choice([o for o in NAMESPACES if o != ns and ids[o]] or [ns])
                if ids[other] and other != ns:  # try to supersede another tenant's entry
                    result = ws.act("note", {"text": f"{marker[ns]} takeover", "supersedes": rng.choice(ids[other])})
                    assert not result.ok
                    attempts += 1
            else:
                query = f"{words} " + " ".join(marker.values())  # a query naming every tenant's marker
                result = ws.act("recall", {"query": query, "k": 10})
                answer = result.content.replace(query, "")  # the reply echoes the query itself
                foreign = [m for o, m in marker.items() if o != ns and m in answer]
                assert foreign == [], f"recall leaked {foreign}"
                attempts += 1
                hits = store.search(ns, query, k=50)
                assert all(marker[ns] in h.entry.text for h in hits)
                ws._hint_cache = None
                dash = ws.dashboard(record=False)
                assert not [m for o, m in marker.items() if o != ns and m in dash]
                for other in NAMESPACES:
                    if other != ns and ids[other]:
                        assert store.get(ns, rng.choice(ids[other])) is None
                        attempts += 1
            assert all(marker[ns] in e.text for e in store.list(ns, limit=1000))
        assert attempts > 100
        print(f"isolation[{backend}]: {attempts} cross-tenant attempts, 0 leaks")
    finally:
        if backend == "postgres":
            store._conn().execute(f"DROP TABLE {spec[2]}")
        store.close()
