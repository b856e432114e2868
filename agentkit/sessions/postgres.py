"""Sessions in PostgreSQL through psycopg 3 (``pip install 'agentkit[postgres]'``): what Django
and Flask deployments already have.

An append is one transaction that locks the session's row (``SELECT ... FOR UPDATE``), checks
the version, inserts the records and bumps the version; a concurrent writer waits for the lock,
then sees the new version and gets :class:`SessionConflictError`. A committed append is durable
(PostgreSQL's WAL).

A connection the server closed while it sat idle is run again once on a new connection
(:mod:`agentkit._pg`). Repeating is safe: reads change nothing, and an append checks its
version, and on the retry recognises its own records if the first attempt had committed after
all.
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

    One connection per store, shared by its threads under a lock. A connection found dead when
    a call uses it is replaced and the call run again once (see the module's docstring); a
    server that is down gives :class:`SessionStoreError`, and the next call reconnects.
    """

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._link = PgLink(
            url, timeout, SessionStoreError, "PostgreSQL session store", "PostgresStore"
        )
        self._transact = self._link.transact

        def create(cur: Any, _retry: bool) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(726611)")  # two creators of the schema
            cur.execute(SCHEMA)

        self._transact(create)

    def load(self, name: str) -> tuple[list[str], int]:
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

    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        check_name(name)
        now = int(time.time() * 1000)

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
                "UPDATE agentkit_sessions SET version = %s, updated_ms = %s WHERE name = %s",
                (new_version, now, name),
            )
            return int(new_version)

        return self._transact(write)

    def list(self) -> list[SessionInfo]:
        def read(cur: Any, _retry: bool) -> list[Any]:
            cur.execute(
                "SELECT name, version, updated_ms FROM agentkit_sessions WHERE version > 0 "
                "ORDER BY name"
            )
            return list(cur.fetchall())

        rows = self._transact(read)
        return [SessionInfo(name, int(version), int(updated)) for name, version, updated in rows]

    def delete(self, name: str) -> bool:
        def remove(cur: Any, _retry: bool) -> bool:
            cur.execute("DELETE FROM agentkit_messages WHERE session = %s", (name,))
            cur.execute("DELETE FROM agentkit_sessions WHERE name = %s", (name,))
            return bool(cur.rowcount)

        return self._transact(remove)

    def close(self) -> None:
        self._link.close()
