"""What a session store keeps for run logs: the :class:`RunLogStore` contract and
:class:`RunInfo`.

A run log is one run's events, in order, each under a sequence number (1, 2, ...), plus a row
that says which session the run belongs to, whether it still runs, when its process last showed
it was alive (its heartbeat) and, once it ended, how. Beside the events it keeps the run's
commands (steer, abort, ...) that other processes send it. A store only stores: what the
records mean, who writes them and when is :mod:`agentkit.runlog`'s.

Records are opaque JSON text here. Sequence numbers are given by the run's one writer, except
the end's, which the store gives (the next number) so that a process declaring a dead run
interrupted and the run itself can never both end it.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import RunLogError

T = TypeVar("T")

PRUNE_EVERY = 60.0
"""Seconds between two prunings of expired run logs by one process."""

Entry = tuple[int, str]
"""One logged event: its sequence number and its JSON record."""

Command = tuple[str, str]
"""One command sent to a run: its id (increasing, as text) and its JSON record."""


@dataclass(frozen=True)
class RunInfo:
    """One run as its store keeps it.

    ``last_seq`` is the sequence number of its last event; ``heartbeat_age_ms`` how long ago,
    by the store's clock, its process last showed it was alive; ``end`` the record of its
    ``run_end`` event once it ended (``end["stop_reason"]`` says how)."""

    id: str
    session: str
    live: bool
    started_ms: int
    last_seq: int
    heartbeat_age_ms: int = 0
    ended_ms: int | None = None
    end: dict[str, Any] | None = None
    applied: str = "0"
    """The id of the last command the run applied (a resumed attempt goes on after it)."""

    @property
    def stop_reason(self) -> str | None:
        """How the run ended (a :data:`~agentkit.results.RunStopReason`, or ``"interrupted"``
        when its process died); ``None`` while it runs."""
        if self.end is None:
            return None
        reason = self.end.get("stop_reason")
        return reason if isinstance(reason, str) else "error"


def parse_end(record: str | None) -> dict[str, Any] | None:
    """A stored end record as data (``None`` for none)."""
    if not record:
        return None
    data = json.loads(record)
    return data if isinstance(data, dict) else None


def check_run_id(run_id: str) -> str:
    """A run id: 1 to 200 printable characters, no whitespace (a Celery task id, a uuid)."""
    if (
        not isinstance(run_id, str)
        or not 0 < len(run_id) <= 200
        or not run_id.isprintable()
        or any(c.isspace() for c in run_id)
    ):
        raise RunLogError(f"invalid run id {run_id!r}: use 1-200 printable characters, no spaces")
    return run_id


class RunLogStore(ABC):
    """The run logs of one session store (``store.run_log()``). Methods may be called from any
    thread; waits are bounded by the ``wait`` they are given, so a caller that loops on them can
    stop between two.

    ``poll`` is how late, at most, a change made by another process is noticed where nothing
    tells of it (SQLite); stores that are told (Redis, PostgreSQL) notice at once.
    """

    poll: float = 0.0
    url: str = ""
    keep: float = 7 * 24 * 3600.0
    """Seconds an ended run's log is kept; :meth:`start` prunes older ones (Redis expires them)."""
    lease: float = 10.0
    """Seconds without a sign of life after which a live run is taken for dead (its process
    beats every quarter of this): set it alike in every process that shares the store."""

    @abstractmethod
    def start(self, run_id: str, session: str) -> RunInfo:
        """Record that run ``run_id`` of ``session`` runs now (beating from now on), and return
        it. A run that is already known (a Celery task delivered again after its worker died)
        runs again under the same id: its log goes on after its last event, its earlier end (an
        interruption) is cleared. Expired logs are pruned here."""

    @abstractmethod
    def append(self, run_id: str, entries: Sequence[Entry]) -> bool:
        """Append events (numbered by the caller, in order) and beat; return ``False``, writing
        nothing, if the run has ended (another process declared it interrupted)."""

    @abstractmethod
    def beat(self, run_id: str) -> bool:
        """Show the run is alive; ``False`` if it has ended meanwhile."""

    @abstractmethod
    def end(self, run_id: str, record: str, stale_ms: int | None = None) -> int | None:
        """End a live run with ``record`` as its last event, numbered after the last one; with
        ``stale_ms``, only if its heartbeat is at least that old (a dead run declared
        interrupted). Return the end's sequence number, or ``None`` if this call did not end it
        (it had ended, or it is not stale)."""

    @abstractmethod
    def read(self, run_id: str, after: int, limit: int, wait: float = 0.0) -> list[Entry]:
        """Up to ``limit`` events numbered above ``after``, in order; when there are none, wait
        up to ``wait`` seconds for some."""

    @abstractmethod
    def info(self, run_id: str) -> RunInfo | None:
        """The run, or ``None`` for a run the store does not know."""

    @abstractmethod
    def runs(self, session: str | None = None, *, live: bool = False, limit: int = 100
             ) -> list[RunInfo]:  # fmt: skip
        """Runs, newest first: of ``session`` (all sessions for ``None``); only live ones with
        ``live``."""

    @abstractmethod
    def send(self, run_id: str, command: str) -> str:
        """Queue a command for the run; return its id."""

    @abstractmethod
    def commands(self, run_id: str, after: str, wait: float = 0.0) -> list[Command]:
        """The run's commands after id ``after``, in order; when there are none, wait up to
        ``wait`` seconds (or until :meth:`wake`) for some."""

    @abstractmethod
    def applied(self, run_id: str, command_id: str) -> None:
        """Remember that the run applied its commands up to ``command_id``."""

    @abstractmethod
    def wake(self, run_id: str) -> None:
        """End this process's waits in :meth:`commands` for the run now (the run is ending)."""

    @abstractmethod
    def replace(self, run_id: str, first: int, last: int, entries: Sequence[Entry]) -> None:
        """Replace the events numbered ``first`` to ``last`` of an ended run with ``entries``
        (numbered within that range), atomically: how deltas are coalesced."""

    def close(self) -> None:  # noqa: B027 - a log without resources of its own needs no close
        """Release the run log's connections and threads."""

    _pruned_at: float | None = None

    def prune_due(self) -> bool:
        """Whether :meth:`start` prunes expired logs now: at most every :data:`PRUNE_EVERY`
        seconds in a process (two threads pruning at once do no harm)."""
        now = time.monotonic()
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return False
        self._pruned_at = now
        return True


