"""The spend ledger in PostgreSQL through psycopg 3 (the ``postgres`` extra), for
sites without Redis: shared by every process that uses the same database.

Three tables: ``agentkit_spend`` (a row per key and period), ``agentkit_holds`` (a row per key
of each live reservation, with its expiry by the database's clock) and ``agentkit_settled``
(the reservations settled in the last day). A reserve and a settle are each one transaction
that first takes a transaction-level advisory lock per key (in sorted order, so two never wait
on each other), so that the checks and the writes of one key never interleave across
processes. Repeating either on a new connection (:mod:`agentkit._pg`) is safe: a settle counts
once (its id is recorded in the same transaction), and a reserve that committed before its
connection died holds for at most its ``hold``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._pg import PgLink
from ..errors import LedgerError
from .store import SETTLED_KEPT, Check, Crossing, Reservation, Spend, crosses, window_of

SCHEMA = """
CREATE TABLE IF NOT EXISTS agentkit_spend (
    period TEXT NOT NULL,
    key TEXT NOT NULL,
    usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    tokens BIGINT NOT NULL DEFAULT 0,
    requests BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (period, key)
);
CREATE TABLE IF NOT EXISTS agentkit_holds (
    id TEXT NOT NULL,
    key TEXT NOT NULL,
    usd DOUBLE PRECISION NOT NULL,
    tokens BIGINT NOT NULL,
    expires TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (key, id)
);
CREATE TABLE IF NOT EXISTS agentkit_settled (
    id TEXT PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL
);
"""

_LOCK_SPACE = 736_611
"""The seed of the advisory locks' key hashes (other users of the database use their own)."""


class PostgresLedgerStore:
    """The ledger's counts in the PostgreSQL database at ``url``
    (``postgresql://user@host:port/db``); the tables are made if missing."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self._link = PgLink(
            url, timeout, LedgerError, "PostgreSQL ledger store", "PostgresLedgerStore"
        )

        def create(cur: Any, _retry: bool) -> None:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_SPACE,))  # two creators
            cur.execute(SCHEMA)

        self._link.transact(create)

    @staticmethod
    def _lock(cur: Any, keys: Sequence[str]) -> None:
        for key in sorted(keys):
            cur.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))", (key, _LOCK_SPACE)
            )

    def reserve(
        self, reservation: Reservation, checks: Sequence[Check], hold: float
    ) -> Crossing | None:
        def run(cur: Any, _retry: bool) -> Crossing | None:
            self._lock(cur, reservation.keys)
            cur.execute(
                "DELETE FROM agentkit_holds WHERE key = ANY(%s) AND expires <= now()",
                (list(reservation.keys),),
            )
            for check in checks:
                cur.execute(
                    "SELECT coalesce((SELECT usd FROM agentkit_spend WHERE period = %s AND "
                    "key = %s), 0) + coalesce((SELECT sum(usd) FROM agentkit_holds WHERE "
                    "key = %s), 0), coalesce((SELECT tokens FROM agentkit_spend WHERE "
                    "period = %s AND key = %s), 0) + coalesce((SELECT sum(tokens) FROM "
                    "agentkit_holds WHERE key = %s), 0)",
                    (check.period, check.key, check.key) * 2,
                )
                usd, tokens = cur.fetchone()
                if crosses(check, float(usd), int(tokens), reservation):
                    return Crossing(check, float(usd), int(tokens))
            cur.executemany(
                "INSERT INTO agentkit_holds (id, key, usd, tokens, expires) VALUES "
                "(%s, %s, %s, %s, now() + make_interval(secs => %s)) ON CONFLICT DO NOTHING",
                [
                    (reservation.id, key, reservation.usd, reservation.tokens, float(hold))
                    for key in reservation.keys
                ],
            )
            return None

        return self._link.transact(run)

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        def run(cur: Any, _retry: bool) -> bool:
            self._lock(cur, reservation.keys)
            cur.execute(
                "INSERT INTO agentkit_settled (id, at) VALUES (%s, now()) ON CONFLICT DO NOTHING",
                (reservation.id,),
            )
            if not cur.rowcount:
                return False
            cur.execute("DELETE FROM agentkit_holds WHERE id = %s", (reservation.id,))
            cur.executemany(
                "INSERT INTO agentkit_spend (period, key, usd, tokens, requests) VALUES "
                "(%s, %s, %s, %s, 1) ON CONFLICT (period, key) DO UPDATE SET "
                "usd = agentkit_spend.usd + EXCLUDED.usd, "
                "tokens = agentkit_spend.tokens + EXCLUDED.tokens, "
                "requests = agentkit_spend.requests + 1",
                [
                    (period, key, float(usd), int(tokens))
                    for period in reservation.periods
                    for key in reservation.keys
                ],
            )
            cur.execute(
                "DELETE FROM agentkit_settled WHERE at < now() - make_interval(secs => %s)",
                (SETTLED_KEPT,),
            )
            return True

        return self._link.transact(run)

    def spend(self, period: str, prefix: str | None = None) -> list[Spend]:
        pattern = _like(prefix or "") + "%"

        def run(cur: Any, _retry: bool) -> list[Any]:
            cur.execute(
                "SELECT key, sum(usd), sum(tokens), sum(requests), sum(held_usd), "
                "sum(held_tokens) FROM ("
                "SELECT key, usd, tokens, requests, 0 AS held_usd, 0 AS held_tokens "
                "FROM agentkit_spend WHERE period = %s AND key LIKE %s "
                "UNION ALL SELECT key, 0, 0, 0, usd, tokens FROM agentkit_holds "
                "WHERE expires > now() AND key LIKE %s) AS rows GROUP BY key ORDER BY key",
                (period, pattern, pattern),
            )
            return list(cur.fetchall())

        window = window_of(period)
        return [
            Spend(key, window, period, float(u), int(t), int(r), float(hu), int(ht))
            for key, u, t, r, hu, ht in self._link.transact(run)
        ]

    def close(self) -> None:
        self._link.close()


def _like(text: str) -> str:
    """``text`` as a literal in a ``LIKE`` pattern."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
