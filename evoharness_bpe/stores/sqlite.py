"""An experience store in one SQLite file: in-process BM25 (and vector) search, WAL, safe across processes."""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Literal

from ..embeddings import Embedder, Fusion, as_embedder, reciprocal_rank_fusion
from ..exceptions import StoreError, UserError
from ..text import TEXT_VERSION, query_terms
from .base import (
    ExperienceEntry,
    ExperienceStore,
    Namespace,
    ScoredEntry,
    entry_terms,
    entry_text,
    namespace_key,
    validate_namespace,
)
from .bm25 import BM25Index
from .hybrid import rank
from .vectors import VectorIndex, pack

__all__ = ["SQLiteExperienceStore"]

_TABLES = """
CREATE TABLE IF NOT EXISTS entries (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    ns TEXT NOT NULL,
    terms TEXT NOT NULL,
    updated REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_ns_updated ON entries(ns, updated DESC, id DESC);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, ns TEXT NOT NULL, entry INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS changes_ns_seq ON changes(ns, seq);
CREATE TABLE IF NOT EXISTS vectors (rowid INTEGER PRIMARY KEY, v BLOB NOT NULL);
"""

# Every write to `entries` is logged in `changes`, so each process's in-memory index applies
# what other connections committed since it last looked. The log keeps its last _LOG_KEEP rows;
# an index older than that rebuilds.
_LOG_KEEP = 100_000
_TRIGGERS = f"""
CREATE TRIGGER IF NOT EXISTS entries_log_ai AFTER INSERT ON entries BEGIN
    INSERT INTO changes(ns, entry) VALUES (new.ns, new.rowid);
    DELETE FROM changes WHERE seq <= (SELECT max(seq) FROM changes) - {_LOG_KEEP};
END;
CREATE TRIGGER IF NOT EXISTS entries_log_au AFTER UPDATE ON entries BEGIN
    INSERT INTO changes(ns, entry) VALUES (new.ns, new.rowid);
END;
CREATE TRIGGER IF NOT EXISTS entries_log_ad AFTER DELETE ON entries BEGIN
    INSERT INTO changes(ns, entry) VALUES (old.ns, old.rowid);
    DELETE FROM vectors WHERE rowid = old.rowid;
END;
"""

# What stores written before TEXT_VERSION existed kept: an FTS5 index over namespace-prefixed terms.
_LEGACY = """
DROP TRIGGER IF EXISTS entries_ai;
DROP TRIGGER IF EXISTS entries_ad;
DROP TRIGGER IF EXISTS entries_au;
DROP TABLE IF EXISTS entries_vocab;
DROP TABLE IF EXISTS entries_fts;
"""
_EMBED_BATCH = 256
_BODIES_KEPT = 16_384  # about 4 MB of lessons of a few hundred characters


class _Shelf:
    """One namespace's search index in this process, current up to change `seq`.

    `bodies` keeps the stored JSON of recently returned rows, so that a search need not read
    them again; applying a change to a row drops its copy.
    """

    __slots__ = ("index", "vectors", "seq", "bodies")

    def __init__(self, seq: int) -> None:
        self.index: BM25Index[int] = BM25Index()
        self.vectors: VectorIndex[int] = VectorIndex()
        self.seq = seq
        self.bodies: dict[int, str] = {}

    def keep(self, bodies: dict[int, str]) -> None:
        """Remember these rows' bodies, forgetting the least recently used beyond the limit."""
        kept = self.bodies
        kept.update(bodies)
        while len(kept) > _BODIES_KEPT:
            del kept[next(iter(kept))]

    def apply(self, rowid: int, row: tuple[str, bytes | None] | None) -> None:
        self.bodies.pop(rowid, None)
        if row is None:
            self.index.remove(rowid)
            self.vectors.remove(rowid)
            return
        self.index.add(rowid, row[0].split())
        if row[1] is not None:
            self.vectors.add(rowid, row[1])
        else:
            self.vectors.remove(rowid)