class Changes:
    """Changes to a store's run logs seen in this process (its own writes, and for stores that
    are told, other processes' too): a wait in :meth:`RunLogStore.read` or
    :meth:`RunLogStore.commands` ends as soon as one is marked, else after its poll."""

    def __init__(self) -> None:
        # Guards _count and _woken; notified on every change.
        self._cond = threading.Condition()
        self._count = 0
        self._woken: set[str] = set()

    def mark(self) -> None:
        """Something changed: wake every wait."""
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wake(self, key: str) -> None:
        """End the waits for ``key`` (a run's command wait) now, or the next one at once."""
        with self._cond:
            self._woken.add(key)
            self._count += 1
            self._cond.notify_all()

    def woken(self, key: str) -> bool:
        """Whether :meth:`wake` was called for ``key`` since the last look (which clears it)."""
        with self._cond:
            if key in self._woken:
                self._woken.discard(key)
                return True
            return False

    def count(self) -> int:
        """A mark to wait past (taken before looking, so a change in between is not missed)."""
        with self._cond:
            return self._count

    def wait_past(self, count: int, timeout: float) -> None:
        """Wait until a change after ``count`` is marked, or ``timeout`` seconds pass."""
        with self._cond:
            self._cond.wait_for(lambda: self._count != count, timeout)


def wait_for(fetch: Callable[[], list[T]], changes: Changes, wait: float, poll: float,
             key: str | None = None) -> list[T]:  # fmt: skip
    """``fetch()`` until it finds something or ``wait`` seconds pass (or ``key`` is woken),
    looking again at each change marked in ``changes`` and at least every ``poll`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        seen = changes.count()
        found = fetch()
        remaining = deadline - time.monotonic()
        if found or remaining <= 0 or (key is not None and changes.woken(key)):
            return found
        changes.wait_past(seen, min(poll, remaining))


def now_ms() -> int:
    """This machine's clock in milliseconds (the stores that have a server use its clock)."""
    return int(time.time() * 1000)
