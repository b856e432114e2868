"""Parallel tools: a batch of slow tool calls takes as long as the slowest one, not the sum.

Run it: ``python samples/parallel_tools.py [--model PROVIDER:MODEL_ID]``. The model asks for three
lookups at once; agentkit runs each on its own pool thread and the wall time is printed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from _support import exit_status, last_text, model_from_command_line

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.testing import reply, tool_call

# Seconds each (simulated) source takes to answer.
SOURCE_LATENCY = {"news": 0.3, "weather": 0.6, "traffic": 0.9}


@tool
def lookup(source: str, signal: AbortSignal) -> str:
    """Fetch today's summary from a slow source.

    Args:
        source: One of "news", "weather", "traffic".
    """
    latency = SOURCE_LATENCY.get(source, 0.1)
    if signal.wait(latency):  # like time.sleep, but an abort cuts it short
        return "cancelled"
    return f"{source}: all quiet (took {latency:.1f} s)"


SCRIPT = [
    reply(*(tool_call("lookup", {"source": s}) for s in SOURCE_LATENCY)),
    "All quiet today: no news, fair weather, no traffic jams.",
]


@dataclass
class Timing:
    """How long the tool batch took, against the slowest call and the sum of all calls."""

    wall: float
    slowest: float
    total: float
    status: int = 0
    """The exit status: 1 when the run ended in an error or was aborted."""


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> Timing:
    """Run the agent and print the wall time of its tool batch."""
    model, stream_fn = model_from_command_line(SCRIPT, argv, __doc__)
    agent = Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="Call lookup for news, weather and traffic at once, then sum up.",
        tools=[lookup],
    )
    batch_started: list[float] = []
    batch_ended: list[float] = []

    def on_event(event: object) -> None:
        kind = getattr(event, "type", "")
        if kind == "tool_execution_start":
            batch_started.append(time.monotonic())
        elif kind == "tool_execution_end":
            batch_ended.append(time.monotonic())
            print(f"  {time.monotonic() - batch_started[0]:4.2f}s  {event.result.text}", file=out)  # type: ignore[attr-defined]

    agent.subscribe(on_event)
    agent.prompt("What is going on today?")
    wall = max(batch_ended) - min(batch_started) if batch_started else 0.0
    timing = Timing(wall, max(SOURCE_LATENCY.values()), sum(SOURCE_LATENCY.values()))
    print(
        f"{len(batch_started)} tools in {timing.wall:.2f}s wall time "
        f"(slowest {timing.slowest:.1f}s, run one after another {timing.total:.1f}s)",
        file=out,
    )
    last = agent.state.messages[-1]
    print(last_text([last]) or f"[{last.stop_reason}: {last.error_message}]", file=out)
    timing.status = exit_status(agent.state.messages)
    return timing


if __name__ == "__main__":
    sys.exit(main().status)
