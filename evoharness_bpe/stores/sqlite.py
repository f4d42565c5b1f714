"""An experience store in one SQLite file: FTS5 BM25 search, WAL, safe across processes."""

from __future__ import annotations

import os
import sqlite3
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from ..exceptions import StoreError, UserError
from ..text import query_terms, terms
from .base import (
    ExperienceEntry,
    ExperienceStore,
    Namespace,
    ScoredEntry,
    namespace_key,
    validate_namespace,
)

__all__ = ["SQLiteExperienceStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ns TEXT NOT NULL,
    terms TEXT NOT NULL,
    updated REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_ns_updated ON entries(ns, updated DESC, id DESC);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5(
    terms, content='entries', content_rowid='rowid', tokenize='unicode61'
);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_vocab USING fts5vocab(entries_fts, 'row');
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts(rowid, terms) VALUES (new.rowid, new.terms);
END;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES ('delete', old.rowid, old.terms);
END;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE ON entries BEGIN
    INSERT INTO entries_fts(entries_fts, rowid, terms) VALUES ('delete', old.rowid, old.terms);
    INSERT INTO entries_fts(rowid, terms) VALUES (new.rowid, new.terms);
END;
"""

_COMMON_FLOOR = 500  # a term is common when in more than this many entries and the given fraction
_DF_TTL_S = 300.0
_CANDIDATES = 100
_K1, _B = 1.2, 0.75  # FTS5's BM25 constants

_SEARCH_SQL = (
    "SELECT {columns} FROM ("
    "  SELECT rowid, bm25(entries_fts) AS s FROM entries_fts WHERE entries_fts MATCH ? ORDER BY s, rowid LIMIT ?"
    ") AS hit JOIN entries e ON e.rowid = hit.rowid WHERE e.ns = ? ORDER BY hit.s, hit.rowid"
)


def _match(indexed_terms: list[str]) -> str:
    # Terms are letters and digits only, so quoting them is enough to escape FTS5 syntax.
    return " OR ".join(f'"{t}"' for t in indexed_terms)


def _ns_prefix(key: str) -> str:
    # Every indexed term carries a fixed-length hash of its namespace, so each namespace has
    # posting lists of its own: a search touches only its namespace's documents.
    import hashlib  # deferred: only stores that read or write need it

    return "n" + hashlib.blake2b(key.encode(), digest_size=6).hexdigest()


def _indexed_terms(key: str, entry: ExperienceEntry) -> str:
    prefix = _ns_prefix(key)
    return " ".join(prefix + t for t in terms(entry.text + " " + " ".join(entry.tags)))


class SQLiteExperienceStore(ExperienceStore):
    """Experience in a SQLite database file, shared by threads and processes.

    Each thread gets its own connection, closed when the thread ends (so a server that runs
    each request in a new thread keeps a bounded number of files open); the file runs in WAL
    mode so readers never block the writer, and `transaction()` takes SQLite's write lock up front (``BEGIN IMMEDIATE``) so that
    concurrent consolidations from several processes serialise instead of interleaving.

    `common_term_fraction`: in a large namespace, query terms found in more than this fraction
    of its entries only re-rank the candidates the rarer terms find (see `search`). Lower is
    faster and less exact: at 100,000 lessons, 0.02 kept 95% of exact BM25's top 3 and 0.01 85%
    (docs/benchmarks.md); 1.0 disables it.

    >>> store = SQLiteExperienceStore(":memory:")  # or a path such as "experience.db"
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 30.0, common_term_fraction: float = 0.02
    ) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        if not 0.0 < common_term_fraction <= 1.0:
            raise UserError("common_term_fraction must be in (0, 1]")
        self._timeout = timeout
        self._common_fraction = common_term_fraction
        self._local = threading.local()
        self._connections: dict[int, sqlite3.Connection] = {}
        self._connections_lock = threading.RLock()  # a finalizer may run while it is held
        self._shared_memory_lock = threading.RLock()
        self._df_cache: dict[str, tuple[int, float]] = {}
        if self.path == ":memory:":
            # One in-memory database must be one connection, shared under a lock.
            self._memory_conn: sqlite3.Connection | None = self._open()
        else:
            self._memory_conn = None
            self._conn()

    # -- connections -------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite experience store {self.path!r}: {exc}") from exc
        with self._connections_lock:
            self._connections[id(conn)] = conn
        return conn

    def _conn(self) -> sqlite3.Connection:
        if self._memory_conn is not None:
            return self._memory_conn
        held = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = _Held(self._open())
            # The thread-local dies with its thread; so does the connection.
            weakref.finalize(held, _release, self._connections, self._connections_lock, held.conn)
            self._local.depth = 0
        return held.conn

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self._shared_memory_lock if self._memory_conn is not None else nullcontext():
            conn = self._conn()
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                try:
                    conn.execute("BEGIN IMMEDIATE")
                except sqlite3.Error as exc:
                    raise StoreError(f"cannot start a write transaction: {exc}") from exc
            self._local.depth = depth + 1
            try:
                yield
            except BaseException:
                self._local.depth = depth
                if depth == 0:
                    conn.execute("ROLLBACK")
                raise
            self._local.depth = depth
            if depth == 0:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    raise StoreError(f"cannot commit: {exc}") from exc

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._shared_memory_lock if self._memory_conn is not None else nullcontext():
            try:
                yield self._conn()
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite experience store {self.path!r}: {exc}") from exc

    def _write(self, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        with self.transaction():
            try:
                return self._conn().execute(sql, params)
            except sqlite3.IntegrityError as exc:
                raise StoreError(f"integrity error: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite experience store {self.path!r}: {exc}") from exc

    # -- contract ----------------------------------------------------------------------------
    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        key = namespace_key(validate_namespace(namespace))
        self._write(
            "INSERT INTO entries(id, ns, terms, updated, body) VALUES (?, ?, ?, ?, ?)",
            (entry.id, key, _indexed_terms(key, entry), entry.updated, entry.model_dump_json()),
        )
        return entry.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        key = namespace_key(validate_namespace(namespace))
        with self._reading() as conn:
            row = conn.execute("SELECT body FROM entries WHERE id = ? AND ns = ?", (entry_id, key)).fetchone()
        return ExperienceEntry.model_validate_json(row[0]) if row else None

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        key = namespace_key(validate_namespace(namespace))
        cur = self._write(
            "UPDATE entries SET terms = ?, updated = ?, body = ? WHERE id = ? AND ns = ?",
            (_indexed_terms(key, entry), entry.updated, entry.model_dump_json(), entry.id, key),
        )
        if cur.rowcount == 0:
            raise StoreError(f"no entry {entry.id!r} in namespace {namespace!r} to update")

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        key = namespace_key(validate_namespace(namespace))
        cur = self._write("DELETE FROM entries WHERE id = ? AND ns = ?", (entry_id, key))
        return cur.rowcount > 0

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        key = namespace_key(validate_namespace(namespace))
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT body FROM entries WHERE ns = ? ORDER BY updated DESC, id DESC LIMIT ? OFFSET ?",
                (key, limit, offset),
            ).fetchall()
        return [ExperienceEntry.model_validate_json(r[0]) for r in rows]

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        key = namespace_key(validate_namespace(namespace))
        wanted = query_terms(query)
        if not wanted:
            return []
        prefix = _ns_prefix(key)
        indexed = [prefix + t for t in wanted]
        with self._reading() as conn:
            rare, freq, total, avg_len = self._split_common(conn, key, indexed)
            if len(rare) == len(indexed):
                rows = conn.execute(_SEARCH_SQL.format(columns="e.body, hit.s"), (_match(indexed), k, key)).fetchall()
                return [ScoredEntry(entry=ExperienceEntry.model_validate_json(b), score=-s) for b, s in rows]
            rows = conn.execute(
                _SEARCH_SQL.format(columns="hit.rowid, e.terms, e.body"), (_match(rare), max(8 * k, _CANDIDATES), key)
            ).fetchall()
        # Candidates come from the rare terms alone; rank them by BM25 over every query term.
        # Cached counts may be stale by different amounts: keep N at least every term's frequency.
        total = max(total, *freq.values())
        idf = {t: max(math.log((total - freq[t] + 0.5) / (freq[t] + 0.5)), 1e-6) for t in indexed}
        scored = []
        for rowid, indexed_terms, body in rows:
            doc = indexed_terms.split()
            norm = _K1 * (1 - _B + _B * len(doc) / avg_len)
            score = 0.0
            for t in indexed:
                tf = doc.count(t)
                if tf:
                    score += idf[t] * tf * (_K1 + 1) / (tf + norm)
            scored.append((-score, rowid, body))
        scored.sort()
        return [ScoredEntry(entry=ExperienceEntry.model_validate_json(b), score=-neg) for neg, _, b in scored[:k]]

    def _split_common(
        self, conn: sqlite3.Connection, key: str, indexed: list[str]
    ) -> tuple[list[str], dict[str, int], int, float]:
        """The query terms that are not very common in the namespace, and the statistics used.

        FTS5 scores every entry that contains any query term, so a term found in thousands of
        entries dominates the cost of a search while it adds little to BM25 (its IDF is low).
        Such terms are left out of the full-text match and only used to re-rank the candidates
        the rarer terms find. Document frequencies are cached for a few minutes; namespaces
        with fewer than a few thousand entries are never split.
        """
        now = time.monotonic()
        total = self._cached("#" + key, now, lambda: conn.execute("SELECT count(*) FROM entries WHERE ns = ?", (key,)).fetchone()[0])
        limit = max(_COMMON_FLOOR, int(total * self._common_fraction))
        if len(indexed) < 2 or total <= limit:
            return indexed, {}, total, 1.0
        freq = {
            t: self._cached(t, now, lambda t=t: (conn.execute("SELECT doc FROM entries_vocab WHERE term = ?", (t,)).fetchone() or (0,))[0])
            for t in indexed
        }
        rare = [t for t in indexed if freq[t] <= limit] or sorted(indexed, key=freq.__getitem__)[:2]
        if len(rare) == len(indexed):
            return indexed, freq, total, 1.0
        avg_len = self._cached(
            "@" + key,
            now,
            lambda: conn.execute(
                "SELECT avg(length(terms) - length(replace(terms, ' ', '')) + 1) FROM entries WHERE ns = ?", (key,)
            ).fetchone()[0] * 1000,
        ) / 1000
        return rare, freq, total, max(avg_len, 1.0)

    def _cached(self, name: str, now: float, compute: Callable[[], float]) -> int:
        hit = self._df_cache.get(name)
        if hit is not None and now - hit[1] < _DF_TTL_S:
            return hit[0]
        value = int(compute())
        if len(self._df_cache) > 50_000:
            self._df_cache.clear()
        self._df_cache[name] = (value, now)
        return value

    def count(self, namespace: Namespace) -> int:
        key = namespace_key(validate_namespace(namespace))
        with self._reading() as conn:
            return conn.execute("SELECT count(*) FROM entries WHERE ns = ?", (key,)).fetchone()[0]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` plus the FTS index check; ``"ok"`` when sound."""
        with self._reading() as conn:
            result = conn.execute("PRAGMA integrity_check").fetchone()[0]
            conn.execute("INSERT INTO entries_fts(entries_fts, rank) VALUES ('integrity-check', 1)")
        return result

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()
        self._local = threading.local()


class _Held:
    """A thread's connection, kept in the store's thread-local."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


def _release(connections: dict[int, sqlite3.Connection], lock: threading.RLock, conn: sqlite3.Connection) -> None:
    with lock:
        connections.pop(id(conn), None)
    conn.close()

