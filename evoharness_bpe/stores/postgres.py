"""An experience store on PostgreSQL: full-text search, transactions, many writers.

For deployments that outgrow one machine: every agent process connects to the same server.
Search uses PostgreSQL's own full-text index (a GIN index on a ``tsvector``) over the same
stemmed terms the other backends index, so ranking behaves alike everywhere. `transaction()`
takes a transaction-level advisory lock, so consolidations from any number of processes and
machines serialise instead of interleaving.

Connections come from a bounded `psycopg_pool.ConnectionPool` (``max_connections``): a thread
borrows one per statement, or for a whole `transaction()`, so any number of threads — one per
request, say — never hold more than ``max_connections`` server connections.

The table's terms come from `evoharness_bpe.text`; a ``<table>_meta`` table records the text
processing's version, and a table written under another version is re-indexed on open. Given an
``embedder``, each row also keeps its unit vector in a ``float8[]`` column (plain PostgreSQL: no
pgvector needed, so it runs on Debian's PostgreSQL 15) and `search` fuses the full-text ranking
with cosine similarity computed in SQL, an exact scan of the namespace.

Needs ``pip install "evoharness-bpe[postgres]"`` (psycopg 3 and psycopg-pool). Why a direct backend rather than
the core store on LangGraph's ``PostgresStore``: that store has no keyword index (without an
embedding index it ignores queries, so every recall would scan the namespace in Python) and no
cross-process transaction; this one has both. LangGraph users can still share experience with
their ``PostgresStore`` through ``evoharness_bpe_langgraph.LangGraphExperienceStore``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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

__all__ = ["PostgresExperienceStore"]

_LOCK_KEY = 0x45564F48  # "EVOH": the advisory lock that serialises consolidation


def _schema(table: str) -> str:
    return f"""
CREATE TABLE IF NOT EXISTS {table} (
    id TEXT PRIMARY KEY,
    ns TEXT NOT NULL,
    terms TEXT NOT NULL,
    updated DOUBLE PRECISION NOT NULL,
    body TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED
);
CREATE INDEX IF NOT EXISTS {table}_tsv ON {table} USING GIN (tsv);
CREATE INDEX IF NOT EXISTS {table}_ns_updated ON {table} (ns, updated DESC, id DESC);
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS vec float8[];
CREATE TABLE IF NOT EXISTS {table}_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _import_psycopg() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise UserError(
            'PostgresExperienceStore needs psycopg 3 and psycopg-pool: pip install "evoharness-bpe[postgres]"'
        ) from exc
    return psycopg, psycopg_pool


class _Result:
    """A statement's rows and row count, read before its connection went back to the pool."""

    __slots__ = ("rows", "rowcount")

    def __init__(self, rows: list[Any], rowcount: int) -> None:
        self.rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> Any:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[Any]:
        return list(self.rows)


class _Statements:
    """What `_conn()` returns: ``execute`` runs one statement on a pooled connection."""

    def __init__(self, store: PostgresExperienceStore) -> None:
        self._store = store

    def execute(self, sql: str, params: tuple[Any, ...] | None = None) -> _Result:
        return self._store._execute(sql, params)


