"""Run logs in the session store's PostgreSQL database: tables of their own beside the sessions'.

Every change (events, an end, a command) is announced with ``NOTIFY agentkit_runlog``; one
thread per process (``agentkit-runlog-listen``, started by the first wait, ended when nobody
has waited for a while or the log is closed) listens on a connection of its own and wakes the
waits of this process, so an event or an abort sent from another process is noticed within
milliseconds. A notification lost while that connection was down is made up for by a look every
second. Times are the server's (``clock_timestamp()``), so heartbeats compare across machines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from .._pg import PgLink, safe_url
from ..errors import SessionStoreError
from .runlog_base import (
    Changes,
    Command,
    Entry,
    RunInfo,
    RunLogStore,
    check_run_id,
    parse_end,
    wait_for,
)

CHANNEL = "agentkit_runlog"

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentkit_runs (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    live BOOLEAN NOT NULL,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    ended_ms BIGINT,
    last_seq INTEGER NOT NULL,
    applied TEXT NOT NULL DEFAULT '0',
    end_record TEXT
);
CREATE INDEX IF NOT EXISTS agentkit_runs_by_session ON agentkit_runs (session, started_ms);
CREATE INDEX IF NOT EXISTS agentkit_runs_by_start ON agentkit_runs (started_ms);
CREATE INDEX IF NOT EXISTS agentkit_runs_by_end ON agentkit_runs (live, ended_ms);
CREATE TABLE IF NOT EXISTS agentkit_run_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS agentkit_run_commands (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    command TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agentkit_run_commands_by_run ON agentkit_run_commands (run_id, id);
"""

_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
_COLUMNS = (
    f"id, session, live, started_ms, {_NOW} - heartbeat_ms, ended_ms, last_seq, applied, "
    "end_record"
)

LISTENER_IDLE = 10.0
"""Seconds the listening thread goes on without a wait in this process before it ends (the
next wait starts it again)."""


