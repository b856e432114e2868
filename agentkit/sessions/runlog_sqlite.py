"""Run logs in the session store's SQLite file: tables of their own beside the sessions'.

Another process's events and commands are noticed by polling every :attr:`SqliteRunLog.poll`
seconds (SQLite tells nobody of a change); this process's own are noticed at once. The log has
a connection of its own with ``synchronous=NORMAL``: in WAL mode a crash of the process loses
nothing committed, and a power cut may lose the last events, which only watchers read (the
session's messages, the durable record, keep ``FULL``).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import SessionStoreError
from .runlog_base import (
    Changes,
    Command,
    Entry,
    RunInfo,
    RunLogStore,
    check_run_id,
    now_ms,
    parse_end,
    wait_for,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentkit_runs (
    id TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    live INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL,
    ended_ms INTEGER,
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
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS agentkit_run_commands (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    command TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agentkit_run_commands_by_run ON agentkit_run_commands (run_id, id);
"""

_COLUMNS = "id, session, live, started_ms, heartbeat_ms, ended_ms, last_seq, applied, end_record"


class SqliteRunLog(RunLogStore):
    """The run logs in the SQLite file at ``path``."""

    poll = 0.05

    def __init__(self, path: Path, *, timeout: float = 30.0) -> None:
        self.path = path
        self.url = f"sqlite:///{path}"
        self.changes = Changes()
        # Guards _db: one connection, shared by the threads that use this log.
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(f"BEGIN IMMEDIATE; {SCHEMA} COMMIT;")
        except sqlite3.Error as exc:
            raise SessionStoreError(f"cannot open the run log in {path}: {exc}") from exc

    @contextmanager
    def _transaction(self, kind: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """The connection inside one transaction (``IMMEDIATE``: the write lock first), under
        the lock; sqlite3's errors become :class:`SessionStoreError`."""
        with self._lock:
            try:
                self._db.execute(f"BEGIN {kind}")
                try:
                    yield self._db
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                raise SessionStoreError(f"run log in {self.path}: {exc}") from exc

    def start(self, run_id: str, session: str) -> RunInfo:
        check_run_id(run_id)
        now = now_ms()
        with self._transaction() as db:
            if self.prune_due():
                self._prune(db, now)
            db.execute(
                "INSERT INTO agentkit_runs (id, session, live, started_ms, heartbeat_ms, last_seq)"
                " VALUES (?, ?, 1, ?, ?, 0) ON CONFLICT(id) DO UPDATE SET live = 1, "
                "heartbeat_ms = excluded.heartbeat_ms, ended_ms = NULL, end_record = NULL",
                (run_id, session, now, now),
            )
            row = db.execute(
                f"SELECT {_COLUMNS} FROM agentkit_runs WHERE id = ?", (run_id,)
            ).fetchone()
        self.changes.mark()
        return _info(row, now)

    def _prune(self, db: sqlite3.Connection, now: int) -> None:
        before = now - int(self.keep * 1000)
        old = [r[0] for r in db.execute(
            "SELECT id FROM agentkit_runs WHERE live = 0 AND ended_ms < ? LIMIT 100", (before,)
        )]  # fmt: skip
        for run_id in old:
            db.execute("DELETE FROM agentkit_run_events WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM agentkit_run_commands WHERE run_id = ?", (run_id,))
            db.execute("DELETE FROM agentkit_runs WHERE id = ?", (run_id,))

    def append(self, run_id: str, entries: Sequence[Entry]) -> bool:
        if not entries:
            return self.beat(run_id)
        with self._transaction() as db:
            row = db.execute("SELECT live FROM agentkit_runs WHERE id = ?", (run_id,)).fetchone()
            if not row or not row[0]:
                return False
            db.executemany(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (?, ?, ?)",
                [(run_id, seq, record) for seq, record in entries],
            )
            db.execute(
                "UPDATE agentkit_runs SET last_seq = ?, heartbeat_ms = ? WHERE id = ?",
                (entries[-1][0], now_ms(), run_id),
            )
        self.changes.mark()
        return True

    def beat(self, run_id: str) -> bool:
        with self._transaction() as db:
            done = db.execute(
                "UPDATE agentkit_runs SET heartbeat_ms = ? WHERE id = ? AND live = 1",
                (now_ms(), run_id),
            )
            return done.rowcount > 0

    def end(self, run_id: str, record: str, stale_ms: int | None = None) -> int | None:
        now = now_ms()
        with self._transaction() as db:
            row = db.execute(
                "SELECT live, heartbeat_ms, last_seq FROM agentkit_runs WHERE id = ?", (run_id,)
            ).fetchone()
            if not row or not row[0] or (stale_ms is not None and now - row[1] < stale_ms):
                return None
            seq = row[2] + 1
            db.execute(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (?, ?, ?)",
                (run_id, seq, record),
            )
            db.execute(
                "UPDATE agentkit_runs SET live = 0, last_seq = ?, ended_ms = ?, end_record = ? "
                "WHERE id = ?",
                (seq, now, record, run_id),
            )
        self.changes.mark()
        return seq

    def read(self, run_id: str, after: int, limit: int, wait: float = 0.0) -> list[Entry]:
        def fetch() -> list[Entry]:
            with self._transaction("DEFERRED") as db:
                return [(int(seq), record) for seq, record in db.execute(
                    "SELECT seq, record FROM agentkit_run_events WHERE run_id = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?", (run_id, after, limit),
                )]  # fmt: skip

        return wait_for(fetch, self.changes, wait, self.poll)

    def info(self, run_id: str) -> RunInfo | None:
        with self._transaction("DEFERRED") as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM agentkit_runs WHERE id = ?", (run_id,)
            ).fetchone()
        return _info(row, now_ms()) if row else None

    def runs(self, session: str | None = None, *, live: bool = False, limit: int = 100
             ) -> list[RunInfo]:  # fmt: skip
        where, args = [], []
        if session is not None:
            where.append("session = ?")
            args.append(session)
        if live:
            where.append("live = 1")
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._transaction("DEFERRED") as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM agentkit_runs {clause} "
                "ORDER BY started_ms DESC, id LIMIT ?", (*args, limit),
            ).fetchall()  # fmt: skip
        now = now_ms()
        return [_info(row, now) for row in rows]

    def send(self, run_id: str, command: str) -> str:
        with self._transaction() as db:
            cursor = db.execute(
                "INSERT INTO agentkit_run_commands (run_id, command) VALUES (?, ?)",
                (run_id, command),
            )
            command_id = str(cursor.lastrowid)
        self.changes.mark()
        return command_id

    def commands(self, run_id: str, after: str, wait: float = 0.0) -> list[Command]:
        def fetch() -> list[Command]:
            with self._transaction("DEFERRED") as db:
                return [(str(i), command) for i, command in db.execute(
                    "SELECT id, command FROM agentkit_run_commands WHERE run_id = ? AND id > ? "
                    "ORDER BY id", (run_id, int(after)),
                )]  # fmt: skip

        return wait_for(fetch, self.changes, wait, self.poll, key=run_id)

    def applied(self, run_id: str, command_id: str) -> None:
        with self._transaction() as db:
            db.execute("UPDATE agentkit_runs SET applied = ? WHERE id = ?", (command_id, run_id))

    def wake(self, run_id: str) -> None:
        self.changes.wake(run_id)

    def replace(self, run_id: str, first: int, last: int, entries: Sequence[Entry]) -> None:
        with self._transaction() as db:
            db.execute(
                "DELETE FROM agentkit_run_events WHERE run_id = ? AND seq >= ? AND seq <= ?",
                (run_id, first, last),
            )
            db.executemany(
                "INSERT INTO agentkit_run_events (run_id, seq, record) VALUES (?, ?, ?)",
                [(run_id, seq, record) for seq, record in entries],
            )

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _info(row: Any, now: int) -> RunInfo:
    run_id, session, live, started, heartbeat, ended, last_seq, applied, end = row
    return RunInfo(
        id=run_id, session=session, live=bool(live), started_ms=int(started),
        last_seq=int(last_seq), heartbeat_age_ms=max(0, now - int(heartbeat)),
        ended_ms=None if ended is None else int(ended), end=parse_end(end), applied=applied,
    )  # fmt: skip
