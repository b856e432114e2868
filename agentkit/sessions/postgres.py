"""Sessions in PostgreSQL through psycopg 3 (the ``postgres`` extra): what Django
and Flask deployments already have.

An append is one transaction that locks the session's row (``SELECT ... FOR UPDATE``), checks
the version, inserts the records and bumps the version; a concurrent writer waits for the lock,
then sees the new version and gets :class:`SessionConflictError`. A committed append is durable
(PostgreSQL's WAL).

A connection the server closed while it sat idle (``idle_session_timeout``, PgBouncer, a cloud
load balancer) is only found dead when next used; the store then runs that call once more on a
new connection. Repeating is safe: reads change nothing, and an append checks its version, and
on the retry recognises its own records if the first attempt had committed after all.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .._pg import PgLink
from .base import (
    SessionConflictError,
    SessionInfo,
    SessionStore,
    SessionStoreError,
    check_complete,
    check_name,
)
from .indexes import IndexChange, index_change
from .runlog_base import RunLogStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentkit_sessions (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    updated_ms BIGINT NOT NULL,
    markers INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS agentkit_messages (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
"""

WAITING = "agentkit_waiting_calls"
"""The approval index (:mod:`agentkit.sessions.indexes`): one row per call that waits. Not in
:data:`SCHEMA`: a database written before the store kept it gets it filled when first opened."""


