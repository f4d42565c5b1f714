"""Workloads for concurrency tests and load benchmarks, importable by child processes."""

from __future__ import annotations

import time
from typing import Any

from ..stores.base import ExperienceStore

__all__ = ["open_store", "shared_lesson", "unique_lesson", "write_notes"]

SHARED_LESSONS = 10


def open_store(spec: tuple[str, ...]) -> ExperienceStore:
    """A store from a picklable spec: ("memory",), ("sqlite", path) or ("postgres", dsn, table)."""
    kind = spec[0]
    if kind == "sqlite":
        from ..stores.sqlite import SQLiteExperienceStore

        return SQLiteExperienceStore(spec[1])
    if kind == "postgres":
        from ..stores.postgres import PostgresExperienceStore

        return PostgresExperienceStore(spec[1], table=spec[2])
    if kind == "memory":
        from ..stores.memory import MemoryExperienceStore

        return MemoryExperienceStore()
    raise ValueError(f"unknown store spec {spec!r}")


def unique_lesson(worker: int, i: int) -> str:
    return f"worker{worker} lesson{i} about record{worker}x{i} and field{i % 97}w{worker}"


def shared_lesson(n: int) -> str:
    """Lessons every worker writes, with small variations: they must merge into one entry each."""
    return "Shared pitfall: " + _SHARED[n]


_SHARED = [
    "wait for the retry-after header when the target answers 429",
    "phone numbers without a country code are rejected by the schema",
    "duplicate customer keys must be reported, not uploaded twice",
    "a 503 from the target is transient; resend the same batch once",
    "the legacy export pages are one-based, not zero-based",
    "batches above fifty records are refused with status 413",
    "sanctioned counterparties always require an escalation",
    "missing invoices block the clearing of a transaction",
    "open the fridge before taking anything out of it",
    "heat objects with the microwave, not the stove burner",
]


def write_notes(spec: tuple[str, ...], namespace: tuple[str, ...], worker: int, count: int) -> dict[str, Any]:
    """Write `count` notes through a Workspace: every fifth one repeats a shared lesson."""
    from ..workspace import Workspace

    store = open_store(spec)
    ws = Workspace("write notes", store=store, namespace=namespace)
    latencies = []
    try:
        for i in range(count):
            text = shared_lesson((i // 5) % SHARED_LESSONS) + ("!" if worker % 2 else "") if i % 5 == 0 else unique_lesson(worker, i)
            started = time.perf_counter()
            result = ws.act("note", {"text": text})
            latencies.append(time.perf_counter() - started)
            if not result.ok:
                raise RuntimeError(result.content)
    finally:
        store.close()
    return {"worker": worker, "latencies": latencies}


def agent_session(spec: tuple[str, ...], namespace: tuple[str, ...], worker: int, steps: int) -> dict[str, list[float]]:
    """A scripted agent's meta-action mix; returns the latencies (seconds) of each action type."""
    from ..workspace import Workspace

    store = open_store(spec)
    ws = Workspace(f"agent {worker}", subgoals=[f"batch {i}" for i in range(10)], store=store, namespace=namespace)
    latencies: dict[str, list[float]] = {"track": [], "commit": [], "note": [], "recall": []}
    try:
        for i in range(steps):
            calls = [
                ("track", {"key": f"page.{i % 7}", "value": str(i)}),
                ("commit", {"subgoal": f"batch {i % 10}", "status": ("doing", "todo")[i % 2]}),
                ("recall", {"query": _SHARED[i % len(_SHARED)]}),
                ("note", {"text": unique_lesson(worker, i) if i % 3 else shared_lesson(i % SHARED_LESSONS)}),
            ]
            for name, args in calls:
                started = time.perf_counter()
                ws.act(name, args)
                latencies[name].append(time.perf_counter() - started)
    finally:
        store.close()
    return latencies
