"""The shared rate limiter (agentkit.limits): its backends' contract, and agents in many threads
and several processes against a local server that enforces a quota and counts what it got."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agentkit import AbortController, AbortError, Agent
from agentkit.limits import MemoryBackend, Quota, QuotaBackend, RateLimiter, RedisBackend
from agentkit.types import Model
from tests.quota_server import QuotaServer
from tests.servers import RedisServer, free_port

WORKER = Path(__file__).parent / "fleet_worker.py"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["memory", "redis"])
def backend(request: pytest.FixtureRequest) -> QuotaBackend:
    """Each backend, its buckets fresh for the test (a prefix of its own on the shared Redis)."""
    if request.param == "memory":
        return MemoryBackend()
    server: RedisServer = request.getfixturevalue("redis_server")
    return RedisBackend(server.url, prefix=f"test:{uuid.uuid4().hex}")


@pytest.fixture
def quota_server() -> Iterator[QuotaServer]:
    servers: list[QuotaServer] = []

    def start(**settings: Any) -> QuotaServer:
        server = QuotaServer(**settings).start()
        servers.append(server)
        return server

    yield start  # type: ignore[misc]
    for server in servers:
        server.stop()


def run_prompts(model: Model, count: int, threads: int, **options: Any) -> Counter[str]:
    """``count`` agents, ``threads`` at a time, each one prompt; their runs' stop reasons."""

    def run(_: int) -> str:
        agent = Agent(model=model, api_key="test-key", timeout=(10, 10), **options)
        agent.prompt("Hello")
        return str(agent.state.messages[-1].stop_reason)

    with ThreadPoolExecutor(threads) as pool:
        return Counter(pool.map(run, range(count)))


# --- the backends' contract -------------------------------------------------------------------


def test_a_request_quota_admits_that_many_then_names_the_wait(backend: QuotaBackend) -> None:
    quota = Quota(requests=3, per=30.0)
    assert [backend.try_acquire("b", quota, f"p{i}", 0) for i in range(3)] == [None] * 3
    wait = backend.try_acquire("b", quota, "p3", 0)
    assert wait is not None and 29.0 < wait <= 30.0
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
    wait = backend.try_acquire("b", quota, "p1", 1)
    assert wait is not None and wait > 29.0


def test_a_pause_holds_back_every_request_of_the_bucket(backend: QuotaBackend) -> None:
    backend.pause("b", 20.0)
    for quota in (None, Quota(requests=100)):
        wait = backend.try_acquire("b", quota, "p0", 0)
        assert wait is not None and 19.0 < wait <= 20.0
    backend.pause("b", 1.0)  # a shorter pause does not shorten the one set
    wait = backend.try_acquire("b", None, "p1", 0)
    assert wait is not None and wait > 19.0
    assert backend.try_acquire("c", None, "p2", 0) is None


def test_the_window_slides(backend: QuotaBackend) -> None:
    quota = Quota(requests=1, per=0.2)
    assert backend.try_acquire("b", quota, "p0", 0) is None
    wait = backend.try_acquire("b", quota, "p1", 0)
    assert wait is not None
    threading.Event().wait(wait + 0.01)  # the window's own length: what is being tested
    assert backend.try_acquire("b", quota, "p1", 0) is None


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
    server = quota_server(requests=4, per=1.0)
    reasons = run_prompts(server.model(), 24, 24, max_retries=1, retry_base_delay_ms=1)
    stats = server.stats()
    assert stats["rejected"] > 0
    assert reasons["error"] > 0


def test_many_threads_share_a_quota_without_a_429(quota_server: Any) -> None:
    server = quota_server(requests=4, per=0.5)
    limiter = RateLimiter({"openai": Quota(requests=4, per=0.5)})
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
    server = quota_server()
    limiter = RateLimiter()  # no quota known: only what the server says holds requests back
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
    server = quota_server(requests=2, per=0.5)
    calls: list[float] = []
    backend = MemoryBackend()
    original = backend.try_acquire

    def counted(*args: Any) -> float | None:
        calls.append(time.monotonic())
        return original(*args)

    backend.try_acquire = counted  # type: ignore[method-assign]
    limiter = RateLimiter({"openai": Quota(requests=2, per=0.5)}, backend=backend)
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
