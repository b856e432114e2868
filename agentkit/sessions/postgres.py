"""Sessions in PostgreSQL through psycopg 3 (``pip install 'agentkit[postgres]'``): what Django
and Flask deployments already have.

An append is one transaction that locks the session's row (``SELECT ... FOR UPDATE``), checks
the version, inserts the records and bumps the version; a concurrent writer waits for the lock,
then sees the new version and gets :class:`SessionConflictError`. A committed append is durable
(PostgreSQL's WAL).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .base import SessionConflictError, SessionInfo, SessionStore, SessionStoreError, check_name

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentkit_sessions (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    updated_ms BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS agentkit_messages (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
"""


class PostgresStore(SessionStore):
    """Sessions in the PostgreSQL database at ``url`` (``postgresql://user@host:port/db``).

    One connection per store, shared by its threads under a lock; a connection that broke (the
    server restarted) is replaced on the next call, after that call raised
    :class:`SessionStoreError`.
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError(
                "PostgresStore needs psycopg: pip install 'agentkit[postgres]'"
            ) from exc
        self._psycopg: Any = psycopg
        self.url = url
        self._timeout = timeout
        # Guards _conn: psycopg connections are not to be used by two threads at once.
        self._lock = threading.Lock()
        self._conn: Any = None
        with self._lock, self._transaction() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(726611)")  # two creators of the schema
            cur.execute(SCHEMA)

    def _safe_url(self) -> str:
        return "postgresql://" + self.url.rsplit("@", 1)[-1].split("://")[-1]

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A cursor in one transaction on a live connection (caller holds the lock)."""
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self._psycopg.connect(
                    self.url, autocommit=True, connect_timeout=int(self._timeout)
                )
            with self._conn.transaction(), self._conn.cursor() as cur:
                yield cur
        except self._psycopg.Error as exc:
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._conn = None
            raise SessionStoreError(
                f"PostgreSQL session store {self._safe_url()}: {exc}".strip()
            ) from exc

    def load(self, name: str) -> tuple[list[str], int]:
        with self._lock, self._transaction() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT version FROM agentkit_sessions WHERE name = %s", (name,))
            row = cur.fetchone()
            cur.execute(
                "SELECT record FROM agentkit_messages WHERE session = %s ORDER BY seq", (name,)
            )
            records = [r[0] for r in cur.fetchall()]
        return records, (row[0] if row else 0)

    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        check_name(name)
        now = int(time.time() * 1000)
        with self._lock, self._transaction() as cur:
            cur.execute(
                "INSERT INTO agentkit_sessions (name, version, updated_ms) VALUES (%s, 0, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (name, now),
            )
            cur.execute("SELECT version FROM agentkit_sessions WHERE name = %s FOR UPDATE", (name,))
            (version,) = cur.fetchone()
            if version != expected_version:
                raise SessionConflictError(name, expected_version, version)
            cur.executemany(
                "INSERT INTO agentkit_messages (session, seq, record) VALUES (%s, %s, %s)",
                [(name, version + i, record) for i, record in enumerate(records)],
            )
            new_version = version + len(records)
            cur.execute(
                "UPDATE agentkit_sessions SET version = %s, updated_ms = %s WHERE name = %s",
                (new_version, now, name),
            )
        return int(new_version)

    def list(self) -> list[SessionInfo]:
        with self._lock, self._transaction() as cur:
            cur.execute(
                "SELECT name, version, updated_ms FROM agentkit_sessions WHERE version > 0 "
                "ORDER BY name"
            )
            rows = cur.fetchall()
        return [SessionInfo(name, int(version), int(updated)) for name, version, updated in rows]

    def delete(self, name: str) -> bool:
        with self._lock, self._transaction() as cur:
            cur.execute("DELETE FROM agentkit_messages WHERE session = %s", (name,))
            cur.execute("DELETE FROM agentkit_sessions WHERE name = %s", (name,))
            return bool(cur.rowcount)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
