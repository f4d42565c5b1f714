"""The consolidation jobs, persisted: nothing pending is lost to a crash, nothing applied twice.

A job moves ``pending`` → ``decided`` (the teacher's validated decisions are stored) → ``done``.
After a crash, ``pending`` jobs ask the teacher again (nothing of theirs was applied) and
``decided`` jobs re-apply their stored decisions, which is idempotent. SQLite in WAL mode, so a
journal on disk survives ``kill -9``; ``:memory:`` keeps jobs for the process only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ..stores.base import Namespace

__all__ = ["Job", "JobJournal", "JobStatus"]

JobStatus = Literal["pending", "decided", "done", "fallback"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    namespace TEXT NOT NULL,
    notes TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    decisions TEXT,
    reason TEXT,
    created REAL NOT NULL,
    updated REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Job:
    """Consolidate these notes of one namespace."""

    id: str
    namespace: Namespace
    notes: tuple[str, ...]
    status: JobStatus = "pending"
    decisions: str | None = None


class JobJournal:
    """A small SQLite table of jobs, safe to share between threads of one process."""

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(_SCHEMA)

    def add(self, namespace: Namespace, notes: list[str], *, key: str | None = None) -> Job:
        """Record a pending job; with a `key`, a second add of the same key returns the first job."""
        job_id = hashlib.sha256(key.encode()).hexdigest()[:32] if key is not None else uuid.uuid4().hex
        job = Job(id=job_id, namespace=tuple(namespace), notes=tuple(notes))
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO jobs (id, namespace, notes, created, updated) VALUES (?, ?, ?, ?, ?)",
                (job.id, json.dumps(list(job.namespace)), json.dumps(list(job.notes)), now, now),
            )
            row = self._db.execute("SELECT namespace, notes, status, decisions FROM jobs WHERE id = ?", (job.id,)).fetchone()
        return Job(id=job.id, namespace=tuple(json.loads(row[0])), notes=tuple(json.loads(row[1])), status=row[2], decisions=row[3])

    def next(self) -> Job | None:
        """The oldest job not finished (decided ones first: they only need applying)."""
        with self._lock:
            row = self._db.execute(
                "SELECT id, namespace, notes, status, decisions FROM jobs WHERE status IN ('pending', 'decided') "
                "ORDER BY status = 'pending', seq LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        return Job(id=row[0], namespace=tuple(json.loads(row[1])), notes=tuple(json.loads(row[2])), status=row[3], decisions=row[4])

    def decide(self, job_id: str, decisions: str) -> None:
        """Store the validated decisions of a job before they are applied."""
        self._set(job_id, "decided", decisions=decisions)

    def finish(self, job_id: str, status: Literal["done", "fallback"], reason: str | None = None) -> None:
        """Mark a job applied (``done``) or left to the rule-based consolidation (``fallback``)."""
        self._set(job_id, status, reason=reason)

    def _set(self, job_id: str, status: JobStatus, *, decisions: str | None = None, reason: str | None = None) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET status = ?, decisions = COALESCE(?, decisions), reason = ?, updated = ? WHERE id = ?",
                (status, decisions, reason, time.time(), job_id),
            )

    def unfinished(self) -> int:
        """How many jobs are pending or decided."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM jobs WHERE status IN ('pending', 'decided')").fetchone()[0]

    def counts(self) -> dict[str, int]:
        """Jobs by status."""
        with self._lock:
            return dict(self._db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall())

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
