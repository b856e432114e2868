"""One process of a fleet, for the rate limiter's multi-process tests and benchmark: ``runs``
agents on ``threads`` threads against ``base_url``, sharing a quota through Redis (or through
nothing when the Redis URL is ``-``). Prints the runs' stop reasons as one JSON object.

``python tests/policies/fleet_worker.py BASE_URL REDIS_URL|- REQUESTS PER RUNS THREADS``
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from agentkit import Agent
from agentkit.limits import Quota, RateLimiter, RedisBackend
from agentkit.types import Model


def main(argv: list[str]) -> None:
    base_url, redis_url, requests, per, runs, threads = argv
    model = Model(id="gpt-4o-mini", api="openai-completions", provider="openai", base_url=base_url)
    limiter = None
    if redis_url != "-":
        quota = Quota(requests=int(requests), per=float(per))
        limiter = RateLimiter({"openai": quota}, backend=RedisBackend(redis_url))

    def run(_: int) -> str:
        agent = Agent(model=model, api_key="test-key", rate_limiter=limiter, timeout=(10, 10))
        agent.prompt("Hello")
        return str(agent.state.messages[-1].stop_reason)

    with ThreadPoolExecutor(int(threads)) as pool:
        reasons = Counter(pool.map(run, range(int(runs))))
    print(json.dumps(dict(reasons)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
