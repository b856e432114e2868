"""Evaluation benchmark: the time per replayed case, beside a plain ``agent.prompt()`` of the
same case on :class:`~agentkit.testing.ScriptedModel`.

Each case is a recorded first turn of the travel desk of ``tests/evals``: a tool call, its
result and the answer (two model requests). The replay runs 200 of them with two evaluators
(``EqualsExpected``, ``SameToolCalls``), one at a time and 20 at a time; the baseline runs the
same 200 turns as plain ``agent.prompt()`` calls on a fresh agent each, one at a time.

Run: ``python benchmarks/bench_evals.py`` (``--quick`` for 50 cases). Nothing asserts.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from agentkit import Agent  # noqa: E402
from agentkit.evals import Case, Dataset, EqualsExpected, SameToolCalls  # noqa: E402
from agentkit.sessions import open_store  # noqa: E402
from agentkit.testing import ScriptedModel  # noqa: E402
from tests.evals.support import (  # noqa: E402
    CITIES,
    SYSTEM,
    desk,
    record_sessions,
    script_for,
    weather,
)

CASES = 50 if "--quick" in sys.argv else 200
ROUNDS = 3


def dataset(store_path: Path) -> Dataset:
    store = open_store(store_path)
    record_sessions(store, len(CITIES))
    firsts = [c for c in Dataset.from_sessions(store) if c.metadata["turn"] == 1]
    store.close()
    cases = [
        Case(f"case-{i}", turns=firsts[i % len(firsts)].turns,
             recording=firsts[i % len(firsts)].recording,
             expected_output=firsts[i % len(firsts)].expected_output)
        for i in range(CASES)
    ]  # fmt: skip
    return Dataset(cases, evaluators=[EqualsExpected(), SameToolCalls()])


def replay(cases: Dataset, concurrency: int) -> float:
    started = time.perf_counter()
    report = cases.run(desk(), mode="replay", concurrency=concurrency, progress=False)
    elapsed = time.perf_counter() - started
    assert report.pass_rate == 1.0, report.table()
    return elapsed


def plain() -> float:
    started = time.perf_counter()
    for index in range(CASES):
        city = CITIES[index % len(CITIES)]
        model = ScriptedModel(script_for(city)[:2])
        with Agent(model=model.model, stream_fn=model, tools=[weather],
                   system_prompt=SYSTEM) as agent:  # fmt: skip
            agent.prompt(f"What is the weather in {city}?")
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        cases = dataset(Path(folder) / "sessions.db")
    rows = {
        "plain agent.prompt(), one at a time": [plain() for _ in range(ROUNDS)],
        "replayed case, one at a time": [replay(cases, 1) for _ in range(ROUNDS)],
        "replayed case, 20 at a time": [replay(cases, 20) for _ in range(ROUNDS)],
    }
    print(f"{CASES} cases (a tool call and an answer each), median of {ROUNDS} rounds")
    for label, times in rows.items():
        total = statistics.median(times)
        print(f"  {label:<40} {total:6.2f} s in all  {total / CASES * 1000:6.2f} ms per case")


if __name__ == "__main__":
    main()
