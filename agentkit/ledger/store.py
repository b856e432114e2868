"""The store contract of a ledger: the windows and periods spend is counted in, what a store is
given (:class:`Check`, :class:`Reservation`) and gives back (:class:`Crossing`, :class:`Spend`),
the :class:`LedgerStore` protocol, and the in-memory store. The shared stores
(:mod:`agentkit.ledger.redis`, :mod:`agentkit.ledger.postgres`) stand on this module, and the
ledger (:mod:`agentkit.ledger.core`, which opens the store a URL names) on them. See
:mod:`agentkit.ledger` for the whole picture."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
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
    return dict(_periods_of_hour(int(at // 3600)))


@lru_cache(maxsize=4)
def _periods_of_hour(hour: int) -> tuple[tuple[Window, str], ...]:
    """:func:`periods` of every instant of the UTC hour ``hour`` (hours since the epoch): every
    window changes on the hour, and every request asks, so the last hours' are remembered."""
    when = datetime.fromtimestamp(hour * 3600, timezone.utc)
    return (
        ("hour", when.strftime("%Y-%m-%dT%H")),
        ("day", when.strftime("%Y-%m-%d")),
        ("month", when.strftime("%Y-%m")),
        ("total", "total"),
    )


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


class _Held:
    """One key's live reservations (id -> usd, tokens) and their sums, kept as they change so
    that a check costs the same with a thousand requests in flight as with one."""

    __slots__ = ("reservations", "usd", "tokens")

    def __init__(self) -> None:
        self.reservations: dict[str, tuple[float, int]] = {}
        self.usd = 0.0
        self.tokens = 0

    def add(self, reservation_id: str, usd: float, tokens: int) -> None:
        self.reservations[reservation_id] = (usd, tokens)
        self.usd += usd
        self.tokens += tokens

    def drop(self, reservation_id: str) -> None:
        held = self.reservations.pop(reservation_id, None)
        if held is None:
            return
        if self.reservations:
            self.usd -= held[0]
            self.tokens -= held[1]
        else:  # none left: exactly nothing held (no rounding left over from the sums)
            self.usd, self.tokens = 0.0, 0


class MemoryLedgerStore:
    """The counts in this process's memory: shared by every agent of the process, gone with it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        # Guards every field below.
        self._lock = threading.Lock()
        # period -> key -> [usd, tokens, requests]
        self._spent: dict[str, dict[str, list[Any]]] = {}
        # key -> what its live reservations hold
        self._held: dict[str, _Held] = {}
        # (when it expires, reservation id, its keys), soonest first; settled ones stay until
        # their time comes (or the heap is rebuilt) and are skipped then
        self._expiry: list[tuple[float, str, tuple[str, ...]]] = []
        # reservation id -> when it expires, for those not settled yet
        self._live: dict[str, float] = {}
        # reservation id -> when it settled, oldest first
        self._settled: dict[str, float] = {}

    def _expire(self, now: float) -> None:
        """Drop the reservations whose hold has ended."""
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            ends, reservation_id, keys = heapq.heappop(expiry)
            if self._live.get(reservation_id) != ends:
                continue  # settled already
            del self._live[reservation_id]
            for key in keys:
                held = self._held.get(key)
                if held is not None:
                    held.drop(reservation_id)

    def _forget_settled(self) -> None:
        """Rebuild the expiry heap without the settled reservations once they are most of it:
        memory stays in proportion to the requests in flight, at an amortised constant cost."""
        if len(self._expiry) > 2 * len(self._live) + 64:
            live = self._live
            self._expiry = [entry for entry in self._expiry if live.get(entry[1]) == entry[0]]
            heapq.heapify(self._expiry)

    def _holding(self, key: str) -> tuple[float, int]:
        """What ``key``'s live reservations hold (after :meth:`_expire`)."""
        held = self._held.get(key)
        return (held.usd, held.tokens) if held is not None else (0.0, 0)

    def reserve(
        self, reservation: Reservation, checks: Sequence[Check], hold: float
    ) -> Crossing | None:
        with self._lock:
            now = self.clock()
            self._expire(now)
            holding = {key: self._holding(key) for key in reservation.keys}
            for check in checks:
                row = self._spent.get(check.period, {}).get(check.key, (0.0, 0))
                usd = row[0] + holding[check.key][0]
                tokens = row[1] + holding[check.key][1]
                if crosses(check, usd, tokens, reservation):
                    return Crossing(check, usd, tokens)
            for key in reservation.keys:
                held = self._held.get(key)
                if held is None:
                    held = self._held[key] = _Held()
                held.add(reservation.id, reservation.usd, reservation.tokens)
            heapq.heappush(self._expiry, (now + hold, reservation.id, reservation.keys))
            self._live[reservation.id] = now + hold
            return None

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        with self._lock:
            now = self.clock()
            while self._settled and next(iter(self._settled.values())) < now - SETTLED_KEPT:
                del self._settled[next(iter(self._settled))]
            if reservation.id in self._settled:
                return False
            self._settled[reservation.id] = now
            self._live.pop(reservation.id, None)
            self._forget_settled()
            for key in reservation.keys:
                held = self._held.get(key)
                if held is not None:
                    held.drop(reservation.id)
                for period in reservation.periods:
                    rows = self._spent.get(period)
                    if rows is None:
                        rows = self._spent[period] = {}
                    row = rows.get(key)
                    if row is None:
                        row = rows[key] = [0.0, 0, 0]
                    row[0] += usd
                    row[1] += tokens
                    row[2] += 1
            return True

    def spend(self, period: str, prefix: str | None = None) -> list[Spend]:
        with self._lock:
            self._expire(self.clock())
            rows = dict(self._spent.get(period, {}))
            holding = (k for k, held in self._held.items() if held.usd or held.tokens)
            keys = sorted({*rows, *holding})
            window = window_of(period)
            found = []
            for key in keys:
                if prefix is not None and not key.startswith(prefix):
                    continue
                usd, tokens, requests = rows.get(key, (0.0, 0, 0))
                held = self._holding(key)
                found.append(Spend(key, window, period, usd, tokens, requests, *held))
            return found

    def close(self) -> None:
        return None
