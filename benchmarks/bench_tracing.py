"""Tracing's cost per turn, on and off: the same 20-turn runs (one tool call a turn, an instant
provider, so only agentkit's own work is timed) without tracing, with ``enable_tracing`` on an
SDK tracer provider (spans exported to memory), and with content capture too.
Run: ``python benchmarks/bench_tracing.py``. Medians and ratios to stdout; nothing asserts.

The end-to-end figure against a real HTTP server is the shared harness's ``compare.sh`` run
with a driver whose agents call ``enable_tracing`` (see docs/tracing.md).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentkit import Agent, tool
from agentkit.integrations.tracing import enable_tracing
from agentkit.testing import ScriptedModel, reply, tool_call

TURNS = 20
RUNS = 30


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def per_turn_us(setup: Callable[[Agent], Any]) -> float:
    """Median microseconds per turn over RUNS runs of TURNS turns each."""
    samples = []
    for _ in range(RUNS):
        script: list[Any] = [reply(tool_call("noop")) for _ in range(TURNS - 1)] + ["done"]
        model = ScriptedModel(script, chunk_size=1000)
        agent = Agent(model=model.model, stream_fn=model, tools=[noop])
        setup(agent)
        start = time.perf_counter()
        agent.prompt("go")
        samples.append((time.perf_counter() - start) / TURNS * 1e6)
    return statistics.median(samples)


def listener_us_per_turn(provider: TracerProvider, capture: bool) -> float:
    """Microseconds per turn of the tracing listener alone, replaying one run's events."""
    script: list[Any] = [reply(tool_call("noop")) for _ in range(TURNS - 1)] + ["done"]
    model = ScriptedModel(script, chunk_size=1000)
    agent = Agent(model=model.model, stream_fn=model, tools=[noop])
    events: list[Any] = []
    agent.subscribe(events.append)
    agent.prompt("go")
    from agentkit.integrations.tracing import _Tracer

    tracer = _Tracer(agent, provider.get_tracer("bench"), capture, None)
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        for event in events:
            tracer(event)
        samples.append((time.perf_counter() - start) / TURNS * 1e6)
    return statistics.median(samples)


def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def traced(agent: Agent) -> None:
        exporter.clear()
        enable_tracing(agent, tracer_provider=provider)

    def with_content(agent: Agent) -> None:
        exporter.clear()
        enable_tracing(agent, tracer_provider=provider, capture_content=True)

    print(
        f"listener alone: {listener_us_per_turn(provider, False):6.1f} us/turn, "
        f"with content {listener_us_per_turn(provider, True):6.1f} us/turn"
    )
    per_turn_us(lambda agent: None)  # warm up
    for round_ in (1, 2):
        off = per_turn_us(lambda agent: None)
        on = per_turn_us(traced)
        content = per_turn_us(with_content)
        print(
            f"round {round_}: off {off:7.1f} us/turn, on {on:7.1f} us/turn ({on / off:.2f}x), "
            f"with content {content:7.1f} us/turn ({content / off:.2f}x)"
        )


if __name__ == "__main__":
    main()
