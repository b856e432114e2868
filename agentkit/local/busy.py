"""Whether a kept model server is busy with another process's request, told before a wait.

The kept server (:mod:`.kept`) answers one request at a time: a second process's request waits
in the server's queue, silently, for as long as the first one takes (minutes behind a long
prompt on a small machine). :class:`ServerTurns` lets the processes that share a server see
each other: each holds an exclusive lock on the server's ``server.requests`` file while one of
its requests is under way, and a process that finds the lock taken as it sends a request says
so once (``on_busy``), then sends it all the same: the server's queue does the waiting, so
nothing here ever blocks or needs to be aborted.

It tells, it does not order: while one request is served and two wait, the two both see it
busy; once the first ends, neither holds the lock until its own turn. A process that dies
holding the lock lets go of it with its last file descriptor.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

REQUESTS_FILE = "server.requests"
"""The file whose exclusive lock a process holds while one of its requests is under way."""


class ServerTurns:
    """One process's side of a kept server's request lock (see the module).

    Call :meth:`sending` as a request is sent and :meth:`answered` once its response ended,
    and :meth:`new_run` as a run starts (``on_busy`` is called at most once a run); any
    thread may call them. :meth:`close` lets go of the file."""

    def __init__(self, directory: Path, on_busy: Callable[[], None]) -> None:
        self.path = directory / REQUESTS_FILE
        self.on_busy = on_busy
        self._fd: int | None = None
        self._held = False
        self._told = False
        self._lock = threading.Lock()  # guards the fields: a judge's request comes aside

    def sending(self) -> bool:
        """A request is being sent: take the lock if it is free; if another process holds it,
        call ``on_busy`` (once a run). Whether the server was free. A file that cannot be
        opened or locked (a read-only folder, say) counts as free: the notice is a courtesy."""
        with self._lock:
            if self._held:
                return True
            try:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                tell, self._told = not self._told, True
            except OSError:
                return True
            else:
                self._held = True
                return True
        if tell:  # outside the lock: the caller's notice may take its own locks
            self.on_busy()
        return False

    def answered(self) -> None:
        """The response ended (however it ended): let another process's request be seen."""
        with self._lock:
            if self._held and self._fd is not None:
                self._held = False
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def new_run(self) -> None:
        """A run starts: its first wait is told again."""
        with self._lock:
            self._told = False

    def close(self) -> None:
        """Let go of the lock and the file."""
        with self._lock:
            fd, self._fd, self._held = self._fd, None, False
        if fd is not None:
            os.close(fd)