class PostgresStore(SessionStore):
    """Sessions in the PostgreSQL database at ``url`` (``postgresql://user@host:port/db``).

    One connection per store, shared by its threads under a lock. A connection found dead when
    a call uses it is replaced and the call run again once (see the module's docstring); a
    server that is down gives :class:`SessionStoreError`, and the next call reconnects.
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._timeout = timeout
        self._link = PgLink(
            url, timeout, SessionStoreError, "PostgreSQL session store", "PostgresStore"
        )
        self._psycopg: Any = self._link._psycopg
        self._transact = self._link.transact

        def create(cur: Any, _retry: bool) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(726611)")  # two creators of the schema
            cur.execute(SCHEMA)
            _make_indexes(cur)

        self._transact(create)

    def load(self, name: str) -> tuple[list[str], int]:
        # An append whose COMMIT is on its way holds the session's row, and may commit after
        # the process that sent it died (a SIGKILLed run): wait for it, so that this read, and
        # a resumer's memory made from it, is not older than an append already made. The wait
        # is bounded (a transaction left open by a client that hangs): then read anyway.
        self._transact(lambda cur, _retry: self._wait_for_appends(cur, name))

        def read(cur: Any, _retry: bool) -> tuple[Any, list[Any]]:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            cur.execute("SELECT version FROM agentkit_sessions WHERE name = %s", (name,))
            row = cur.fetchone()
            cur.execute(
                "SELECT seq, record FROM agentkit_messages WHERE session = %s ORDER BY seq",
                (name,),
            )
            return row, cur.fetchall()

        row, rows = self._transact(read)
        version = int(row[0]) if row else 0
        check_complete(self, name, [int(seq) for seq, _ in rows], version)
        return [record for _, record in rows], version

    def _wait_for_appends(self, cur: Any, name: str) -> None:
        """Wait, at most the store's timeout, until no append of session ``name`` is under
        way (in the caller's transaction)."""
        cur.execute(
            "SELECT set_config('lock_timeout', %s, true)", (f"{int(self._timeout * 1000)}ms",)
        )
        try:
            with cur.connection.transaction():  # a savepoint: a timeout leaves the rest usable
                cur.execute("SELECT 1 FROM agentkit_sessions WHERE name = %s FOR SHARE", (name,))
        except self._psycopg.errors.LockNotAvailable:
            pass  # held too long: the read goes on, as a read that came first would

    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        check_name(name)
        now = int(time.time() * 1000)

        change = index_change(records)

        def write(cur: Any, retry: bool) -> int:
            cur.execute(
                "INSERT INTO agentkit_sessions (name, version, updated_ms) VALUES (%s, 0, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (name, now),
            )
            cur.execute("SELECT version FROM agentkit_sessions WHERE name = %s FOR UPDATE", (name,))
            (version,) = cur.fetchone()
            if version != expected_version:
                if retry and version == expected_version + len(records):
                    cur.execute(
                        "SELECT record FROM agentkit_messages WHERE session = %s AND seq >= %s "
                        "ORDER BY seq",
                        (name, expected_version),
                    )
                    if [r[0] for r in cur.fetchall()] == list(records):
                        return int(version)  # the first attempt committed before the link died
                raise SessionConflictError(name, expected_version, version)
            cur.executemany(
                "INSERT INTO agentkit_messages (session, seq, record) VALUES (%s, %s, %s)",
                [(name, version + i, record) for i, record in enumerate(records)],
            )
            new_version = version + len(records)
            cur.execute(
                "UPDATE agentkit_sessions SET version = %s, updated_ms = %s, "
                "markers = markers + %s WHERE name = %s",
                (new_version, now, change.markers, name),
            )
            if change.approvals:
                _index(cur, name, change)
            return int(new_version)

        return self._transact(write)

    def awaiting_approval(self) -> list[SessionInfo]:
        def read(cur: Any, _retry: bool) -> list[Any]:
            cur.execute(
                "SELECT name, version - markers, updated_ms FROM agentkit_sessions "
                f"WHERE version > 0 AND name IN (SELECT session FROM {WAITING}) ORDER BY name"
            )
            return list(cur.fetchall())

        rows = self._transact(read)
        return [SessionInfo(name, int(version), int(updated)) for name, version, updated in rows]

    def list(self) -> list[SessionInfo]:
        def read(cur: Any, _retry: bool) -> list[Any]:
            cur.execute(
                "SELECT name, version - markers, updated_ms FROM agentkit_sessions "
                "WHERE version > 0 ORDER BY name"
            )
            return list(cur.fetchall())

        rows = self._transact(read)
        return [SessionInfo(name, int(version), int(updated)) for name, version, updated in rows]

    def delete(self, name: str) -> bool:
        def remove(cur: Any, _retry: bool) -> bool:
            cur.execute("DELETE FROM agentkit_messages WHERE session = %s", (name,))
            _index(cur, name, IndexChange(clear=True))
            cur.execute("DELETE FROM agentkit_sessions WHERE name = %s", (name,))
            return bool(cur.rowcount)

        return self._transact(remove)

    def _open_run_log(self) -> RunLogStore:
        from .runlog_postgres import PostgresRunLog

        return PostgresRunLog(self.url, timeout=self._link._timeout)

    def close(self) -> None:
        self._close_run_log()
        self._link.close()


def _make_indexes(cur: Any) -> None:
    """Make the indexes (:mod:`~agentkit.sessions.indexes`) a database written before the
    store kept them lacks, filled from the sessions stored; the caller holds the schema's
    lock."""
    cur.execute("SELECT to_regclass(%s)", (WAITING,))
    no_table = cur.fetchone()[0] is None
    cur.execute(
        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = 'agentkit_sessions' AND column_name = 'markers'"
    )
    no_column = cur.fetchone() is None
    if no_table:
        cur.execute(
            f"CREATE TABLE {WAITING} (session TEXT NOT NULL, call_id TEXT NOT NULL, "
            "PRIMARY KEY (session, call_id))"
        )
    if no_column:
        cur.execute("ALTER TABLE agentkit_sessions ADD COLUMN markers INTEGER NOT NULL DEFAULT 0")
    if not (no_table or no_column):
        return
    cur.execute(
        "SELECT DISTINCT session FROM agentkit_messages WHERE record LIKE %s OR record LIKE %s",
        ('%"approval_request"%', '%"deferred"%'),
    )
    for (name,) in cur.fetchall():
        cur.execute(
            "SELECT record FROM agentkit_messages WHERE session = %s ORDER BY seq", (name,)
        )
        change = index_change(r for (r,) in cur.fetchall())
        if no_table:
            _index(cur, name, IndexChange(added=change.added))
        if no_column:
            cur.execute(
                "UPDATE agentkit_sessions SET markers = %s WHERE name = %s", (change.markers, name)
            )


def _index(cur: Any, name: str, change: IndexChange) -> None:
    """Apply ``change`` to the session's rows of the approval index (in the caller's
    transaction)."""
    if change.clear:
        cur.execute(f"DELETE FROM {WAITING} WHERE session = %s", (name,))
    if change.removed:
        cur.execute(
            f"DELETE FROM {WAITING} WHERE session = %s AND call_id = ANY(%s)",
            (name, sorted(change.removed)),
        )
    if change.added:
        cur.executemany(
            f"INSERT INTO {WAITING} (session, call_id) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            [(name, call_id) for call_id in sorted(change.added)],
        )
