"""A 429 storm, with and without the shared rate limiter (agentkit.limits).

A local OpenAI-compatible server (``tests/quota_server.py``) allows 20 requests in any 2 s and
answers 429 with the exact wait beyond that, as a hosted API does. A fleet of agents, each making
one request with the default retry policy (2 retries, ``Retry-After`` honoured), runs against it:
first as threads of one process, then as 3 processes; each without a limiter, then sharing one
(in memory for the threads, through Redis for the processes). Reported: requests the server
received, 429s it sent, runs that failed, and the wall time against the quota's floor (the time
the quota needs to let every run through).

Run: ``python benchmarks/bench_quota.py`` (it starts its own Redis from the test extra's wheel;
``--quick`` for a smaller fleet). Nothing asserts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from agentkit import Agent  # noqa: E402
from agentkit.limits import Quota, RateLimiter  # noqa: E402
from tests.quota_server import QuotaServer  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

QUICK = "--quick" in sys.argv
REQUESTS, PER = 20, 2.0
RUNS = 60 if QUICK else 120  # per fleet (threads), or per process x 3
PROCESSES = 3
WORKER = ROOT / "tests" / "fleet_worker.py"


def floor(runs: int) -> float:
    """Seconds the quota needs to admit ``runs`` requests (the first window is free)."""
    return (runs - 1) // REQUESTS * PER


def threads(limited: bool) -> tuple[dict[str, int], Counter[str], float]:
    server = QuotaServer(requests=REQUESTS, per=PER, delay=0.05).start()
    limiter = RateLimiter({"openai": Quota(requests=REQUESTS, per=PER)}) if limited else None

    def run(_: int) -> str:
        agent = Agent(model=server.model(), api_key="k", rate_limiter=limiter, timeout=(30, 30))
        agent.prompt("Hello")
        return str(agent.state.messages[-1].stop_reason)

    started = time.monotonic()
    with ThreadPoolExecutor(RUNS) as pool:
        reasons = Counter(pool.map(run, range(RUNS)))
    wall = time.monotonic() - started
    stats = server.stats()
    server.stop()
    return stats, reasons, wall


def processes(redis_url: str | None) -> tuple[dict[str, int], Counter[str], float]:
    server = QuotaServer(requests=REQUESTS, per=PER, delay=0.05).start()
    runs = RUNS // PROCESSES
    args = [server.url, redis_url or "-", str(REQUESTS), str(PER), str(runs), str(runs)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.monotonic()
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(PROCESSES)
    ]
    reasons: Counter[str] = Counter()
    for worker in workers:
        out, _ = worker.communicate()
        reasons.update(json.loads(out))
    wall = time.monotonic() - started
    stats = server.stats()
    server.stop()
    return stats, reasons, wall


def row(name: str, result: tuple[dict[str, int], Counter[str], float], runs: int) -> str:
    stats, reasons, wall = result
    failed = runs - reasons.get("stop", 0)
    return (
        f"| {name} | {runs} | {stats['received']} | {stats['rejected']} | {failed} | "
        f"{stats['peak_requests']} | {wall / max(floor(runs), PER):.2f} |"
    )


def main() -> None:
    print(f"quota: {REQUESTS} requests per {PER:.0f} s; one request per run; default retries\n")
    print("| fleet | runs | requests received | 429s sent | runs failed | peak per window "
          "| wall / quota floor |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    print(row("threads, no limiter", threads(False), RUNS), flush=True)
    print(row("threads, RateLimiter (memory)", threads(True), RUNS), flush=True)
    redis = RedisServer().start()
    try:
        runs = RUNS // PROCESSES * PROCESSES
        print(row(f"{PROCESSES} processes, no limiter", processes(None), runs), flush=True)
        print(row(f"{PROCESSES} processes, RateLimiter (Redis)", processes(redis.url), runs))
    finally:
        redis.close()


if __name__ == "__main__":
    main()
