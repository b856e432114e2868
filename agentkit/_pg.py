"""One PostgreSQL connection shared by a store's threads (psycopg 3), for the stores that keep
their data in PostgreSQL: the sessions' (:mod:`agentkit.sessions.postgres`) and the spend
ledger's (:mod:`agentkit.ledger.postgres`).

A connection the server closed while it sat idle (``idle_session_timeout``, PgBouncer, a cloud
load balancer) is only found dead when next used; the link then runs that transaction once more
on a new connection, so a store's operations must be safe to repeat (each store says why its
are). A server that is down gives the store's own error, and the next call reconnects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._extras import needs_extra

T = TypeVar("T")


def safe_url(url: str) -> str:
    """``url`` without a password (nor a query, which may hold one), for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    credentials, at, host = authority.rpartition("@")
    if at:
        user = credentials.split(":", 1)[0]
        authority = f"{user}@{host}" if user else host
    return f"{scheme}://{authority}{slash}{path.split('?', 1)[0]}"


class PgLink:
    """The connection to the database at ``url``; :meth:`transact` runs one transaction on it.

    ``error`` is the exception a failure becomes, its message starting with ``label`` and the
    URL without its password. Needs psycopg (``what`` names the class that does, for the
    ``ImportError``)."""

    def __init__(
        self, url: str, timeout: float, error: type[Exception], label: str, what: str
    ) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise ImportError(needs_extra(f"{what} (psycopg)", "postgres")) from exc
        self._psycopg: Any = psycopg
        self.url = url
        self._timeout = timeout
        self._error = error
        self._label = label
        # Guards _conn: psycopg connections are not to be used by two threads at once.
        self._lock = threading.Lock()
        self._conn: Any = None

    def transact(self, operation: Callable[[Any, bool], T]) -> T:
        """``operation(cursor, retry)`` in one transaction on a live connection; ``retry`` is
        true on the second attempt, made once when a reused connection turned out dead."""
        with self._lock:
            for retry in (False, True):
                conn = self._conn
                reused = conn is not None and not conn.closed and not conn.broken
                try:
                    if not reused:
                        self._conn = conn = self._psycopg.connect(
                            self.url, autocommit=True, connect_timeout=int(self._timeout)
                        )
                    with conn.transaction(), conn.cursor() as cur:
                        return operation(cur, retry)
                except self._psycopg.Error as exc:
                    dead = conn is not None and (conn.closed or conn.broken)
                    if dead:
                        self._conn = None
                    if dead and reused and not retry:
                        continue  # closed while idle: once more on a new connection
                    raise self._error(f"{self._label} {safe_url(self.url)}: {exc}".strip()) from exc
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        """Close the connection (the next transaction opens another)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
