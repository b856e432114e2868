"""Session benchmarks: append latency (p50/p99) and loading a 10,000-message session on each
store, then 200 concurrent sessions run by 2 Celery worker processes on the scripted model
(runs per second, and a check that no message was lost or duplicated).

Run: ``python benchmarks/bench_sessions.py`` (it starts its own Redis and PostgreSQL servers
from the test extra's wheels; ``--quick`` for smaller numbers). Nothing asserts; the Celery part
exits non-zero if a message was lost or duplicated.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

from agentkit.sessions import (  # noqa: E402
    Session,
    SessionStore,
    decode_message,
    encode_message,
    open_store,
)
from agentkit.types import AssistantMessage, TextContent, Usage, UserMessage  # noqa: E402
from tests.servers import PostgresServer, RedisServer  # noqa: E402

QUICK = "--quick" in sys.argv
APPENDS = 200 if QUICK else 1000
LOADED = 10_000
SESSIONS = 40 if QUICK else 200


def message(index: int) -> AssistantMessage | UserMessage:
    """A typical transcript message (about 300 bytes of JSON)."""
    if index % 2 == 0:
        return UserMessage(content=[TextContent(text=f"question {index}: what changed today?")])
    return AssistantMessage(
        content=[TextContent(text=f"answer {index}: the deploy moved to Thursday at noon.")],
        api="scripted", provider="scripted", model="scripted", usage=Usage(input=120, output=30),
    )  # fmt: skip


def bench_store(kind: str, store: SessionStore) -> None:
    session = Session(f"bench-append-{uuid.uuid4().hex[:8]}", store)
    latencies = []
    for index in range(APPENDS):
        started = time.perf_counter()
        session.append(message(index))
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()
    p50 = statistics.median(latencies)
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    big = Session(f"bench-load-{uuid.uuid4().hex[:8]}", store)
    for start in range(0, LOADED, 1000):
        big.append(*(message(i) for i in range(start, start + 1000)))
    started = time.perf_counter()
    loaded = Session(big.name, store).load()
    load_s = time.perf_counter() - started
    assert len(loaded) == LOADED
    records = [encode_message(m) for m in loaded]
    started = time.perf_counter()
    for record in records:  # the floor: turning the same records into messages, no store
        decode_message(record)
    floor_s = time.perf_counter() - started
    print(f"{kind:9} append p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  ({APPENDS} appends)   "
          f"load {LOADED} messages {load_s * 1000:7.1f} ms "
          f"({load_s / floor_s:.1f}x decoding alone)")  # fmt: skip
    session.delete()
    big.delete()


def bench_celery(redis_url: str) -> bool:
    """SESSIONS runs submitted at once to two prefork workers; returns whether all is exact."""
    import celery_worker as sample

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_")}
    env.update(AGENTKIT_CELERY_BROKER=redis_url, AGENTKIT_SAMPLE_READ_SECONDS="0")
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_worker",
                "worker",
                "--pool=prefork",
                "--concurrency=1",
                "--loglevel=WARNING",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                f"--hostname=bench{index}-{os.getpid()}@bench",
            ],
            cwd=ROOT / "samples",
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for index in range(2)
    ]
    try:
        sample.app.conf.update(broker_url=redis_url, result_backend=redis_url)
        names = [f"bench-run-{uuid.uuid4().hex[:8]}-{i}" for i in range(SESSIONS)]
        warm = sample.submit(sample.run_agent, Session(f"warm-{uuid.uuid4().hex}", redis_url), "hi")
        warm.get(timeout=120)  # both workers up and importing done before the clock starts
        started = time.perf_counter()
        results = [sample.submit(sample.run_agent, Session(n, redis_url), "Summarise it")
                   for n in names]  # fmt: skip
        for result in results:
            result.get(timeout=300)
        elapsed = time.perf_counter() - started
        store = open_store(redis_url)
        expected = ["user", "assistant", "tool_result", "assistant"]
        wrong = [n for n in names if [m.role for m in Session(n, store).load()] != expected]
        store.close()
        floor = in_process_runs_per_second(sample)
        print(f"celery    {SESSIONS} sessions on 2 worker processes: {elapsed:.2f} s, "
              f"{SESSIONS / elapsed:.1f} runs/s ({SESSIONS / elapsed / floor:.2f}x the same runs "
              f"one after another in one process, without a session: {floor:.0f} runs/s); "
              f"sessions lost or duplicated messages: {len(wrong)}")  # fmt: skip
        return not wrong
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(30)


def in_process_runs_per_second(sample: object) -> float:
    """The floor: the sample's agent run in this process, no session, no Celery, no Redis."""
    from agentkit import Agent

    module: Any = sample
    runs = 50
    started = time.perf_counter()
    for _ in range(runs):
        with Agent(model=module.SCRIPTED_MODEL, stream_fn=module.rule_model(module.demo_answer),
                   tools=[module.read_report], system_prompt="s") as agent:  # fmt: skip
            agent.prompt("Summarise it")
    return runs / (time.perf_counter() - started)


def main() -> int:
    redis = RedisServer().start()
    postgres = PostgresServer().start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            for kind, url in [("sqlite", f"sqlite://{folder}/bench.db"), ("redis", redis.url),
                              ("postgres", postgres.url)]:  # fmt: skip
                with open_store(url) as store:
                    bench_store(kind, store)
        os.environ["AGENTKIT_CELERY_BROKER"] = redis.url
        os.environ["AGENTKIT_SAMPLE_READ_SECONDS"] = "0"
        return 0 if bench_celery(redis.url) else 1
    finally:
        postgres.close()
        redis.close()


if __name__ == "__main__":
    sys.exit(main())
