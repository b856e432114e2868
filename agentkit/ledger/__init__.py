"""A fleet's spend ledger: dollars and tokens by key and window, across every process.

A SaaS bills per tenant and caps what one user may spend, across every gunicorn and Celery
process; a run's budgets (``Budgets(max_cost=...)``) hold for one run only. A :class:`Ledger`
keeps spend in a store every process shares (:class:`MemoryLedgerStore` for one process,
:class:`~agentkit.ledger.redis.RedisLedgerStore`, or
:class:`~agentkit.ledger.postgres.PostgresLedgerStore` for sites without Redis), counted:

- **by key**: any string the caller gives (``tenant:acme``, ``user:acme/42``,
  ``model:openai:gpt-4o``, ``feature:search``); one request counts under each of its keys;
- **by window**: the calendar hour, day and month (UTC) and all time (``total``); each request
  counts in every window at once;
- **reserved, then settled**: before a request its worst case is reserved under its keys, and
  refused (:class:`~agentkit.errors.SpendCapError`) if that would pass a :class:`Cap`; when it
  ends, the reservation is replaced by what it cost. A reservation whose worker died never
  settles: it stops counting after ``hold`` seconds. A reservation settles once: settling it
  again (a worker retrying after a lost reply) counts nothing.

So the spend under a cap passes it only by what requests cost beyond their reservation (a
model that bills more than its catalog price, say), and by nothing when reservations are worst
cases. :class:`SpendPolicy` does this for every model request of a run, on the run seam
(:mod:`agentkit.policy`); ``Ledger.spend`` and ``agentkit ledger`` list the spend by key and
window.
"""

from __future__ import annotations

from .core import DEFAULT_HOLD, Cap, Ledger, open_ledger_store
from .policy import SpendPolicy, worst_case
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

__all__ = [
    "DEFAULT_HOLD",
    "WINDOWS",
    "Cap",
    "Check",
    "Crossing",
    "Ledger",
    "LedgerStore",
    "MemoryLedgerStore",
    "Reservation",
    "Spend",
    "SpendPolicy",
    "Window",
    "open_ledger_store",
    "periods",
    "worst_case",
]