class PostgresRunLog(RunLogStore):
    """The run logs in the PostgreSQL database at ``url``, on connections of their own."""

    poll = 1.0

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self._sql = PgLink(url, timeout, SessionStoreError, "PostgreSQL run log", "PostgresRunLog")
        self._psycopg: Any = self._sql._psycopg
        self.url = safe_url(url)  # what messages name: never the password
        self._connect_url = url
        self._timeout = timeout
        self.changes = Changes()
        # Guards _listener, _waiters and _last_wait: which thread listens, how many waits are
        # under way, and when the last one ended.
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._waiters = 0
        self._last_wait = 0.0
        self._closing = threading.Event()

        def create(cur: Any, _retry: bool) -> None:
            # Made once: even "IF NOT EXISTS", an index's DDL locks its table, which would make
            # each new process (a web worker starting) wait for, or deadlock with, live runs.
            cur.execute("SELECT to_regclass('agentkit_run_commands_by_run') IS NOT NULL")
            if cur.fetchone()[0]:
                return
            cur.execute("SELECT pg_advisory_xact_lock(726612)")  # two creators of the schema
            cur.execute(SCHEMA)

        self._sql.transact(create)

    def _notify(self, cur: Any, run_id: str) -> None:
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, run_id))  # sent at commit

    def start(self, run_id: str, session: str) -> RunInfo:
        check_run_id(run_id)
        keep_ms = int(self.keep * 1000)
        prune = self.prune_due()

        def write(cur: Any, _retry: bool) -> Any:
            if prune:
                self._prune(cur, keep_ms)
            cur.execute(
                "INSERT INTO agentkit_runs (id, session, live, started_ms, heartbeat_ms, "
                f"last_seq) VALUES (%s, %s, TRUE, {_NOW}, {_NOW}, 0) ON CONFLICT (id) DO UPDATE "
                "SET live = TRUE, heartbeat_ms = excluded.heartbeat_ms, ended_ms = NULL, "
                "end_record = NULL",
                (run_id, session),
            )
            cur.execute(f"SELECT {_COLUMNS} FROM agentkit_runs WHERE id = %s", (run_id,))
            row = cur.fetchone()
            self._notify(cur, run_id)
            return row

        return _info(self._sql.transact(write))

    @staticmethod
    def _prune(cur: Any, keep_ms: int) -> None:
        cur.execute(
            "WITH old AS (SELECT id FROM agentkit_runs WHERE NOT live AND ended_ms < "
            f"{_NOW} - %s LIMIT 100), e AS (DELETE FROM agentkit_run_events WHERE run_id IN "
            "(SELECT id FROM old)), c AS (DELETE FROM agentkit_run_commands WHERE run_id IN "
            "(SELECT id FROM old)) DELETE FROM agentkit_runs WHERE id IN (SELECT id FROM old)",
            (keep_ms,),
        )

    def append(self, run_id: str, entries: Sequence[Entry]) -> bool:
        if not entries:
            return self.beat(run_id)

        def write(cur: Any, retry: bool) -> bool:
            cur.execute(
                "SELECT live, last_seq FROM agentkit_runs WHERE id = %s FOR UPDATE", (run_id,)
            )
            row = cur.fetchone()
            if not row or not row[0]:
                return False
            if retry and row[1] >= entries[-1][0]:
                return True  # the first attempt committed before the connection died
            cur.executemany(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (%s, %s, %s)",
                [(run_id, seq, record) for seq, record in entries],
            )
            cur.execute(
                f"UPDATE agentkit_runs SET last_seq = %s, heartbeat_ms = {_NOW} WHERE id = %s",
                (entries[-1][0], run_id),
            )
            self._notify(cur, run_id)
            return True

        written = self._sql.transact(write)
        if written:
            self.changes.mark()
        return written

    def beat(self, run_id: str) -> bool:
        def write(cur: Any, _retry: bool) -> bool:
            cur.execute(
                f"UPDATE agentkit_runs SET heartbeat_ms = {_NOW} WHERE id = %s AND live",
                (run_id,),
            )
            return bool(cur.rowcount)

        return self._sql.transact(write)

    def end(self, run_id: str, record: str, stale_ms: int | None = None) -> int | None:
        def write(cur: Any, _retry: bool) -> int | None:
            cur.execute(
                f"SELECT live, {_NOW} - heartbeat_ms, last_seq FROM agentkit_runs WHERE id = %s "
                "FOR UPDATE",
                (run_id,),
            )
            row = cur.fetchone()
            if not row or not row[0] or (stale_ms is not None and row[1] < stale_ms):
                return None
            seq = int(row[2]) + 1
            cur.execute(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (%s, %s, %s)",
                (run_id, seq, record),
            )
            cur.execute(
                f"UPDATE agentkit_runs SET live = FALSE, last_seq = %s, ended_ms = {_NOW}, "
                "end_record = %s WHERE id = %s",
                (seq, record, run_id),
            )
            self._notify(cur, run_id)
            return seq

        seq = self._sql.transact(write)
        self.changes.mark()
        return seq

    def read(self, run_id: str, after: int, limit: int, wait: float = 0.0) -> list[Entry]:
        def fetch() -> list[Entry]:
            def select(cur: Any, _retry: bool) -> list[Any]:
                cur.execute(
                    "SELECT seq, record FROM agentkit_run_events WHERE run_id = %s AND seq > %s "
                    "ORDER BY seq LIMIT %s",
                    (run_id, after, limit),
                )
                return list(cur.fetchall())

            return [(int(seq), record) for seq, record in self._sql.transact(select)]

        return self._waiting(fetch, wait)

    def _waiting(self, fetch: Any, wait: float, key: str | None = None) -> Any:
        if wait <= 0:
            return fetch()
        self._listen()
        try:
            return wait_for(fetch, self.changes, wait, self.poll, key)
        finally:
            with self._lock:
                self._waiters -= 1
                self._last_wait = time.monotonic()

    def info(self, run_id: str) -> RunInfo | None:
        def select(cur: Any, _retry: bool) -> Any:
            cur.execute(f"SELECT {_COLUMNS} FROM agentkit_runs WHERE id = %s", (run_id,))
            return cur.fetchone()

        row = self._sql.transact(select)
        return _info(row) if row else None

    def runs(self, session: str | None = None, *, live: bool = False, limit: int = 100
             ) -> list[RunInfo]:  # fmt: skip
        where, args = [], []
        if session is not None:
            where.append("session = %s")
            args.append(session)
        if live:
            where.append("live")
        clause = f"WHERE {' AND '.join(where)}" if where else ""

        def select(cur: Any, _retry: bool) -> list[Any]:
            cur.execute(
                f"SELECT {_COLUMNS} FROM agentkit_runs {clause} "
                "ORDER BY started_ms DESC, id LIMIT %s",
                (*args, limit),
            )
            return list(cur.fetchall())

        return [_info(row) for row in self._sql.transact(select)]

    def send(self, run_id: str, command: str) -> str:
        def write(cur: Any, _retry: bool) -> str:
            cur.execute(
                "INSERT INTO agentkit_run_commands (run_id, command) VALUES (%s, %s) RETURNING id",
                (run_id, command),
            )
            (command_id,) = cur.fetchone()
            self._notify(cur, run_id)
            return str(command_id)

        command_id = self._sql.transact(write)
        self.changes.mark()
        return command_id

    def commands(self, run_id: str, after: str, wait: float = 0.0) -> list[Command]:
        def fetch() -> list[Command]:
            def select(cur: Any, _retry: bool) -> list[Any]:
                cur.execute(
                    "SELECT id, command FROM agentkit_run_commands WHERE run_id = %s AND id > %s "
                    "ORDER BY id",
                    (run_id, int(after)),
                )
                return list(cur.fetchall())

            return [(str(i), command) for i, command in self._sql.transact(select)]

        return self._waiting(fetch, wait, key=run_id)

    def applied(self, run_id: str, command_id: str) -> None:
        def write(cur: Any, _retry: bool) -> None:
            cur.execute("UPDATE agentkit_runs SET applied = %s WHERE id = %s", (command_id, run_id))

        self._sql.transact(write)

    def wake(self, run_id: str) -> None:
        self.changes.wake(run_id)

    def replace(self, run_id: str, first: int, last: int, entries: Sequence[Entry]) -> None:
        def write(cur: Any, _retry: bool) -> None:
            cur.execute(
                "DELETE FROM agentkit_run_events WHERE run_id = %s AND seq >= %s AND seq <= %s",
                (run_id, first, last),
            )
            cur.executemany(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (%s, %s, %s)",
                [(run_id, seq, record) for seq, record in entries],
            )

        self._sql.transact(write)

    # --- the listening thread ---------------------------------------------------------------

    def _listen(self) -> None:
        """Count a wait that begins, and make sure a thread listens for other processes'
        changes meanwhile."""
        with self._lock:
            self._waiters += 1
            if self._listener is None and not self._closing.is_set():
                self._listener = threading.Thread(
                    target=self._serve, name="agentkit-runlog-listen", daemon=True
                )
                self._listener.start()

    def _serve(self) -> None:
        me = threading.current_thread()
        try:
            while True:
                try:
                    with self._psycopg.connect(self._connect_url, autocommit=True,
                                               connect_timeout=int(self._timeout)) as conn:  # fmt: skip
                        conn.execute(f"LISTEN {CHANNEL}")
                        self.changes.mark()  # listening now: look again at what may have come
                        while True:
                            for _ in conn.notifies(timeout=0.5):
                                self.changes.mark()
                            if self._stopping(me):
                                return
                except self._psycopg.Error:  # the server went away: waits poll meanwhile
                    if self._closing.wait(1.0) or self._stopping(me):
                        return
        finally:
            with self._lock:
                if self._listener is me:
                    self._listener = None

    def _stopping(self, me: threading.Thread) -> bool:
        """Whether the listening thread ``me`` ends now: the log is closing, or nobody in this
        process waited for :data:`LISTENER_IDLE` seconds (it is then no longer the listener,
        so the next wait starts another)."""
        with self._lock:
            idle = not self._waiters and time.monotonic() - self._last_wait > LISTENER_IDLE
            if self._closing.is_set() or idle:
                if self._listener is me:
                    self._listener = None
                return True
            return False

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            listener = self._listener
        if listener is not None and listener is not threading.current_thread():
            listener.join()
        self._sql.close()


def _info(row: Any) -> RunInfo:
    run_id, session, live, started, age, ended, last_seq, applied, end = row
    return RunInfo(
        id=run_id, session=session, live=bool(live), started_ms=int(started),
        last_seq=int(last_seq), heartbeat_age_ms=max(0, int(age)),
        ended_ms=None if ended is None else int(ended), end=parse_end(end), applied=applied,
    )  # fmt: skip
