"""The default session store: one SQLite file in WAL mode (the standard library, no server).

Several processes may share the file. An append runs in one ``BEGIN IMMEDIATE`` transaction
(check the version, insert the records, bump the version), so two writers never interleave and
the later one gets :class:`SessionConflictError`. ``synchronous=FULL`` makes a committed append
survive a crash of the process or the machine.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

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
    updated_ms INTEGER NOT NULL,
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
:data:`SCHEMA`: a file written before the store kept it gets it filled when first opened."""


class SqliteStore(SessionStore):
    """Sessions in the SQLite file at ``path`` (created with its directory if missing)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.url = f"sqlite:///{self.path}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Guards _db: one connection, shared by the threads that use this store.
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
            self._set_up(time.monotonic() + timeout)
        except sqlite3.Error as exc:
            raise SessionStoreError(f"cannot open the session file {self.path}: {exc}") from exc

    def _set_up(self, deadline: float) -> None:
        """Put the file in WAL mode and make the tables, retrying until ``deadline`` while
        another connection holds the lock. Two connections turning a new file to WAL at once
        would deadlock, so SQLite answers one of them "database is locked" at once, without
        waiting out its busy timeout: that one tries again."""
        delay = 0.005
        while True:
            try:
                if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(SCHEMA)
                self._index_set_up()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                    raise
            time.sleep(delay)  # the other connection finishes its switch in milliseconds
            delay = min(delay * 2, 0.1)

    def _index_set_up(self) -> None:
        """Make the indexes (:mod:`~agentkit.sessions.indexes`), filled from the sessions
        already stored (a file written before the store kept them), in one write transaction: a
        second process opening the file waits, then finds them made."""
        if self._missing() == (False, False):
            return  # the usual case, without taking the write lock
        self._db.execute("BEGIN IMMEDIATE")
        try:
            no_table, no_column = self._missing()
            if no_table:
                self._db.execute(
                    f"CREATE TABLE {WAITING} (session TEXT NOT NULL, call_id TEXT NOT NULL, "
                    "PRIMARY KEY (session, call_id))"
                )
            if no_column:
                self._db.execute(
                    "ALTER TABLE agentkit_sessions ADD COLUMN markers INTEGER NOT NULL DEFAULT 0"
                )
            if no_table or no_column:
                self._fill_indexes(no_table, no_column)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _missing(self) -> tuple[bool, bool]:
        """Whether the approval index table is missing, and the marker count column."""
        table = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (WAITING,)
        ).fetchone()
        columns = self._db.execute("PRAGMA table_info(agentkit_sessions)").fetchall()
        return not table, "markers" not in {column[1] for column in columns}

    def _fill_indexes(self, waiting: bool, markers: bool) -> None:
        """Fill the approval index (``waiting``) and the marker counts (``markers``) from the
        sessions stored (in the caller's transaction)."""
        names = self._db.execute(
            "SELECT DISTINCT session FROM agentkit_messages WHERE record LIKE ? OR record LIKE ?",
            ('%"approval_request"%', '%"deferred"%'),
        ).fetchall()
        for (name,) in names:
            records = self._db.execute(
                "SELECT record FROM agentkit_messages WHERE session = ? ORDER BY seq", (name,)
            ).fetchall()
            change = index_change(r for (r,) in records)
            if waiting:
                self._index(name, IndexChange(added=change.added))
            if markers:
                self._db.execute(
                    "UPDATE agentkit_sessions SET markers = ? WHERE name = ?",
                    (change.markers, name),
                )

    def _index(self, name: str, change: IndexChange) -> None:
        """Apply ``change`` to the session's rows of the approval index (in the caller's
        transaction)."""
        if change.clear:
            self._db.execute(f"DELETE FROM {WAITING} WHERE session = ?", (name,))
        self._db.executemany(
            f"DELETE FROM {WAITING} WHERE session = ? AND call_id = ?",
            [(name, call_id) for call_id in change.removed],
        )
        self._db.executemany(
            f"INSERT OR IGNORE INTO {WAITING} (session, call_id) VALUES (?, ?)",
            [(name, call_id) for call_id in change.added],
        )

    def load(self, name: str) -> tuple[list[str], int]:
        with self._lock, self._errors():
            self._db.execute("BEGIN")  # one snapshot for both reads
            try:
                row = self._db.execute(
                    "SELECT version FROM agentkit_sessions WHERE name = ?", (name,)
                ).fetchone()
                rows = self._db.execute(
                    "SELECT seq, record FROM agentkit_messages WHERE session = ? ORDER BY seq",
                    (name,),
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        version = row[0] if row else 0
        check_complete(self, name, [seq for seq, _ in rows], version)
        return [record for _, record in rows], version

    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        check_name(name)
        change = index_change(records)
        with self._lock, self._errors():
            self._db.execute("BEGIN IMMEDIATE")  # the write lock, before reading the version
            try:
                row = self._db.execute(
                    "SELECT version FROM agentkit_sessions WHERE name = ?", (name,)
                ).fetchone()
                version = row[0] if row else 0
                if version != expected_version:
                    raise SessionConflictError(name, expected_version, version)
                self._db.executemany(
                    "INSERT INTO agentkit_messages (session, seq, record) VALUES (?, ?, ?)",
                    [(name, version + i, record) for i, record in enumerate(records)],
                )
                new_version = version + len(records)
                self._db.execute(
                    "INSERT INTO agentkit_sessions (name, version, updated_ms, markers) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
                    "version = excluded.version, updated_ms = excluded.updated_ms, "
                    "markers = agentkit_sessions.markers + excluded.markers",
                    (name, new_version, int(time.time() * 1000), change.markers),
                )
                if change.approvals:
                    self._index(name, change)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return new_version

    def awaiting_approval(self) -> list[SessionInfo]:
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT name, version - markers, updated_ms FROM agentkit_sessions "
                f"WHERE version > 0 AND name IN (SELECT session FROM {WAITING}) ORDER BY name"
            ).fetchall()
        return [SessionInfo(name, version, updated) for name, version, updated in rows]

    def list(self) -> list[SessionInfo]:
        with self._lock, self._errors():
            rows = self._db.execute(
                "SELECT name, version - markers, updated_ms FROM agentkit_sessions "
                "WHERE version > 0 ORDER BY name"
            ).fetchall()
        return [SessionInfo(name, version, updated) for name, version, updated in rows]

    def delete(self, name: str) -> bool:
        with self._lock, self._errors():
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM agentkit_messages WHERE session = ?", (name,))
                self._index(name, IndexChange(clear=True))
                gone = self._db.execute("DELETE FROM agentkit_sessions WHERE name = ?", (name,))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return gone.rowcount > 0

    def _open_run_log(self) -> RunLogStore:
        from .runlog_sqlite import SqliteRunLog

        return SqliteRunLog(self.path)

    def close(self) -> None:
        self._close_run_log()
        with self._lock:
            self._db.close()

    def _errors(self) -> _Translate:
        return _Translate(self.path)


class _Translate:
    """Turns sqlite3's errors into :class:`SessionStoreError` naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:  # fmt: skip
        if exc is not None and isinstance(exc, sqlite3.Error):
            raise SessionStoreError(f"session file {self.path}: {exc}") from exc
