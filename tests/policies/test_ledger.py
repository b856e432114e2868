"""The spend ledger (agentkit.ledger): its stores' contract on memory, Redis and PostgreSQL, the
policy that ends a run at its cap, the ``agentkit ledger`` command, and fleets of processes
racing one cap against a local server that charges known usage."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent
from agentkit.cli.app import main as cli_main
from agentkit.errors import LedgerError, SpendCapError
from agentkit.ledger import Cap, Ledger, LedgerStore, MemoryLedgerStore, SpendPolicy, periods
from agentkit.ledger.postgres import PostgresLedgerStore
from agentkit.ledger.redis import RedisLedgerStore
from agentkit.types import Model, ModelCost
from tests.quota_server import QuotaServer
from tests.servers import PostgresServer, RedisServer, worker_env
from tests.support import WAIT

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).parent / "ledger_worker.py"

PRICES = ModelCost(input=10.0, output=40.0, cache_read=1.0, cache_write=12.5)
"""USD per million tokens of the test model (what the local server's answers are charged at)."""


class Clock:
    """A ``time.time()`` and a ``time.monotonic()`` that move only when told."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


@pytest.fixture(params=["memory", "redis", "postgres"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each store, by the URL a fleet would give (memory's is this process's)."""
    if request.param == "memory":
        return "memory://"
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis_server")
        return redis.url
    postgres: PostgresServer = request.getfixturevalue("postgres_server")
    return postgres.url


@pytest.fixture
def store(store_url: str) -> Iterator[LedgerStore]:
    """A store of each kind; the tests' keys are their own (a fresh prefix), the Redis one has
    a prefix of its own too."""
    if store_url == "memory://":
        made: LedgerStore = MemoryLedgerStore()
    elif store_url.startswith("redis://"):
        made = RedisLedgerStore(store_url, prefix=f"test:{uuid.uuid4().hex}")
    else:
        made = PostgresLedgerStore(store_url)
    yield made
    made.close()


@pytest.fixture
def key() -> str:
    """A key prefix no other test uses (the stores outlive one test)."""
    return f"t{uuid.uuid4().hex[:12]}"


def pass_time(ledger: Ledger, seconds: float) -> None:
    """Let ``seconds`` pass for ``ledger``'s reservations: on the memory store's fake clock, or
    really (Redis and PostgreSQL keep their own)."""
    store = ledger.store
    if isinstance(store, MemoryLedgerStore) and isinstance(store.clock, Clock):
        store.clock.at += seconds
    else:
        threading.Event().wait(seconds)  # the stores' own clocks: the time under test


def model_at(server: QuotaServer, **changes: Any) -> Model:
    """The server's model at :data:`PRICES`."""
    return server.model().model_copy(update={"cost": PRICES, **changes})


def charged(stats: dict[str, int]) -> float:
    """What the server's answers cost at :data:`PRICES`."""
    fresh = stats["prompt_tokens"] - stats["cached_tokens"]
    total = fresh * PRICES.input + stats["cached_tokens"] * PRICES.cache_read
    return (total + stats["completion_tokens"] * PRICES.output) / 1_000_000


# --- the stores' contract ---------------------------------------------------------------------


def test_a_reservation_holds_then_settles_into_every_window(store: LedgerStore, key: str) -> None:
    ledger = Ledger(store)
    held = ledger.reserve([f"{key}:tenant", f"{key}:user"], 0.5, 1000)
    (row,) = ledger.spend("day", prefix=f"{key}:user")
    assert (row.usd, row.requests, row.held_usd, row.held_tokens) == (0.0, 0, 0.5, 1000)
    assert ledger.settle(held, 0.25, 800)
    for window in ("hour", "day", "month", "total"):
        rows = ledger.spend(window, prefix=key)
        assert [(r.key, r.usd, r.tokens, r.requests, r.held_usd) for r in rows] == [
            (f"{key}:tenant", 0.25, 800, 1, 0.0),
            (f"{key}:user", 0.25, 800, 1, 0.0),
        ]
        assert {r.period for r in rows} == {periods(time.time())[window]}
    assert ledger.spent(f"{key}:user", "month").usd == 0.25
    assert ledger.spent(f"{key}:nobody").usd == 0.0


def test_a_cap_refuses_what_would_pass_it_counting_what_is_held(
    store: LedgerStore, key: str
) -> None:
    ledger = Ledger(store, [Cap(f"{key}:user:*", "day", usd=1.0)])
    first = ledger.reserve([f"{key}:user:1"], 0.6)
    with pytest.raises(SpendCapError) as caught:
        ledger.reserve([f"{key}:user:1"], 0.6)  # 0.6 held + 0.6 > 1
    refusal = caught.value
    assert (refusal.key, refusal.window, refusal.cap_usd) == (f"{key}:user:1", "day", 1.0)
    assert (refusal.usd, refusal.asked_usd) == (0.6, 0.6)
    assert f"the day cap of {key}:user:1 ($1)" in str(refusal)
    ledger.reserve([f"{key}:user:2"], 0.6)  # each user has a cap of their own
    ledger.settle(first, 0.2, 100)  # it cost less than held
    ledger.reserve([f"{key}:user:1"], 0.6)  # 0.2 + 0.6 fits
    with pytest.raises(SpendCapError):
        ledger.reserve([f"{key}:user:1"], 0.3)
    assert ledger.spent(f"{key}:user:1").held_usd == 0.6  # a refusal holds nothing


def test_a_token_cap_and_a_cap_given_with_the_reservation(store: LedgerStore, key: str) -> None:
    ledger = Ledger(store)
    caps = [Cap(f"{key}:team", "month", tokens=1000)]
    ledger.settle(ledger.reserve([f"{key}:team"], 0.0, 900, caps=caps), 0.0, 900)
    with pytest.raises(SpendCapError, match="1000 tokens"):
        ledger.reserve([f"{key}:team"], 0.0, 200, caps=caps)
    ledger.reserve([f"{key}:team"], 0.0, 200)  # without that cap, nothing holds it back


def test_a_reservation_settles_once(store: LedgerStore, key: str) -> None:
    ledger = Ledger(store)
    held = ledger.reserve([f"{key}:user"], 0.1)
    assert ledger.settle(held, 0.05, 10)
    assert not ledger.settle(held, 0.05, 10)  # a worker retrying after a lost reply
    assert not Ledger(store).release(held)
    row = ledger.spent(f"{key}:user")
    assert (row.usd, row.tokens, row.requests) == (0.05, 10, 1)


def test_a_reservation_never_settled_stops_counting_after_its_hold(
    store: LedgerStore, key: str
) -> None:
    """Its worker died mid-request: what it held is freed after ``hold``, not held for ever;
    settled late after all, its request is counted once."""
    if isinstance(store, MemoryLedgerStore):
        store.clock = Clock(1000.0)
    ledger = Ledger(store, [Cap(f"{key}:user", "day", usd=1.0)], hold=0.3)
    dead = ledger.reserve([f"{key}:user"], 0.9)
    with pytest.raises(SpendCapError):
        ledger.reserve([f"{key}:user"], 0.5)
    pass_time(ledger, 0.4)
    assert ledger.spent(f"{key}:user").held_usd == 0.0
    alive = ledger.reserve([f"{key}:user"], 0.5)
    assert ledger.settle(dead, 0.3, 30)  # it answered after all
    assert not ledger.settle(dead, 0.3, 30)
    ledger.settle(alive, 0.5, 50)
    assert ledger.spent(f"{key}:user").usd == pytest.approx(0.8)


def test_windows_are_calendar_periods_in_utc(store: LedgerStore, key: str) -> None:
    clock = Clock(1_764_716_400.0)  # 2025-12-02 23:00 UTC
    ledger = Ledger(store, clock=clock)
    ledger.settle(ledger.reserve([key], 1.0), 1.0, 1)
    clock.at += 3600  # the next day, the same month
    ledger.settle(ledger.reserve([key], 2.0), 2.0, 1)
    assert [r.period for r in ledger.spend("day", prefix=key)] == ["2025-12-03"]
    assert ledger.spent(key, "day").usd == 2.0
    assert ledger.spent(key, "day", at=clock.at - 3600).usd == 1.0
    assert ledger.spent(key, "hour", at=clock.at - 3600).period == "2025-12-02T23"
    assert (ledger.spent(key, "month").usd, ledger.spent(key, "total").usd) == (3.0, 3.0)


def test_bad_keys_amounts_and_caps_are_refused_and_change_nothing(
    store: LedgerStore, key: str
) -> None:
    ledger = Ledger(store)
    for bad in ("", "a b", "tab\\there".replace("\\t", "\t"), "x" * 201, 42):
        with pytest.raises(LedgerError, match="key"):
            ledger.reserve([bad], 0.1)  # type: ignore[list-item]
    for amount in (float("nan"), float("inf"), -1.0):
        with pytest.raises(LedgerError, match="finite amount"):
            ledger.reserve([key], amount)
    with pytest.raises(LedgerError, match="one key"):
        ledger.reserve([], 0.1)
    with pytest.raises(ValueError, match="usd=..., tokens=..."):
        Cap(key, "day")
    with pytest.raises(ValueError):
        Cap(key, "week", usd=1)  # type: ignore[arg-type]
    with pytest.raises(LedgerError, match="window"):
        ledger.spend("week")  # type: ignore[arg-type]
    assert ledger.spend("total", prefix=key) == []
    for odd in (f"{key}:a_b%", f"{key}:axbx", f"{key}:{{slot}}"):  # LIKE's and Redis's specials
        ledger.settle(ledger.reserve([odd], 0.1), 0.1, 1)
    assert [r.key for r in ledger.spend("total", prefix=f"{key}:a_b%")] == [f"{key}:a_b%"]
    assert ledger.spent(f"{key}:{{slot}}", "total").usd == 0.1


def test_an_unreachable_store_says_which_without_its_password() -> None:
    from tests.servers import free_port

    for scheme in ("redis", "postgresql"):
        url = f"{scheme}://user:hunter2@127.0.0.1:{free_port()}/0"
        with pytest.raises(LedgerError) as caught:
            Ledger(url).reserve(["k"], 0.1)
        assert "hunter2" not in str(caught.value)
        assert "127.0.0.1" in str(caught.value)


# --- the policy: each request reserved, settled, and a run ended at its cap -------------------


def test_a_run_ends_at_its_cap_with_the_budget_stop_reason_and_every_request_is_counted(
    quota_server: Any, key: str
) -> None:
    server = quota_server(hidden_tokens=300, cached_tokens=200, output_tokens=100)
    ledger = Ledger(caps=[Cap(f"{key}:user:*", "day", usd=0.02)])
    policy = SpendPolicy(ledger, [f"{key}:tenant", f"{key}:user:1"])
    results = []
    for _ in range(10):
        agent = Agent(model=model_at(server, max_tokens=100), api_key="k", policies=[policy])
        results.append(agent.prompt("Hello"))
        if results[-1].stop_reason != "stop":
            break
    *answered, last = results
    assert (last.stop_reason, last.budget) == ("budget", "spend")
    assert (last.error_message or "").startswith(f"Spend cap reached: the day cap of {key}:user:1")
    assert last.ending is not None and last.ending.detail["cap_usd"] == 0.02
    assert [m.role for m in agent.state.messages] == ["user"]  # nothing sent, nothing half-done
    stats = server.stats()
    assert stats["received"] == len(answered) == 3
    # What the server charged, its cached input at the cache's price, is what the ledger holds,
    # under each key, and what the runs' results say they cost.
    for name in (f"{key}:tenant", f"{key}:user:1", "model:openai:gpt-4o-mini"):
        row = ledger.spent(name)
        assert row.usd == pytest.approx(charged(stats)) and row.requests == 3
    assert sum(r.usage.cost.total for r in answered) == pytest.approx(charged(stats))
    assert ledger.spent(f"{key}:user:2").usd == 0.0


def test_a_retried_request_is_counted_once(quota_server: Any, key: str) -> None:
    server = quota_server(failures=1, output_tokens=10)  # a 503, then the answer
    ledger = Ledger()
    agent = Agent(
        model=model_at(server), api_key="k", policies=[SpendPolicy(ledger, [key])],
        retry_base_delay_ms=1,
    )  # fmt: skip
    assert agent.prompt("Hello").text == "ok"
    stats = server.stats()
    assert (stats["received"], stats["accepted"]) == (2, 1)
    row = ledger.spent(key)
    assert (row.requests, row.usd, row.held_usd) == (1, pytest.approx(charged(stats)), 0.0)


def test_sub_agents_spend_under_their_parents_keys(quota_server: Any, key: str) -> None:
    from agentkit.subagents import agent_tool
    from agentkit.testing import ScriptedModel, reply, tool_call

    server = quota_server(output_tokens=10)
    child = Agent(model=model_at(server), api_key="k", name="helper", description="helps")
    parent_model = ScriptedModel([reply(tool_call("helper", {"task": "help"})), "done"])
    ledger = Ledger()
    parent = Agent(
        model=parent_model.model, stream_fn=parent_model, tools=[agent_tool(child)],
        policies=[SpendPolicy(ledger, [f"{key}:tenant"], by_model=False)],
    )  # fmt: skip
    assert parent.prompt("Go").text == "done"
    row = ledger.spent(f"{key}:tenant")
    assert row.requests == 3  # the parent's two and its sub-agent's one
    assert row.usd == pytest.approx(charged(server.stats())) and row.usd > 0
    assert child.policies == []  # the sub-agent was a copy: the agent given is as it was


def test_a_ledger_that_cannot_be_reached_sends_nothing(quota_server: Any, key: str) -> None:
    from tests.servers import free_port

    server = quota_server()
    ledger = Ledger(f"redis://:hunter2@127.0.0.1:{free_port()}/0")
    agent = Agent(model=model_at(server), api_key="k", policies=[SpendPolicy(ledger, [key])])
    result = agent.prompt("Hello")
    assert result.stop_reason == "error"
    assert "Redis ledger store" in (result.error_message or "")
    assert "hunter2" not in (result.error_message or "")
    assert server.stats()["received"] == 0


def test_a_spend_that_cannot_be_settled_is_logged_and_the_answer_kept(
    quota_server: Any, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(MemoryLedgerStore):
        def settle(self, reservation: Any, usd: float, tokens: int) -> bool:
            raise LedgerError("the store went away")

    server = quota_server()
    ledger = Ledger(Failing())
    agent = Agent(model=model_at(server), api_key="k", policies=[SpendPolicy(ledger, [key])])
    assert agent.prompt("Hello").text == "ok"
    assert "could not be settled" in caplog.text and "the store went away" in caplog.text
    assert ledger.spent(key).held_usd > 0  # until its hold ends


# --- agentkit ledger --------------------------------------------------------------------------


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["ledger", *args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_the_ledger_command_lists_spend_by_key_and_window(kind: str, request: Any) -> None:
    server: Any = request.getfixturevalue(f"{kind}_server")
    key = f"cli{uuid.uuid4().hex[:8]}"
    url = server.url
    with Ledger(url) as ledger:
        ledger.settle(ledger.reserve([f"{key}:a", f"{key}:b"], 0.5, 100), 0.125, 90)
        ledger.reserve([f"{key}:b"], 0.25, 10)
    code, out, err = run_cli("--store", url, "--prefix", key)
    day = periods(time.time())["day"]
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{key}:a\t{day}\t$0.1250\t90 tokens\t1 requests",
        f"{key}:b\t{day}\t$0.1250\t90 tokens\t1 requests\theld $0.2500",
    ]
    code, out, _ = run_cli("--store", url, "--prefix", f"{key}:a", "--window", "month", "--json")
    assert json.loads(out)["period"] == periods(time.time())["month"]
    code, out, _ = run_cli("--store", url, "--prefix", key, "--period", "2001-01-01")
    assert (code, out) == (0, f"{key}:b\t2001-01-01\t$0.0000\t0 tokens\t0 requests\theld $0.2500\n")


def test_the_ledger_command_says_what_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTKIT_LEDGER", raising=False)
    assert run_cli()[0:3:2] == (
        1,
        "agentkit: no ledger store: give --store URL or set AGENTKIT_LEDGER\n",
    )
    code, _, err = run_cli("--store", "memory://")
    assert code == 1 and "its own process" in err
    code, _, err = run_cli("--store", "redis://127.0.0.1:1/0", "--period", "yesterday")
    assert code == 1 and "--period is a month (2026-12)" in err


# --- a fleet of processes ---------------------------------------------------------------------

FLEET = 20


def spawn(*args: str, **options: Any) -> subprocess.Popen[str]:
    env = worker_env(PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, text=True, env=env,
        **options,
    )  # fmt: skip


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_twenty_processes_racing_one_cap_pass_it_by_at_most_a_request_each(
    kind: str, request: Any, quota_server: Any
) -> None:
    url = request.getfixturevalue(f"{kind}_server").url
    key = f"fleet{uuid.uuid4().hex[:8]}"
    # Each answer is charged 2300 tokens its request does not show (about $0.025: some 40 of
    # them fit the cap): it costs more than the worst case reserved for it, so each process's
    # request in flight may pass the cap.
    server = quota_server(hidden_tokens=2300, cached_tokens=200, output_tokens=100)
    workers = [spawn(server.url, url, key, "1.0", "1000") for _ in range(FLEET)]
    reasons: Counter[str] = Counter()
    for worker in workers:
        out, _ = worker.communicate(timeout=300)
        assert worker.returncode == 0
        mine = json.loads(out)
        assert mine.get("budget") == 1 and set(mine) <= {"stop", "budget"}, mine
        reasons.update(mine)
    stats = server.stats()
    cost = charged(stats)
    each = cost / stats["accepted"]
    with Ledger(url) as ledger:
        row = ledger.spent(key, "total")
    # Every answer counted, once; none held any more.
    assert (row.requests, row.held_usd) == (stats["accepted"], 0.0) == (reasons["stop"], 0.0)
    assert row.usd == pytest.approx(cost)
    # The cap is used, and passed by at most one request in flight per process.
    assert 1.0 - each <= cost <= 1.0 + FLEET * each, (cost, each)


@pytest.mark.processes
@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_what_a_killed_worker_held_is_freed_after_its_hold(
    kind: str, request: Any, quota_server: Any
) -> None:
    url = request.getfixturevalue(f"{kind}_server").url
    key = f"dead{uuid.uuid4().hex[:8]}"
    server = quota_server(delay=60)  # it never answers while the test runs
    worker = spawn(server.url, url, key, "1.0", "1", "--stall")
    try:
        assert server.wait_received(1, WAIT * 6)  # reserved before it was sent
        ledger = Ledger(url, [Cap(key, "total", usd=1.0)])
        held = ledger.spent(key, "total")
        assert held.held_usd > 0 and held.requests == 0
        worker.send_signal(signal.SIGKILL)
        worker.wait(WAIT)
        row = ledger.spent(key, "total")
        ends = time.monotonic() + WAIT * 2
        while row.held_usd > 0 and time.monotonic() < ends:  # the worker's hold (5 s) runs out
            threading.Event().wait(0.2)
            row = ledger.spent(key, "total")
        assert (row.usd, row.requests, row.held_usd) == (0.0, 0, 0.0)
        ledger.reserve([key], 1.0)  # the whole cap is free again
        ledger.close()
    finally:
        worker.kill()
        worker.wait(WAIT)
        if worker.stdout is not None:
            worker.stdout.close()
