"""What a fleet's limiter and ledger cost a request when neither binds (issue 36, the
concurrency benchmark's ``agentkit_threads_fleet`` row): the in-memory ledger's sums stay exact
with many requests in flight, its memory in proportion to them, and a bucket with room lets
each request ask its backend without queueing behind another's slow call."""

from __future__ import annotations

import threading
from typing import Any

from agentkit.ledger import Cap, Ledger, MemoryLedgerStore
from agentkit.limits import MemoryBackend, Quota, RateLimiter
from agentkit.types import Model
from tests.support import WAIT

MODEL = Model(id="m", api="openai-completions", provider="openai", base_url="")


class Clock:
    """A ``time.monotonic()`` that moves only when told."""

    def __init__(self) -> None:
        self.at = 0.0

    def __call__(self) -> float:
        return self.at


def test_a_thousand_requests_in_flight_are_held_exactly_and_expire_or_settle_once() -> None:
    clock = Clock()
    store = MemoryLedgerStore(clock)
    ledger = Ledger(store, caps=[Cap("tenant:*", "day", usd=100.0)], hold=60.0)
    held = [ledger.reserve(["tenant:a", f"user:a/{i}"], usd=0.1, tokens=7) for i in range(1000)]
    row = ledger.spent("tenant:a")
    assert (round(row.held_usd, 9), row.held_tokens) == (100.0, 7000)
    assert ledger.spent("user:a/5").held_tokens == 7
    for reservation in held[:600]:
        assert ledger.settle(reservation, usd=0.01, tokens=3)
        assert not ledger.settle(reservation, usd=0.01, tokens=3)  # once
    row = ledger.spent("tenant:a")
    assert (round(row.usd, 9), row.tokens, row.requests) == (6.0, 1800, 600)
    assert (round(row.held_usd, 9), row.held_tokens) == (40.0, 2800)
    clock.at = 60.0  # the other 400 were never settled: their workers died
    row = ledger.spent("tenant:a")
    assert (row.held_usd, row.held_tokens, row.requests) == (0.0, 0, 600)  # exactly nothing
    assert ledger.settle(held[700], usd=0.01, tokens=3)  # a late answer still counts, once
    assert ledger.spent("tenant:a").requests == 601
    assert [r.key for r in ledger.spend(prefix="user:a/1")][:2] == ["user:a/1", "user:a/10"]


def test_the_ledgers_memory_follows_the_requests_in_flight_not_those_settled() -> None:
    store = MemoryLedgerStore(Clock())
    ledger = Ledger(store, hold=600.0)
    flying = [ledger.reserve(["k"], usd=0.0, tokens=1) for _ in range(5)]
    for _ in range(10_000):
        ledger.settle(ledger.reserve(["k"], usd=0.0, tokens=1), usd=0.0, tokens=1)
    assert len(store._expiry) <= 2 * len(flying) + 64 + 1
    assert ledger.spent("k").held_tokens == 5 and ledger.spent("k").requests == 10_000


def test_a_slow_backend_call_holds_up_no_other_request_while_the_bucket_has_room() -> None:
    entered, release = threading.Event(), threading.Event()
    lock = threading.Lock()  # guards calls

    class Slow(MemoryBackend):
        """The first request's call takes long (a Redis round trip over a slow link)."""

        calls = 0

        def try_acquire(self, *args: Any) -> Any:
            with lock:
                self.calls += 1
                first = self.calls == 1
            if first:
                entered.set()
                release.wait(WAIT)
            return super().try_acquire(*args)

    backend = Slow()
    limiter = RateLimiter({"openai": Quota(requests=100, per=60.0)}, backend=backend)
    waits: list[Any] = []
    limiter.subscribe(waits.append)
    first = threading.Thread(target=lambda: limiter.acquire(MODEL).settle(None))
    first.start()
    try:
        assert entered.wait(WAIT)
        admitted = threading.Event()

        def others() -> None:
            for _ in range(5):
                limiter.acquire(MODEL).settle(None)
            admitted.set()

        threading.Thread(target=others, daemon=True).start()
        # Before, the five queued behind the first and waited for its call to end.
        assert admitted.wait(WAIT)
        assert waits == []  # and no wait was reported: there was room all along
    finally:
        release.set()
        first.join(WAIT)
    assert backend.calls == 6
    # A full bucket still makes a line, served in arrival order (tests/policies/test_limits.py).


def test_ids_are_unique_across_threads_and_a_forked_child() -> None:
    import os

    from agentkit._ids import unique_id

    drawn: list[str] = []
    lock = threading.Lock()  # guards drawn

    def draw() -> None:
        mine = [unique_id() for _ in range(2000)]
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=draw) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(set(drawn)) == 16_000
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # a prefork worker: its first id must not be one the parent will make
        os.write(write, unique_id().encode())
        os._exit(0)
    os.close(write)
    theirs = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(child, 0)
    ours = unique_id()
    assert theirs[:16] != ours[:16] and theirs not in drawn
