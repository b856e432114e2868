"""The ledger itself: keys, caps, reserving and settling, and opening the store a URL names.
The store contract and the in-memory store are :mod:`agentkit.ledger.store`'s. See
:mod:`agentkit.ledger` for the whole picture."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .._ids import unique_id
from ..errors import LedgerError, SpendCapError
from .store import (
    WINDOWS,
    Check,
    Crossing,
    LedgerStore,
    MemoryLedgerStore,
    Reservation,
    Spend,
    Window,
    periods,
)

DEFAULT_HOLD = 600.0
"""Seconds a reservation counts when it is never settled (its worker died mid-request)."""

MAX_KEY = 200
"""The longest key, in characters."""

_SPACE = re.compile(r"\s")
"""Any whitespace (what ``str.isspace`` calls so), found in C: every request checks its keys."""


def check_key(key: Any) -> str:
    """``key`` if it can name spend: a non-empty string of printable characters without spaces
    (``tenant:acme``, ``user:acme/42``), at most :data:`MAX_KEY` long; else :class:`LedgerError`."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY:
        raise LedgerError(f"a ledger key is a string of 1 to {MAX_KEY} characters, not {key!r}")
    if not key.isprintable() or _SPACE.search(key):
        raise LedgerError(f"a ledger key has no spaces and no control characters: {key!r}")
    return key


@lru_cache(maxsize=4096)
def _matches(key: str, pattern: str) -> bool:
    """Whether a cap's ``pattern`` covers ``key`` (every request asks, for each cap and key)."""
    return fnmatchcase(key, pattern)


@lru_cache(maxsize=4096)
def _checked(key: str) -> str:
    """:func:`check_key`, remembered for the keys that passed (every request checks its keys)."""
    return check_key(key)


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
            if _matches(key, cap.key)
        ]

    def reserve(
        self, keys: Sequence[str], usd: float, tokens: int = 0, *, caps: Sequence[Cap] = ()
    ) -> Reservation:
        """Hold ``usd`` and ``tokens`` under each of ``keys`` for one request, if no cap (the
        ledger's and ``caps``) would then be passed; raises :class:`~agentkit.errors.
        SpendCapError` naming the cap otherwise (nothing is held). Settle the reservation
        when the request ends."""
        unique = tuple(dict.fromkeys(_checked(key) if isinstance(key, str) else check_key(key)
                                     for key in keys))  # fmt: skip
        if not unique:
            raise LedgerError("a reservation needs at least one key")
        at = self.clock()
        reservation = Reservation(
            unique_id(),
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
