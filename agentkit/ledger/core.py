"""The ledger itself: keys, windows, caps, reservations, and the store contract (with the
in-memory store). See :mod:`agentkit.ledger` for the whole picture."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import LedgerError, SpendCapError

Window = Literal["hour", "day", "month", "total"]
WINDOWS: tuple[Window, ...] = ("hour", "day", "month", "total")
"""The windows spend is counted in: calendar hours, days and months in UTC, and all time."""

DEFAULT_HOLD = 600.0
"""Seconds a reservation counts when it is never settled (its worker died mid-request)."""

SETTLED_KEPT = 86_400.0
"""Seconds a store remembers a settled reservation, so that settling it again counts nothing."""

MAX_KEY = 200
"""The longest key, in characters."""


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


def check_key(key: Any) -> str:
    """``key`` if it can name spend: a non-empty string of printable characters without spaces
    (``tenant:acme``, ``user:acme/42``), at most :data:`MAX_KEY` long; else :class:`LedgerError`."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise LedgerError(f"a ledger key is a string of 1 to {MAX_KEY} characters, not {key!r}")
    if not key.isprintable() or any(c.isspace() for c in key):
        raise LedgerError(f"a ledger key has no spaces and no control characters: {key!r}")
    return key


def _amount(value: Any, what: str) -> float:
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise LedgerError(f"{what} must be a finite amount of 0 or more, not {value!r}")
    return number


class Cap(BaseModel):
    """At most ``usd`` dollars and/or ``tokens`` tokens for ``key`` in each ``window``.

    ``key`` is one key, or a pattern (``user:*``, shell-style) that caps every key matching it,
    each on its own: ``Cap("user:*", "day", usd=1)`` gives each user a dollar a day.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    window: Window = "day"
    usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    tokens: int | None = Field(default=None, ge=1)

    def __init__(self, key: str, window: Window = "day", **limits: Any) -> None:
        super().__init__(key=key, window=window, **limits)

    @model_validator(mode="after")
    def _limits(self) -> Cap:
        if self.usd is None and self.tokens is None:
            raise ValueError("a cap needs usd=..., tokens=... or both")
        return self


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


def crosses(check: Check, usd: float, tokens: int, reservation: Reservation) -> bool:
    """Whether ``reservation`` added to ``usd`` and ``tokens`` passes ``check``'s cap."""
    if check.usd is not None and usd + reservation.usd > check.usd:
        return True
    return check.tokens is not None and tokens + reservation.tokens > check.tokens


# --- the ledger -------------------------------------------------------------------------------