class SQLiteExperienceStore(ExperienceStore):
    """Experience in a SQLite database file, shared by threads and processes.

    Each thread gets its own connection, closed when the thread ends (so a server that runs
    each request in a new thread keeps a bounded number of files open); the file runs in WAL
    mode so readers never block the writer, and `transaction()` takes SQLite's write lock up
    front (``BEGIN IMMEDIATE``) so that concurrent consolidations from several processes
    serialise instead of interleaving.

    Search runs on an inverted index (`BM25Index`) this process keeps per namespace, built on
    the namespace's first search and then kept current from a log of changes the database
    writes in the same transaction as each change, so writes from other processes are seen on
    the next search. A search inside an open transaction also sees that transaction's own
    writes (scored beside the shared index, which holds committed rows only). The JSON of
    recently returned rows is kept beside the index and dropped with every logged change to
    them, so repeated searches skip reading them without ever returning a stale entry.

    The file records the version of the text processing its terms came from
    (`evoharness_bpe.text.TEXT_VERSION`); a file written under another version (including
    the FTS5 files of earlier releases) is re-indexed when opened.

    `embedder` (any kind `evoharness_bpe.embeddings.as_embedder` accepts) turns on hybrid
    recall: each entry's unit vector is kept in the ``vectors`` table (little-endian float32,
    the format of the ``sqlite-vec`` extension); entries written without one are embedded when
    the store opens. `vector_search` says who scans them: ``"sqlite-vec"`` (the extension's
    ``vec_distance_cosine`` in SQL, keeping no copy in memory), ``"python"`` (in process, a
    numpy matrix product when numpy is installed), or ``"auto"``: numpy when installed, else
    sqlite-vec when it is installed and this Python's sqlite3 can load extensions.

    >>> store = SQLiteExperienceStore(":memory:")  # or a path such as "experience.db"
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        embedder: object | None = None,
        fusion: Fusion = Fusion(),
        vector_search: Literal["auto", "sqlite-vec", "python"] = "auto",
    ) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._timeout = timeout
        self.embedder: Embedder | None = as_embedder(embedder) if embedder is not None else None
        self.fusion = fusion
        if vector_search not in ("auto", "sqlite-vec", "python"):
            raise UserError("vector_search is 'auto', 'sqlite-vec' or 'python'")
        # auto: numpy's matrix product when numpy is there (about 4x faster than sqlite-vec's scan
        # at 20,000 lessons, docs/benchmarks.md), else sqlite-vec, else a pure-Python scan.
        wants_vec = vector_search == "sqlite-vec" or (vector_search == "auto" and importlib.util.find_spec("numpy") is None)
        self._sqlite_vec = self.embedder is not None and wants_vec and _sqlite_vec_loads()
        if vector_search == "sqlite-vec" and not self._sqlite_vec:
            raise UserError(
                "vector_search='sqlite-vec' needs an embedder, pip install sqlite-vec, and a Python whose sqlite3 "
                "can load extensions"
            )
        self._local = threading.local()
        self._connections: dict[int, sqlite3.Connection] = {}
        self._connections_lock = threading.RLock()  # a finalizer may run while it is held
        self._shared_memory_lock = threading.RLock()
        self._index_lock = threading.RLock()
        self._shelves: dict[str, _Shelf] = {}
        self._prepared = False
        if self.path == ":memory:":
            # One in-memory database must be one connection, shared under a lock.
            self._memory_conn: sqlite3.Connection | None = self._open()
        else:
            self._memory_conn = None
            self._conn()
        if self.embedder is not None:
            self._backfill_vectors()

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
            if self._sqlite_vec:
                _load_sqlite_vec(conn)
            if not self._prepared:
                self._prepare(conn)
                self._prepared = True
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite experience store {self.path!r}: {exc}") from exc
        with self._connections_lock:
            self._connections[id(conn)] = conn
        return conn

    @staticmethod
    def _prepare(conn: sqlite3.Connection) -> None:
        """Create the schema, re-indexing a file whose terms came from other text processing."""
        conn.executescript(_TABLES)
        if _text_version(conn) == TEXT_VERSION:
            conn.executescript(_TRIGGERS)
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _text_version(conn) != TEXT_VERSION:  # another process may have done it meanwhile
                for statement in _LEGACY.split(";"):  # not executescript: it would commit first
                    if statement.strip():
                        conn.execute(statement)
                rows = conn.execute("SELECT rowid, body FROM entries").fetchall()
                conn.executemany(
                    "UPDATE entries SET terms = ? WHERE rowid = ?",
                    ((" ".join(entry_terms(ExperienceEntry.model_validate_json(b))), r) for r, b in rows),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES ('text_version', ?)", (TEXT_VERSION,)
                )
            conn.execute("COMMIT")
            conn.executescript(_TRIGGERS)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

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
                    # Holding the write lock, nobody else commits until we do: every change up
                    # to here is committed, every later one is this transaction's own.
                    self._local.base = conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0]
                except sqlite3.Error as exc:
                    raise StoreError(f"cannot start a write transaction: {exc}") from exc
            self._local.depth = depth + 1
            try:
                yield
            except BaseException:
                self._local.depth = depth
                if depth == 0:
                    conn.execute("ROLLBACK")
                    self._forget_indexes()
                raise
            self._local.depth = depth
            if depth == 0:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._forget_indexes()
                    raise StoreError(f"cannot commit: {exc}") from exc

    def _forget_indexes(self) -> None:
        # A search inside the transaction left its rows out of the indexes; start again from the file.
        with self._index_lock:
            self._shelves.clear()

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
        vector = self._embed(entry)
        with self.transaction():
            cur = self._write(
                "INSERT INTO entries(id, ns, terms, updated, body) VALUES (?, ?, ?, ?, ?)",
                (entry.id, key, " ".join(entry_terms(entry)), entry.updated, entry.model_dump_json()),
            )
            if vector is not None:
                self._write("INSERT OR REPLACE INTO vectors(rowid, v) VALUES (?, ?)", (cur.lastrowid, vector))
        return entry.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        key = namespace_key(validate_namespace(namespace))
        with self._reading() as conn:
            row = conn.execute("SELECT body FROM entries WHERE id = ? AND ns = ?", (entry_id, key)).fetchone()
        return ExperienceEntry.model_validate_json(row[0]) if row else None

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        key = namespace_key(validate_namespace(namespace))
        vector = None
        if self.embedder is not None:
            old = self.get(namespace, entry.id)
            if old is not None and entry_text(old) != entry_text(entry):
                vector = self._embed(entry)  # outside the write lock: embedding may be slow
        with self.transaction():
            cur = self._write(
                "UPDATE entries SET terms = ?, updated = ?, body = ? WHERE id = ? AND ns = ?",
                (" ".join(entry_terms(entry)), entry.updated, entry.model_dump_json(), entry.id, key),
            )
            if cur.rowcount == 0:
                raise StoreError(f"no entry {entry.id!r} in namespace {namespace!r} to update")
            if vector is not None:
                self._write(
                    "INSERT OR REPLACE INTO vectors(rowid, v) SELECT rowid, ? FROM entries WHERE id = ?",
                    (vector, entry.id),
                )

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
        if not wanted or k <= 0:
            return []
        vector = self.embedder.embed_query(query) if self.embedder is not None else None
        with self._reading() as conn:
            # Inside this thread's transaction its own writes are not in the shared indexes (a
            # rollback would leave them there, and other threads must not see them): they are
            # read from the change log and scored beside the indexes.
            base = self._local.base if getattr(self._local, "depth", 0) > 0 else None
            pending = [] if base is None else conn.execute(
                "SELECT DISTINCT c.entry, e.terms, v.v FROM changes c LEFT JOIN entries e ON e.rowid = c.entry "
                "LEFT JOIN vectors v ON v.rowid = c.entry WHERE c.ns = ? AND c.seq > ?", (key, base)
            ).fetchall()
            pending = [(rowid, None if t is None else t.split(), blob) for rowid, t, blob in pending]
            with self._index_lock:
                shelf = self._current(conn, key, base, {rowid for rowid, _, _ in pending})
                if vector is not None and self._sqlite_vec:  # lexical here, vectors in SQL below
                    ranked = rank(shelf.index, shelf.vectors, wanted, None, max(k, self.fusion.candidates),
                                  self.fusion, pending=pending)
                else:
                    ranked = rank(shelf.index, shelf.vectors, wanted, vector, k, self.fusion, pending=pending)
            if vector is not None and self._sqlite_vec:
                # sqlite-vec scans the stored vectors; the connection also sees its own pending rows.
                similar = conn.execute(
                    "SELECT v.rowid, 1.0 - vec_distance_cosine(v.v, ?) AS sim FROM vectors v "
                    "JOIN entries e ON e.rowid = v.rowid WHERE e.ns = ? AND sim >= ? ORDER BY sim DESC, v.rowid LIMIT ?",
                    (pack(vector), key, self.fusion.min_similarity, max(k, self.fusion.candidates)),
                ).fetchall()
                ranked = reciprocal_rank_fusion(ranked, similar, self.fusion)[:k]
            if not ranked:
                return []
            with self._index_lock:
                bodies = self._bodies(conn, shelf, [rowid for rowid, _ in ranked], {rowid for rowid, _, _ in pending})
        return [ScoredEntry(entry=ExperienceEntry.model_validate_json(bodies[rowid]), score=score)
                for rowid, score in ranked if rowid in bodies]

    def _bodies(self, conn: sqlite3.Connection, shelf: _Shelf, rowids: list[int], pending: set[int]) -> dict[int, str]:
        """The stored JSON of these rows, from the shelf's copies or the file, under `_index_lock`.

        Rows read from the file are remembered unless they are the open transaction's own
        (uncommitted) writes. A copy cannot go stale: a row read after the index was brought up
        to date is changed later only through a logged change, which drops the copy when the
        index applies it (a rolled-back transaction drops every shelf).
        """
        kept = shelf.bodies
        bodies = {}
        for rowid in rowids:
            body = kept.pop(rowid, None)
            if body is not None:
                kept[rowid] = body  # most recently used last
                if rowid not in pending:
                    bodies[rowid] = body
        missing = [rowid for rowid in rowids if rowid not in bodies]
        if missing:
            marks = ",".join("?" * len(missing))
            read = dict(conn.execute(f"SELECT rowid, body FROM entries WHERE rowid IN ({marks})", missing).fetchall())
            bodies.update(read)
            shelf.keep({rowid: body for rowid, body in read.items() if rowid not in pending})
        return bodies

    def _current(self, conn: sqlite3.Connection, key: str, upto: int | None, skip: set[int]) -> _Shelf:
        """The namespace's index, brought up to change `upto` (None: the latest), under `_index_lock`.

        Rows in `skip` (the open transaction's own) are not read: their state is not committed.
        """
        head = conn.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()[0] if upto is None else upto
        shelf = self._shelves.get(key)
        if shelf is not None and head != shelf.seq:
            oldest = conn.execute("SELECT coalesce(min(seq), 0) FROM changes").fetchone()[0]
            if head < shelf.seq or oldest > shelf.seq + 1:  # the log was trimmed past it
                shelf = None
        if shelf is None:
            shelf = self._shelves[key] = _Shelf(head)
            rows = conn.execute(
                "SELECT e.rowid, e.terms, v.v FROM entries e LEFT JOIN vectors v ON v.rowid = e.rowid WHERE e.ns = ?",
                (key,),
            )
            for rowid, terms_text, blob in rows:
                if rowid not in skip:  # with sqlite-vec the vectors stay in the file
                    shelf.apply(rowid, (terms_text, None if self._sqlite_vec else blob))
            return shelf
        if head == shelf.seq:
            return shelf
        changed = conn.execute(
            "SELECT DISTINCT c.entry, e.terms, v.v FROM changes c LEFT JOIN entries e ON e.rowid = c.entry "
            "LEFT JOIN vectors v ON v.rowid = c.entry WHERE c.ns = ? AND c.seq > ? AND c.seq <= ?",
            (key, shelf.seq, head),
        ).fetchall()
        for rowid, terms_text, blob in changed:
            if rowid not in skip:
                shelf.apply(rowid, None if terms_text is None else (terms_text, None if self._sqlite_vec else blob))
        shelf.seq = head
        return shelf

    # -- vectors -----------------------------------------------------------------------------
    def _embed(self, entry: ExperienceEntry) -> bytes | None:
        if self.embedder is None:
            return None
        return pack(self.embedder.embed_documents([entry_text(entry)])[0])

    def _backfill_vectors(self) -> None:
        """Embed the entries that have no vector, or one of another dimension than the embedder's."""
        assert self.embedder is not None
        dimension = str(len(self.embedder.embed_query("dimension probe")))
        with self._reading() as conn:
            stored = conn.execute("SELECT value FROM meta WHERE key = 'vector_dimension'").fetchone()
        if stored is not None and stored[0] != dimension:
            with self.transaction():
                self._write("DELETE FROM vectors", ())
        after = -1
        while True:
            with self._reading() as conn:
                rows = conn.execute(
                    "SELECT e.rowid, e.body FROM entries e LEFT JOIN vectors v ON v.rowid = e.rowid "
                    "WHERE v.rowid IS NULL AND e.rowid > ? ORDER BY e.rowid LIMIT ?", (after, _EMBED_BATCH)
                ).fetchall()
            if not rows:
                break
            after = rows[-1][0]
            texts = [entry_text(ExperienceEntry.model_validate_json(body)) for _, body in rows]
            vectors = self.embedder.embed_documents(texts)
            with self.transaction():
                for (rowid, _), vector in zip(rows, vectors):
                    self._write("INSERT OR REPLACE INTO vectors(rowid, v) VALUES (?, ?)", (rowid, pack(vector)))
                    # Log it so that every process's index picks the vector up.
                    self._write("UPDATE entries SET rowid = rowid WHERE rowid = ?", (rowid,))
        with self.transaction():
            self._write("INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_dimension', ?)", (dimension,))

    def count(self, namespace: Namespace) -> int:
        key = namespace_key(validate_namespace(namespace))
        with self._reading() as conn:
            return conn.execute("SELECT count(*) FROM entries WHERE ns = ?", (key,)).fetchone()[0]

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check``; ``"ok"`` when sound."""
        with self._reading() as conn:
            return conn.execute("PRAGMA integrity_check").fetchone()[0]

    def close(self) -> None:
        with self._connections_lock:
            for conn in self._connections.values():
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        with self._index_lock:
            self._shelves.clear()


def _sqlite_vec_loads() -> bool:
    """Whether the ``sqlite-vec`` extension is installed and this Python's sqlite3 can load it."""
    try:
        import sqlite_vec  # noqa: F401
    except ImportError:
        return False
    probe = sqlite3.connect(":memory:")
    try:
        _load_sqlite_vec(probe)
        return True
    except (AttributeError, sqlite3.Error):  # AttributeError: sqlite3 built without extension loading
        return False
    finally:
        probe.close()


def _load_sqlite_vec(conn: sqlite3.Connection) -> None:
    import sqlite_vec

    conn.enable_load_extension(True)
    try:
        sqlite_vec.load(conn)
    finally:
        conn.enable_load_extension(False)


def _text_version(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'text_version'").fetchone()
    return row[0] if row else None


class _Held:
    """A thread's connection, kept in the store's thread-local."""

    __slots__ = ("conn", "__weakref__")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn


def _release(connections: dict[int, sqlite3.Connection], lock: threading.RLock, conn: sqlite3.Connection) -> None:
    with lock:
        connections.pop(id(conn), None)
    conn.close()

