"""Several processes writing notes to one SQLite file lose nothing."""

from __future__ import annotations

import multiprocessing as mp

from evoharness_bpe import SQLiteExperienceStore, Workspace

NS = ("shared",)


def _write_notes(path: str, worker: int, count: int) -> None:
    store = SQLiteExperienceStore(path)
    ws = Workspace("write notes", store=store, namespace=NS)
    for i in range(count):
        # unique notes, plus one near-duplicate that every worker repeats
        assert ws.act("note", {"text": f"worker{worker} distinct lesson number{i} token{worker}x{i}"}).ok
        assert ws.act("note", {"text": "Always check the retry-after header before resending"}).ok
    store.close()


def test_two_processes_lose_nothing(tmp_path) -> None:
    path = str(tmp_path / "exp.db")
    SQLiteExperienceStore(path).close()  # create the schema once
    count = 40
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write_notes, args=(path, w, count)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    store = SQLiteExperienceStore(path)
    assert store.integrity_check() == "ok"
    entries = store.list(NS, limit=10_000)
    texts = [e.text for e in entries]
    for w in range(2):
        for i in range(count):
            assert f"worker{w} distinct lesson number{i} token{w}x{i}" in texts
    shared = [e for e in entries if "retry-after" in e.text]
    assert len(shared) == 1 and shared[0].evidence == 2 * count
    assert len(entries) == 2 * count + 1