class Ledger:
    """A fleet's spend, by key and window, in one store; see :mod:`agentkit.ledger`.

    ``store`` is a :class:`LedgerStore`, a URL (``redis://...``, ``postgresql://...``;
    :func:`open_ledger_store`) or ``None`` for this process's memory. ``caps`` apply to every
    reservation whose keys they match. ``hold``: seconds a reservation counts if it is never
    settled. ``clock`` gives the ``time.time()`` the periods are taken from (tests fake it).
    """

    def __init__(
        self,
        store: LedgerStore | str | None = None,
        caps: Sequence[Cap] = (),
        *,
        hold: float = DEFAULT_HOLD,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if store is None or isinstance(store, str):
            store = open_ledger_store(store)
        self.store: LedgerStore = store
        self.caps = list(caps)
        self.hold = hold
        self.clock = clock

    def checks(self, keys: Sequence[str], caps: Sequence[Cap], at: float) -> list[Check]:
        """The checks a reservation for ``keys`` at ``at`` must pass: the ledger's caps and
        ``caps``, each for every key it matches."""
        now = periods(at)
        return [
            Check(key, cap.window, now[cap.window], cap.usd, cap.tokens)
            for cap in (*self.caps, *caps)
            for key in keys
            if fnmatchcase(key, cap.key)
        ]

    def reserve(
        self, keys: Sequence[str], usd: float, tokens: int = 0, *, caps: Sequence[Cap] = ()
    ) -> Reservation:
        """Hold ``usd`` and ``tokens`` under each of ``keys`` for one request, if no cap (the
        ledger's and ``caps``) would then be passed; raises :class:`~agentkit.errors.
        SpendCapError` naming the cap otherwise (nothing is held). Settle the reservation
        when the request ends."""
        unique = tuple(dict.fromkeys(check_key(key) for key in keys))
        if not unique:
            raise LedgerError("a reservation needs at least one key")
        at = self.clock()
        reservation = Reservation(
            uuid.uuid4().hex,
            unique,
            tuple(periods(at).values()),
            _amount(usd, "a reservation's usd"),
            int(_amount(tokens, "a reservation's tokens")),
        )
        crossing = self.store.reserve(reservation, self.checks(unique, caps, at), self.hold)
        if crossing is not None:
            raise _refusal(crossing, reservation)
        return reservation

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        """Count what the request cost instead of what was held (once: settling a reservation
        again counts nothing, and says so with ``False``). A reservation that expired before
        it settled is still counted: the request was made."""
        usd = float(usd) if math.isfinite(float(usd)) and usd >= 0 else reservation.usd
        tokens = int(tokens) if tokens >= 0 else reservation.tokens
        return self.store.settle(reservation, usd, tokens)

    def release(self, reservation: Reservation) -> bool:
        """Settle a reservation whose request was never sent (it costs nothing)."""
        return self.store.settle(reservation, 0.0, 0)

    def spend(
        self, window: Window = "day", *, at: float | None = None, prefix: str | None = None
    ) -> list[Spend]:
        """Every key's spend in ``window`` (the period of it that ``at``, default now, falls
        in), keys starting with ``prefix``, by key."""
        if window not in WINDOWS:
            raise LedgerError(f"a window is one of {', '.join(WINDOWS)}, not {window!r}")
        period = periods(self.clock() if at is None else at)[window]
        return self.store.spend(period, prefix)

    def spent(self, key: str, window: Window = "day", *, at: float | None = None) -> Spend:
        """``key``'s spend in ``window`` (now, or at ``at``)."""
        for row in self.spend(window, at=at, prefix=check_key(key)):
            if row.key == key:
                return row
        period = periods(self.clock() if at is None else at)[window]
        return Spend(key, window, period)

    def close(self) -> None:
        """Let go of the store's connections."""
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _refusal(crossing: Crossing, reservation: Reservation) -> SpendCapError:
    check = crossing.check
    limits = [f"${check.usd:g}" if check.usd is not None else "", _tokens(check.tokens)]
    cap = " and ".join(part for part in limits if part)
    text = (
        f"the {check.window} cap of {check.key} ({cap}) would be passed: {check.period} has "
        f"${crossing.usd:.4f} and {crossing.tokens} tokens spent or held, and this request "
        f"may cost up to ${reservation.usd:.4f} and {reservation.tokens} tokens"
    )
    return SpendCapError(
        text, key=check.key, window=check.window, period=check.period, cap_usd=check.usd,
        cap_tokens=check.tokens, usd=crossing.usd, tokens=crossing.tokens,
        asked_usd=reservation.usd, asked_tokens=reservation.tokens,
    )  # fmt: skip


def _tokens(limit: int | None) -> str:
    return f"{limit} tokens" if limit is not None else ""


def open_ledger_store(url: str | None = None) -> LedgerStore:
    """The store ``url`` names: ``redis://...`` (:class:`~agentkit.ledger.redis.
    RedisLedgerStore`), ``postgresql://...`` (:class:`~agentkit.ledger.postgres.
    PostgresLedgerStore`), or ``None``/``memory://`` for this process's memory."""
    if url is None or url in ("", "memory://"):
        return MemoryLedgerStore()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from .redis import RedisLedgerStore

        return RedisLedgerStore(url)
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresLedgerStore

        return PostgresLedgerStore(url)
    raise LedgerError(f"no ledger store for {url!r}: use redis://, postgresql:// or memory://")
