"""Run-log benchmarks, per store (SQLite, Redis, PostgreSQL): what logging a run's events costs
beside the same run without a session and with a session whose run logs are off; how late a
follower on another connection sees an event; how fast an abort sent from another process
reaches a running tool.

Run: ``python benchmarks/bench_runlog.py`` (it starts its own Redis and PostgreSQL servers from
the test extra's wheels; ``--quick`` for smaller numbers). Nothing asserts.

The run is the scripted model's: a tool call, then an answer of 200 deltas (about 230 events),
no delay: the worst case for logging, since a real model's deltas come far slower than the
store writes them.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from agentkit import Agent, runlog, tool  # noqa: E402
from agentkit.sessions import Session, SessionStore, open_store  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.servers import PostgresServer, RedisServer, worker_env  # noqa: E402

QUICK = "--quick" in sys.argv
RUNS = 20 if QUICK else 100
ABORTS = 5 if QUICK else 20
CHILD = str(ROOT / "tests" / "sessions" / "runlog_child.py")


@tool
def look_up(topic: str) -> str:
    """Look a topic up."""
    return f"{topic}: found"


def one_run(session: Session | None, pace: float = 0.0) -> tuple[float, str]:
    """Seconds one run takes, start to end (its log's end written), and its id; ``pace`` is
    the seconds between two deltas of its answer (a model streaming)."""
    answer = reply("y" * 200, delay=pace)
    model = ScriptedModel([reply("Looking.", tool_call("look_up", {"topic": "x"})), answer],
                          chunk_size=1)  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[look_up], session=session)
    started = time.perf_counter()
    run = agent.start("go")
    run.wait()
    took = time.perf_counter() - started
    agent.close()
    return took, run.id


def per_run(store: SessionStore, runs: int = RUNS, pace: float = 0.0
            ) -> tuple[float, float, float]:  # fmt: skip
    """The median milliseconds of a run without a session, with one in ``store`` whose run
    logs are off, and with one whose run logs are on: :data:`RUNS` of each, interleaved (so a
    machine busy for a while weighs on all three alike), after two of each to warm up."""
    times: dict[str, list[float]] = {"bare": [], "off": [], "on": []}
    for index in range(runs + 2):
        for mode in times:
            store.run_logs = mode == "on"
            session = None if mode == "bare" else Session(uuid.uuid4().hex, store)
            took, _ = one_run(session, pace)
            if index >= 2:
                times[mode].append(took * 1000)
    store.run_logs = True
    bare, off, on = (statistics.median(times[mode]) for mode in ("bare", "off", "on"))
    return bare, off, on


def delivery(store_url: str, store: SessionStore) -> tuple[float, float]:
    """p50 and p95 milliseconds from an event's emission to its arrival at a follower on
    another connection (this process's clock for both)."""
    other = open_store(store_url)
    model = ScriptedModel([reply("y" * 200, delay=0.002)], chunk_size=1)
    agent = Agent(model=model.model, stream_fn=model, session=Session(uuid.uuid4().hex, store))
    run = agent.start("go")
    lags: list[float] = []
    for event in runlog.attach(other, run.id):
        if event.time_ms is not None:
            lags.append(time.time() * 1000 - event.time_ms)
    agent.close()
    other.close()
    lags.sort()
    return statistics.median(lags), lags[int(len(lags) * 0.95)]


def aborts(store_url: str, store: SessionStore) -> list[float]:
    """Milliseconds from ``runlog.abort()`` here to the tool of a run in another process seeing
    it, :data:`ABORTS` times."""
    took = []
    for _ in range(ABORTS):
        run_id = uuid.uuid4().hex
        child = subprocess.Popen(
            [sys.executable, CHILD, store_url, run_id, run_id, "10", "wait"],
            stdout=subprocess.PIPE, text=True, env=worker_env(PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        time.sleep(0.2)  # the run's command wait is under way, as in a long tool
        sent = time.time()
        runlog.abort(store, run_id)
        words = child.stdout.readline().split()
        took.append((float(words[1]) - sent) * 1000)
        child.wait(30)
        child.stdout.close()
    return sorted(took)


def bench(kind: str, store_url: str) -> None:
    store = open_store(store_url)
    bare, unlogged, logged = per_run(store)
    _, paced_off, paced_on = per_run(store, max(3, RUNS // 10), pace=0.002)
    _, run_id = one_run(Session(uuid.uuid4().hex, store))
    events = runlog.run_info(store, run_id).last_seq
    p50, p95 = delivery(store_url, store)
    abort_ms = aborts(store_url, store)
    print(f"{kind:9} run: no session {bare:6.1f} ms | session {unlogged:6.1f} ms | session + "
          f"run log {logged:6.1f} ms ({logged - unlogged:+.1f} ms, {events} events logged); "
          f"streamed at 2 ms a delta: {paced_off:.0f} ms, with run log {paced_on:.0f} ms "
          f"({100 * (paced_on - paced_off) / paced_off:+.1f} %) | "
          f"follower lag p50 {p50:.1f} ms p95 {p95:.1f} ms | abort reached the tool: median "
          f"{statistics.median(abort_ms):.0f} ms, max {max(abort_ms):.0f} ms ({len(abort_ms)})")
    store.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        bench("sqlite", f"sqlite:///{folder}/sessions.db")
    servers: list[Any] = []
    try:
        redis = RedisServer().start()
        servers.append(redis)
        bench("redis", redis.url)
        postgres = PostgresServer().start()
        servers.append(postgres)
        bench("postgres", postgres.url)
    finally:
        for server in servers:
            server.close()


if __name__ == "__main__":
    main()