class PostgresExperienceStore(ExperienceStore):
    """Experience in a PostgreSQL table, shared by threads, processes and machines.

    `max_connections` bounds the server connections this store opens (a pool); a thread that
    finds them all busy waits up to `pool_timeout` seconds, then gets a `StoreError`.

    >>> store = PostgresExperienceStore("postgresql://user@db-host/agents")  # doctest: +SKIP
    """

    def __init__(
        self,
        dsn: str,
        *,
        table: str = "evoharness_experience",
        connect_timeout: int = 10,
        max_connections: int = 10,
        pool_timeout: float = 30.0,
        embedder: object | None = None,
        fusion: Fusion = Fusion(),
    ) -> None:
        if not table.replace("_", "").isalnum() or not table[0].isalpha():
            raise UserError(f"table must be a plain SQL identifier, not {table!r}")
        if max_connections < 1:
            raise UserError("max_connections must be at least 1")
        self._psycopg, pool_module = _import_psycopg()
        self.embedder: Embedder | None = as_embedder(embedder) if embedder is not None else None
        self.fusion = fusion
        self.dsn = dsn
        self.table = table
        self._local = threading.local()
        self._pool = pool_module.ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True, "connect_timeout": connect_timeout},
            timeout=pool_timeout,
            open=False,
            name=f"evoharness-{table}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except self._psycopg.Error as exc:
            self._pool.close()
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        with self.transaction():
            # Concurrent first connections would race on CREATE ... IF NOT EXISTS (the
            # transaction holds the advisory lock).
            self._execute(_schema(table), None)
            self._reindex_if_needed()
        if self.embedder is not None:
            self._backfill_vectors()

    def _reindex_if_needed(self) -> None:
        """Recompute every row's terms when they came from another version of the text processing."""
        meta = f"{self.table}_meta"
        row = self._execute(f"SELECT value FROM {meta} WHERE key = 'text_version'", None).fetchone()
        if row is not None and row[0] == TEXT_VERSION:
            return
        for entry_id, body in self._execute(f"SELECT id, body FROM {self.table}", None).fetchall():
            entry = ExperienceEntry.model_validate_json(body)
            self._execute(f"UPDATE {self.table} SET terms = %s WHERE id = %s", (_indexed_terms(entry), entry_id))
        self._execute(
            f"INSERT INTO {meta} (key, value) VALUES ('text_version', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (TEXT_VERSION,),
        )

    def _backfill_vectors(self) -> None:
        """Embed the rows without a vector, or with one of another dimension than the embedder's."""
        assert self.embedder is not None
        dimension = len(self.embedder.embed_query("dimension probe"))
        while True:
            rows = self._execute(
                f"SELECT id, body FROM {self.table} WHERE vec IS NULL OR cardinality(vec) <> %s LIMIT 64",
                (dimension,),
            ).fetchall()
            if not rows:
                return
            vectors = self.embedder.embed_documents([entry_text(ExperienceEntry.model_validate_json(b)) for _, b in rows])
            if any(len(v) != dimension for v in vectors):
                raise StoreError(f"the embedder's document vectors do not have its query vectors' {dimension} dimensions")
            with self.transaction():
                for (entry_id, _), vector in zip(rows, vectors, strict=True):
                    self._execute(f"UPDATE {self.table} SET vec = %s WHERE id = %s", (vector, entry_id))

    def _embed(self, entry: ExperienceEntry) -> list[float] | None:
        return self.embedder.embed_documents([entry_text(entry)])[0] if self.embedder is not None else None

    def _conn(self) -> _Statements:
        return _Statements(self)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        held = getattr(self._local, "conn", None)
        if held is not None:  # inside this thread's transaction()
            yield held
            return
        # getconn/putconn rather than the pool's connection(): that one also runs the
        # connection's own context exit, a commit that autocommit makes pointless.
        conn = self._pool.getconn()
        try:
            yield conn
        finally:
            self._pool.putconn(conn)  # rolls back whatever a failure left open

    @contextmanager
    def transaction(self) -> Iterator[None]:
        depth = getattr(self._local, "depth", 0)
        if depth > 0:
            self._local.depth = depth + 1
            try:
                yield
            finally:
                self._local.depth = depth
            return
        try:
            with self._connection() as conn, conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                self._local.conn, self._local.depth = conn, 1
                try:
                    yield
                finally:
                    self._local.conn, self._local.depth = None, 0
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL transaction failed: {exc}") from exc

    def _execute(self, sql: str, params: tuple[Any, ...] | None) -> _Result:
        try:
            with self._connection() as conn:
                cur = conn.execute(sql, params)
                return _Result(cur.fetchall() if cur.description is not None else [], cur.rowcount)
        except self._psycopg.errors.UniqueViolation as exc:
            raise StoreError(f"an entry with this id already exists: {exc}") from exc
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL experience store: {exc}") from exc

    def add(self, namespace: Namespace, entry: ExperienceEntry) -> ExperienceEntry:
        key = namespace_key(validate_namespace(namespace))
        self._execute(
            f"INSERT INTO {self.table} (id, ns, terms, updated, body, vec) VALUES (%s, %s, %s, %s, %s, %s)",
            (entry.id, key, _indexed_terms(entry), entry.updated, entry.model_dump_json(), self._embed(entry)),
        )
        return entry.model_copy(deep=True)

    def get(self, namespace: Namespace, entry_id: str) -> ExperienceEntry | None:
        key = namespace_key(validate_namespace(namespace))
        row = self._execute(f"SELECT body FROM {self.table} WHERE id = %s AND ns = %s", (entry_id, key)).fetchone()
        return ExperienceEntry.model_validate_json(row[0]) if row else None

    def update(self, namespace: Namespace, entry: ExperienceEntry) -> None:
        key = namespace_key(validate_namespace(namespace))
        vector = None
        if self.embedder is not None:
            old = self.get(namespace, entry.id)
            if old is not None and entry_text(old) != entry_text(entry):
                vector = self._embed(entry)
        cur = self._execute(
            f"UPDATE {self.table} SET terms = %s, updated = %s, body = %s, vec = coalesce(%s, vec) "
            "WHERE id = %s AND ns = %s",
            (_indexed_terms(entry), entry.updated, entry.model_dump_json(), vector, entry.id, key),
        )
        if cur.rowcount == 0:
            raise StoreError(f"no entry {entry.id!r} in namespace {namespace!r} to update")

    def delete(self, namespace: Namespace, entry_id: str) -> bool:
        key = namespace_key(validate_namespace(namespace))
        cur = self._execute(f"DELETE FROM {self.table} WHERE id = %s AND ns = %s", (entry_id, key))
        return cur.rowcount > 0

    def list(self, namespace: Namespace, *, limit: int = 100, offset: int = 0) -> list[ExperienceEntry]:
        key = namespace_key(validate_namespace(namespace))
        rows = self._execute(
            f"SELECT body FROM {self.table} WHERE ns = %s ORDER BY updated DESC, id DESC LIMIT %s OFFSET %s",
            (key, limit, offset),
        ).fetchall()
        return [ExperienceEntry.model_validate_json(r[0]) for r in rows]

    def search(self, namespace: Namespace, query: str, *, k: int = 10) -> list[ScoredEntry]:
        key = namespace_key(validate_namespace(namespace))
        wanted = query_terms(query)
        if not wanted:
            return []
        if k <= 0:
            return []
        # Terms are letters and digits only, so joining them with | is a safe tsquery.
        tsquery = " | ".join(wanted)
        n = k if self.embedder is None else max(k, self.fusion.candidates)
        rows = self._execute(
            f"SELECT id, body, ts_rank(tsv, q) AS score FROM {self.table}, to_tsquery('simple', %s) AS q "
            "WHERE ns = %s AND tsv @@ q ORDER BY score DESC, id LIMIT %s",
            (tsquery, key, n),
        ).fetchall()
        if self.embedder is None:
            return [ScoredEntry(entry=ExperienceEntry.model_validate_json(b), score=float(s)) for _, b, s in rows]
        vector = self.embedder.embed_query(query)
        similar = self._execute(
            f"SELECT id, body, sim FROM (SELECT id, body, (SELECT sum(a * b) FROM unnest(vec, %s::float8[]) AS t(a, b)) "
            f"AS sim FROM {self.table} WHERE ns = %s AND vec IS NOT NULL) AS s WHERE sim >= %s ORDER BY sim DESC, id LIMIT %s",
            (vector, key, self.fusion.min_similarity, n),
        ).fetchall()
        bodies = {entry_id: body for entry_id, body, _ in rows + similar}
        fused = reciprocal_rank_fusion([(i, s) for i, _, s in rows], [(i, s) for i, _, s in similar], self.fusion)
        return [ScoredEntry(entry=ExperienceEntry.model_validate_json(bodies[i]), score=s) for i, s in fused[:k]]

    def count(self, namespace: Namespace) -> int:
        key = namespace_key(validate_namespace(namespace))
        return self._execute(f"SELECT count(*) FROM {self.table} WHERE ns = %s", (key,)).fetchone()[0]

    def close(self) -> None:
        self._pool.close()
        self._local = threading.local()


def _indexed_terms(entry: ExperienceEntry) -> str:
    return " ".join(entry_terms(entry))
