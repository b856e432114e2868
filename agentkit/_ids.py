"""Ids unique across a fleet's processes, made without a system call: a random prefix per
process (made again in a forked child) followed by a counter.

Every model request of a fleet takes a rate limiter's permit and a spend ledger's reservation,
each with an id. ``uuid.uuid4()`` reads ``os.urandom``, which lets go of the interpreter lock:
with hundreds of request threads, each such read then waits its turn for the lock again, and the
hand-offs cost a busy process more CPU than the rest of the permit and the reservation.
"""

from __future__ import annotations

import itertools
import os
import uuid


class _Ids:
    """This process's prefix and counter (``next()`` on an ``itertools.count`` is one step
    under the interpreter lock, so threads never draw the same number)."""

    def __init__(self) -> None:
        self.prefix = ""
        self.counter = itertools.count()
        self.renew()

    def renew(self) -> None:
        """A new prefix: 64 random bits, so two processes' ids never meet."""
        self.prefix = uuid.uuid4().hex[:16]
        self.counter = itertools.count()


_IDS = _Ids()
if hasattr(os, "register_at_fork"):  # a forked worker (gunicorn, Celery) must not repeat ours
    os.register_at_fork(after_in_child=_IDS.renew)


def unique_id() -> str:
    """An id no other call, in this process or another, returns."""
    return f"{_IDS.prefix}{next(_IDS.counter):08x}"
