"""The store contract of a ledger: the windows and periods spend is counted in, what a store is
given (:class:`Check`, :class:`Reservation`) and gives back (:class:`Crossing`, :class:`Spend`),
the :class:`LedgerStore` protocol, and the in-memory store. The shared stores
(:mod:`agentkit.ledger.redis`, :mod:`agentkit.ledger.postgres`) stand on this module, and the
ledger (:mod:`agentkit.ledger.core`, which opens the store a URL names) on them. See
:mod:`agentkit.ledger` for the whole picture."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

Window = Literal["hour", "day", "month", "total"]
WINDOWS: tuple[Window, ...] = ("hour", "day", "month", "total")
"""The windows spend is counted in: calendar hours, days and months in UTC, and all time."""

SETTLED_KEPT = 86_400.0
"""Seconds a store remembers a settled reservation, so that settling it again counts nothing."""


def periods(at: float) -> dict[Window, str]:
    """The period of each window that the ``time.time()`` instant ``at`` falls in, named as the
    stores and ``agentkit ledger`` name them: ``2026-12-03T07`` (an hour), ``2026-12-03`` (a
    day), ``2026-12`` (a month), ``total``."""
    when = datetime.fromtimestamp(at, timezone.utc)
    return {
        "hour": when.strftime("%Y-%m-%dT%H"),
        "day": when.strftime("%Y-%m-%d"),
        "month": when.strftime("%Y-%m"),
        "total": "total",
    }


def window_of(period: str) -> Window:
    """The window a period belongs to (see :func:`periods`)."""
    if period == "total":
        return "total"
    return {13: "hour", 10: "day", 7: "month"}.get(len(period), "total")  # type: ignore[return-value]


@dataclass(frozen=True)
class Check:
    """One cap as a store checks it: ``key``'s spend in ``period`` (of ``window``), plus what
    its live reservations hold, plus the new reservation, within ``usd`` and ``tokens``."""

    key: str
    window: Window
    period: str
    usd: float | None
    tokens: int | None


@dataclass(frozen=True)
class Crossing:
    """A check a reservation would break: what ``check``'s key has spent and holds now."""

    check: Check
    usd: float
    tokens: int


@dataclass(frozen=True)
class Reservation:
    """Money and tokens held for one request until it settles: under each of ``keys``, in the
    ``periods`` of the instant it was made (its spend is counted there when it settles)."""

    id: str
    keys: tuple[str, ...]
    periods: tuple[str, ...]
    usd: float
    tokens: int


@dataclass(frozen=True)
class Spend:
    """What ``key`` spent in ``period`` (of ``window``): ``usd``, ``tokens`` and settled
    ``requests``; ``held_usd`` and ``held_tokens`` are what its live reservations hold now."""

    key: str
    window: Window
    period: str
    usd: float = 0.0
    tokens: int = 0
    requests: int = 0
    held_usd: float = 0.0
    held_tokens: int = 0


class LedgerStore(Protocol):
    """Where a ledger's counts live. Each method is atomic for all the store's users at once
    (every process that opens the same store). Reservations expire by the store's clock."""

    def reserve(
        self, reservation: Reservation, checks: Sequence[Check], hold: float
    ) -> Crossing | None:
        """If every check holds with ``reservation`` added, record it (it counts for its keys
        until settled, or for ``hold`` seconds) and return ``None``; else record nothing and
        return the first check it would break."""

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        """Count ``usd`` and ``tokens`` (one request) for each key in each period of
        ``reservation``, and drop what it held; ``False``, counting nothing, when it was settled
        before (by this or any process)."""

    def spend(self, period: str, prefix: str | None = None) -> list[Spend]:
        """Every key's spend in ``period`` (keys starting with ``prefix``), with what live
        reservations hold for them; keys that only hold something are listed too."""

    def close(self) -> None:
        """Let go of the store's connections."""


def crosses(check: Check, usd: float, tokens: int, reservation: Reservation) -> bool:
    """Whether ``reservation`` added to ``usd`` and ``tokens`` passes ``check``'s cap."""
    if check.usd is not None and usd + reservation.usd > check.usd:
        return True
    return check.tokens is not None and tokens + reservation.tokens > check.tokens


# --- the in-process store ---------------------------------------------------------------------


class MemoryLedgerStore:
    """The counts in this process's memory: shared by every agent of the process, gone with it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Guards every field below.
        self._lock = threading.Lock()
        # period -> key -> [usd, tokens, requests]
        self._spent: dict[str, dict[str, list[Any]]] = {}
        # key -> reservation id -> (usd, tokens, when it expires)
        self._held: dict[str, dict[str, tuple[float, int, float]]] = {}
        # reservation id -> when it settled, oldest first
        self._settled: dict[str, float] = {}

    def _holding(self, key: str, now: float) -> tuple[float, int]:
        """What ``key``'s live reservations hold (expired ones are dropped)."""
        held = self._held.get(key)
        if not held:
            return 0.0, 0
        for gone in [i for i, (_, _, ends) in held.items() if ends <= now]:
            del held[gone]
        return sum(h[0] for h in held.values()), sum(h[1] for h in held.values())

    def reserve(
        self, reservation: Reservation, checks: Sequence[Check], hold: float
    ) -> Crossing | None:
        with self._lock:
            now = self.clock()
            holding = {key: self._holding(key, now) for key in reservation.keys}
            for check in checks:
                row = self._spent.get(check.period, {}).get(check.key, (0.0, 0))
                usd = row[0] + holding[check.key][0]
                tokens = row[1] + holding[check.key][1]
                if crosses(check, usd, tokens, reservation):
                    return Crossing(check, usd, tokens)
            for key in reservation.keys:
                entry = (reservation.usd, reservation.tokens, now + hold)
                self._held.setdefault(key, {})[reservation.id] = entry
            return None

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        with self._lock:
            now = self.clock()
            while self._settled and next(iter(self._settled.values())) < now - SETTLED_KEPT:
                del self._settled[next(iter(self._settled))]
            if reservation.id in self._settled:
                return False
            self._settled[reservation.id] = now
            for key in reservation.keys:
                self._held.get(key, {}).pop(reservation.id, None)
                for period in reservation.periods:
                    row = self._spent.setdefault(period, {}).setdefault(key, [0.0, 0, 0])
                    row[0] += usd
                    row[1] += tokens
                    row[2] += 1
            return True

    def spend(self, period: str, prefix: str | None = None) -> list[Spend]:
        with self._lock:
            now = self.clock()
            rows = dict(self._spent.get(period, {}))
            keys = sorted({*rows, *(k for k in self._held if self._holding(k, now) != (0.0, 0))})
            window = window_of(period)
            found = []
            for key in keys:
                if prefix is not None and not key.startswith(prefix):
                    continue
                usd, tokens, requests = rows.get(key, (0.0, 0, 0))
                held = self._holding(key, now)
                found.append(Spend(key, window, period, usd, tokens, requests, *held))
            return found

    def close(self) -> None:
        return None
