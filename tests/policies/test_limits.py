"""The shared rate limiter (agentkit.limits): its backends' contract, and agents in many threads
and several processes against a local server that enforces a quota and counts what it got.

In-process fleets run on a :class:`~tests.quota_server.FakeClock` shared by the limiter and the
server, so their waits take no real time; Redis keeps its own clock, and its tests wait for real.
Hostile servers (issue 36) are in ``test_limits_hostile.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentkit import AbortController, AbortError, Agent
from agentkit.limits import MemoryBackend, Quota, QuotaBackend, RateLimiter, RedisBackend
from agentkit.types import Model
from tests.quota_server import FakeClock, pass_time, run_prompts
from tests.servers import RedisServer, free_port

WORKER = Path(__file__).parent / "fleet_worker.py"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def backend(quota_backend: QuotaBackend) -> QuotaBackend:
    """Each backend; the in-memory one on a fake clock (Redis keeps its own)."""
    if isinstance(quota_backend, MemoryBackend):
        return MemoryBackend(FakeClock())
    return quota_backend


# --- the backends' contract -------------------------------------------------------------------


def test_a_request_quota_admits_that_many_then_names_the_wait(backend: QuotaBackend) -> None:
    quota = Quota(requests=3, per=30.0)
    assert [backend.try_acquire("b", quota, f"p{i}", 0) for i in range(3)] == [None] * 3
    refusal = backend.try_acquire("b", quota, "p3", 0)
    assert refusal is not None and 29.0 < refusal.seconds <= 30.0 and not refusal.paused
    assert backend.try_acquire("other", quota, "q0", 0) is None  # buckets are apart


def test_settled_tokens_free_room_for_the_next_request(backend: QuotaBackend) -> None:
    quota = Quota(tokens=1000, per=30.0)
    assert backend.try_acquire("b", quota, "p0", 600) is None
    assert backend.try_acquire("b", quota, "p1", 600) is not None  # 1200 > 1000
    backend.settle("b", quota, "p0", 100)  # it used less than reserved
    assert backend.try_acquire("b", quota, "p1", 600) is None
    assert backend.try_acquire("b", quota, "p2", 600) is not None


def test_a_request_larger_than_the_quota_goes_alone(backend: QuotaBackend) -> None:
    quota = Quota(tokens=100, per=30.0)
    assert backend.try_acquire("b", quota, "p0", 500) is None  # the window is empty
    refusal = backend.try_acquire("b", quota, "p1", 1)
    assert refusal is not None and refusal.seconds > 29.0


def test_a_pause_holds_back_every_request_of_the_bucket(backend: QuotaBackend) -> None:
    backend.pause("b", 20.0)
    for quota in (None, Quota(requests=100)):
        refusal = backend.try_acquire("b", quota, "p0", 0)
        assert refusal is not None and 19.0 < refusal.seconds <= 20.0 and refusal.paused
    backend.pause("b", 1.0)  # a shorter pause does not shorten the one set
    refusal = backend.try_acquire("b", None, "p1", 0)
    assert refusal is not None and refusal.seconds > 19.0
    assert backend.try_acquire("c", None, "p2", 0) is None


def test_the_window_slides(backend: QuotaBackend) -> None:
    quota = Quota(requests=1, per=0.2)
    assert backend.try_acquire("b", quota, "p0", 0) is None
    backend.settle("b", quota, "p0", 0)
    refusal = backend.try_acquire("b", quota, "p1", 0)
    assert refusal is not None and 0.1 < refusal.seconds <= 0.21
    pass_time(backend, refusal.seconds + 0.01)  # the window's own length: what is tested
    assert backend.try_acquire("b", quota, "p1", 0) is None


def test_a_request_in_flight_keeps_its_place_past_the_window(backend: QuotaBackend) -> None:
    """An answer longer than ``per``: the request counts until ``per`` after it settled."""
    quota = Quota(requests=1, per=0.2)
    assert backend.try_acquire("b", quota, "p0", 0) is None
    pass_time(backend, 0.3)  # the answer is still streaming
    refusal = backend.try_acquire("b", quota, "p1", 0)
    assert refusal is not None and 0.1 < refusal.seconds <= 0.21  # per after now at the least
    backend.settle("b", quota, "p0", 0)  # the answer ends
    refusal = backend.try_acquire("b", quota, "p1", 0)
    assert refusal is not None and 0.1 < refusal.seconds <= 0.21
    pass_time(backend, refusal.seconds + 0.01)
    assert backend.try_acquire("b", quota, "p1", 0) is None


def test_a_request_that_never_settles_gives_its_place_up_after_its_lease(
    backend: QuotaBackend,
) -> None:
    """Its process died mid-request: its place is freed ``lease`` after the window."""
    backend.lease = 0.2  # type: ignore[attr-defined]
    quota = Quota(requests=1, tokens=100, per=0.2)
    assert backend.try_acquire("b", quota, "p0", 100) is None
    refusal = backend.try_acquire("b", quota, "p1", 100)
    assert refusal is not None
    pass_time(backend, 0.45)
    assert backend.try_acquire("b", quota, "p1", 100) is None
    backend.settle("b", quota, "p0", 100)  # too late: nothing to settle, nothing counted again
    backend.settle("b", quota, "p1", 100)
    pass_time(backend, 0.21)
    assert backend.try_acquire("b", quota, "p2", 100) is None


def test_the_limiter_learns_usage_larger_than_its_estimates() -> None:
    clock = FakeClock()
    limiter = RateLimiter({"openai": Quota(tokens=100_000)}, backend=clock.backend(), clock=clock)
    model = Model(id="m", api="openai-completions", provider="openai", base_url="")
    first = limiter.acquire(model, 40)
    assert (first.estimate, first.tokens) == (40, 40)
    first.settle(400)  # an image: ten times the estimate
    second = limiter.acquire(model, 40)
    assert second.tokens == 400  # up at once
    second.settle(40)  # as estimated this time
    third = limiter.acquire(model, 40)
    assert third.tokens == 364  # down a tenth of the way
    third.settle(None)  # no answer: nothing to learn from
    for _ in range(200):
        limiter.acquire(model, 40).settle(4)
    assert limiter.acquire(model, 40).tokens == 40  # never below the estimate


def test_quotas_match_the_model_then_the_provider() -> None:
    limiter = RateLimiter({"openai:gpt-4o": {"requests": 5}, "openai": Quota(requests=50)})
    exact = Model(id="gpt-4o", api="openai-completions", provider="openai", base_url="")
    other = exact.model_copy(update={"id": "gpt-4o-mini"})
    free = exact.model_copy(update={"provider": "groq"})
    assert limiter.bucket(exact) == ("openai:gpt-4o", Quota(requests=5))
    assert limiter.bucket(other) == ("openai", Quota(requests=50))
    assert limiter.bucket(free) == ("groq:gpt-4o", None)
    with pytest.raises(ValueError):
        Quota(requests=0)


# --- waiting: abortable, in order -------------------------------------------------------------


def test_a_wait_for_quota_ends_at_once_on_abort(backend: QuotaBackend) -> None:
    limiter = RateLimiter({"openai": Quota(requests=1, per=60.0)}, backend=backend)
    model = Model(id="m", api="openai-completions", provider="openai", base_url="")
    limiter.acquire(model)
    controller = AbortController()
    waiting = threading.Event()
    outcome: list[BaseException] = []

    def wait() -> None:
        waiting.set()
        try:
            limiter.acquire(model, signal=controller.signal)
        except AbortError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    waiting.wait(10)
    controller.abort()
    thread.join(10)  # far less than the 60 s the quota would make it wait
    assert not thread.is_alive()
    assert len(outcome) == 1 and "openai" in str(outcome[0])
    assert not limiter._line("openai").waiters  # the aborted waiter left the line


def test_a_run_waiting_for_quota_ends_at_its_deadline(quota_server: Any) -> None:
    server = quota_server(requests=1, per=60.0)
    limiter = RateLimiter({"openai": Quota(requests=1, per=60.0)})
    assert run_prompts(server.model(), 1, 1, rate_limiter=limiter) == {"stop": 1}
    agent = Agent(
        model=server.model(), api_key="test-key", rate_limiter=limiter, budgets={"timeout": 0.3}
    )
    result = agent.prompt("Hello")
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    assert server.stats()["received"] == 1  # the second request was never sent


# --- a fleet against a quota server -----------------------------------------------------------


def test_threads_without_a_limiter_get_429s_and_fail(quota_server: Any) -> None:
    """The control: the same load without the limiter overruns the quota and fails runs."""
    server = quota_server(requests=4, per=0.3)
    reasons = run_prompts(server.model(), 24, 24, max_retries=1, retry_base_delay_ms=1)
    stats = server.stats()
    assert stats["rejected"] > 0
    assert reasons["error"] > 0


def test_many_threads_share_a_quota_without_a_429(quota_server: Any) -> None:
    clock = FakeClock()
    server = quota_server(requests=4, per=0.5, clock=clock)
    limiter = RateLimiter(
        {"openai": Quota(requests=4, per=0.5)}, backend=clock.backend(), clock=clock
    )
    reasons = run_prompts(server.model(), 24, 24, rate_limiter=limiter, max_retries=0)
    stats = server.stats()
    assert reasons == {"stop": 24}
    assert (stats["received"], stats["rejected"], stats["peak_requests"]) == (24, 0, 4)


def test_a_token_quota_is_kept_and_settled_usage_frees_it(quota_server: Any) -> None:
    # Each request reserves its body / 4 + max_tokens (200) and uses body / 4 + 10: without
    # settling, two requests would fill the window for a minute.
    server = quota_server(tokens=900, per=60.0, output_tokens=10)
    limiter = RateLimiter({"openai": Quota(tokens=900, per=60.0)})
    reasons = run_prompts(
        server.model(), 6, 3, rate_limiter=limiter, max_tokens=200, max_retries=0,
        budgets={"timeout": 30},
    )  # fmt: skip
    stats = server.stats()
    assert reasons == {"stop": 6}
    assert stats["rejected"] == 0 and stats["peak_tokens"] <= 900


def test_a_429_retry_after_pauses_the_bucket_for_every_agent(quota_server: Any) -> None:
    clock = FakeClock()
    server = quota_server(clock=clock)
    # No quota known: only what the server says holds requests back.
    limiter = RateLimiter(backend=clock.backend(), clock=clock)
    server.close_for(1.5)
    assert run_prompts(server.model(), 1, 1, rate_limiter=limiter, max_retries=0) == {"error": 1}
    # That 429 named its wait; every other agent now waits it out instead of asking.
    reasons = run_prompts(server.model(), 10, 10, rate_limiter=limiter, max_retries=0)
    assert reasons == {"stop": 10}
    assert server.stats()["rejected"] == 1


def test_without_the_pause_every_agent_gets_the_429(quota_server: Any) -> None:
    """The control of the test above."""
    server = quota_server()
    server.close_for(10.0)  # nobody waits it out here: it only has to outlast the requests
    reasons = run_prompts(server.model(), 10, 10, max_retries=0)
    assert reasons == {"error": 10}
    assert server.stats()["rejected"] == 10


@pytest.mark.processes
def test_processes_share_a_quota_through_redis(
    quota_server: Any, redis_server: RedisServer
) -> None:
    server = quota_server(requests=5, per=0.5)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    args = [server.url, redis_server.url, "5", "0.5", "8", "8"]
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(3)
    ]
    reasons: Counter[str] = Counter()
    for worker in workers:
        out, _ = worker.communicate(timeout=120)
        assert worker.returncode == 0
        reasons.update(json.loads(out))
    stats = server.stats()
    assert reasons == {"stop": 24}
    assert (stats["received"], stats["rejected"], stats["peak_requests"]) == (24, 0, 5)


def test_the_limiter_waits_without_spinning(quota_server: Any) -> None:
    """Threads queued for a bucket cost the backend one call per freed slot, not one each."""
    clock = FakeClock()
    server = quota_server(requests=2, per=0.5, clock=clock)
    calls: list[float] = []
    backend = clock.backend()
    original = backend.try_acquire

    def counted(*args: Any) -> Any:
        calls.append(clock.now())
        return original(*args)

    backend.try_acquire = counted  # type: ignore[method-assign]
    limiter = RateLimiter({"openai": Quota(requests=2, per=0.5)}, backend=backend, clock=clock)
    assert run_prompts(server.model(), 8, 8, rate_limiter=limiter) == {"stop": 8}
    # 8 admitted, and a refused look for each of the 3 later windows' heads (a little slack).
    assert len(calls) <= 8 + 3 * 2 + 2


def test_an_unreachable_redis_fails_the_request_unsent_and_says_why(quota_server: Any) -> None:
    server = quota_server()
    backend = RedisBackend(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    limiter = RateLimiter({"openai": Quota(requests=5)}, backend=backend)
    agent = Agent(model=server.model(), api_key="sk-test-SECRET", rate_limiter=limiter)
    agent.prompt("Hello")
    last = agent.state.messages[-1]
    assert last.stop_reason == "error"
    assert (last.error_message or "").startswith(
        "OpenAI request not sent: the rate limiter failed: ConnectionError"
    )
    assert "SECRET" not in (last.error_message or "")
    assert server.stats()["received"] == 0
    agent.rate_limiter = None  # the agent stays usable
    assert agent.prompt("Hello").text == "ok"
