"""How late a 10 ms ticker on the event loop runs while N ``aprompt()`` calls start at once.

Each run's model waits until every run has asked it (so the runs are idle once started, and the
figure is about starting them); the ticker keeps ticking through the starts and a little after.
A loop that waited for each run's worker thread to come up stalls for the sum of those starts.

    PYTHONPATH=. python benchmarks/bench_loop_lag.py [--runs 50] [--repeat 5]

Prints the worst lag of each repetition and their median (ms). Compare two checkouts by
running it from each, interleaved, on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

from agentkit import Agent
from agentkit.testing import ScriptedModel


def agents(runs: int, asked: threading.Semaphore, release: threading.Event) -> list[Agent]:
    def one() -> Agent:
        model = ScriptedModel(["done"])

        def slow_model(*args: Any) -> Any:
            asked.release()
            release.wait(30)
            return model(*args)

        return Agent(model=model.model, stream_fn=slow_model)

    return [one() for _ in range(runs)]


async def worst_lag(runs: int) -> float:
    asked, release = threading.Semaphore(0), threading.Event()
    batch = agents(runs, asked, release)
    loop = asyncio.get_running_loop()
    all_asked = asyncio.Event()
    lags: list[float] = []

    def count() -> None:
        for _ in range(runs):
            asked.acquire()
        loop.call_soon_threadsafe(all_asked.set)

    async def tick() -> None:
        while True:
            due = time.perf_counter() + 0.01
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - due)

    counter = threading.Thread(target=count, name="bench-count")
    counter.start()
    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.05)
    results = [asyncio.ensure_future(agent.aprompt("go")) for agent in batch]
    await all_asked.wait()
    await asyncio.sleep(0.05)  # the late tick is recorded
    ticker.cancel()
    release.set()
    await asyncio.gather(*results)
    counter.join()
    return max(lags) * 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    await Agent(model=ScriptedModel(["warm"]).model, stream_fn=ScriptedModel(["warm"])).aprompt(
        "warm up"
    )
    worst = [await worst_lag(args.runs) for _ in range(args.repeat)]
    print(
        f"{args.runs} aprompt() at once, worst ticker lag per repetition (ms):",
        " ".join(f"{w:.1f}" for w in worst),
        f"- median {statistics.median(worst):.1f}",
    )


if __name__ == "__main__":
    asyncio.run(main())
