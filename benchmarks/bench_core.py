"""Core benchmarks: loop overhead per turn, event dispatch cost, parallel batch wall time, and
abort latency. Run: ``python benchmarks/bench_core.py``. Numbers go to stdout; nothing asserts."""

from __future__ import annotations

import statistics
import subprocess
import sys
import threading
import time
from typing import Any

from agentkit import (
    AbortController,
    AbortSignal,
    Agent,
    AssistantMessage,
    Context,
    Model,
    TextContent,
    UserMessage,
    tool,
)
from agentkit.agent import Run
from agentkit.event_stream import AssistantMessageEventStream
from agentkit.events import (
    DoneEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    TurnStartEvent,
)
from agentkit.loop import AgentContext, AgentLoopConfig, run_agent_loop
from agentkit.testing import ScriptedModel, reply, tool_call

TURNS = 1000


def instant_stream_fn(model: Model, context: Context, options: Any) -> AssistantMessageEventStream:
    """A provider stand-in that answers at once on the calling thread: loop cost only."""
    stream = AssistantMessageEventStream()
    message = AssistantMessage(api=model.api, provider=model.provider, model=model.id)
    stream.push(StartEvent(message))
    message.content.append(TextContent(text=""))
    stream.push(TextStartEvent(0, message))
    message.content[0].text = "ok"  # type: ignore[union-attr]
    stream.push(TextDeltaEvent(0, "ok", message))
    stream.push(TextEndEvent(0, "ok", message))
    stream.push(DoneEvent("stop", message))
    return stream


def bench_loop_overhead() -> None:
    model = Model(id="bench", api="bench", provider="bench", base_url="")
    # 1000 turns in one run: finish_turn asks for one more turn each time.
    remaining = {"n": TURNS}

    def finish_turn(turn: Any, signal: AbortSignal) -> str:
        remaining["n"] -= 1
        return "continue" if remaining["n"] > 0 else "end"

    config = AgentLoopConfig(model=model, finish_turn=finish_turn, budgets={"max_turns": None})
    events = [0]

    def emit(event: Any) -> None:
        events[0] += 1

    started = time.perf_counter()
    run_agent_loop(
        [UserMessage(content="go")], AgentContext(), config, emit, stream_fn=instant_stream_fn
    )
    elapsed = time.perf_counter() - started
    print(f"loop, instant provider:  {elapsed / TURNS * 1e6:8.1f} µs per turn "
          f"({TURNS} turns, {events[0]} events)")

    started = time.perf_counter()
    for _ in range(TURNS):
        run_agent_loop(
            [UserMessage(content="go")],
            AgentContext(),
            AgentLoopConfig(model=model),
            emit,
            stream_fn=instant_stream_fn,
        )
    elapsed = time.perf_counter() - started
    print(f"loop, one-turn runs:     {elapsed / TURNS * 1e6:8.1f} µs per turn "
          f"({TURNS} separate runs, short transcript)")

    scripted = ScriptedModel(["ok"] * TURNS)
    agent = Agent(model=scripted.model, stream_fn=scripted)
    started = time.perf_counter()
    for _ in range(TURNS // 10):
        agent.prompt("go")
    per_prompt = (time.perf_counter() - started) / (TURNS // 10)
    print(f"Agent.prompt, scripted:  {per_prompt * 1e6:8.1f} µs per one-turn prompt "
          "(worker thread + producer thread each)")


def bench_dispatch() -> None:
    model = ScriptedModel()
    agent = Agent(model=model.model, stream_fn=model)
    count = 100_000
    calls = [0]

    def listener(event: Any) -> None:
        calls[0] += 1

    agent.subscribe(listener)
    fake = Run(AbortController())
    agent._active = fake  # dispatch through the real path without a model in the way
    event = TurnStartEvent()
    started = time.perf_counter()
    for _ in range(count):
        agent._process_event(fake, event)
    elapsed = time.perf_counter() - started
    agent._active = None
    print(f"event dispatch:          {elapsed / count * 1e9:8.0f} ns per event to one listener "
          "(state update + call)")


def bench_parallel_batch() -> None:
    for count in (4, 16, 32):

        @tool
        def wait_200ms(n: int, signal: AbortSignal) -> str:
            """Waits 200 ms."""
            signal.wait(0.2)
            return str(n)

        model = ScriptedModel()
        agent = Agent(model=model.model, stream_fn=model, tools=[wait_200ms])
        walls = []
        for _ in range(3):
            model.add(reply(*[tool_call("wait_200ms", {"n": i}) for i in range(count)]), "done")
            batch: dict[str, float] = {}

            def listener(event: Any, batch: dict[str, float] = batch) -> None:
                if event.type == "tool_execution_start" and "start" not in batch:
                    batch["start"] = time.perf_counter()
                if event.type == "tool_execution_end":
                    batch["end"] = time.perf_counter()

            unsubscribe = agent.subscribe(listener)
            agent.prompt("go")
            unsubscribe()
            walls.append(batch["end"] - batch["start"])
        wall = statistics.median(walls)
        print(f"parallel batch of {count:2d}:   {wall * 1000:7.1f} ms wall vs 200 ms ideal "
              f"(+{(wall - 0.2) * 1000:.1f} ms)")


def bench_abort_latency() -> None:
    started = threading.Event()

    @tool
    def block(signal: AbortSignal) -> str:
        """Blocks until aborted."""
        started.set()
        signal.wait()
        return "stopped"

    samples = []
    for _ in range(20):
        started.clear()
        model = ScriptedModel([reply(tool_call("block"))])
        agent = Agent(model=model.model, stream_fn=model, tools=[block])
        ended: dict[str, float] = {}
        agent.subscribe(lambda e, ended=ended: ended.setdefault("t", time.perf_counter())
                        if e.type == "agent_end" else None)
        run = agent.start("go")
        started.wait(5)
        t0 = time.perf_counter()
        agent.abort()
        run.wait(5)
        samples.append(ended["t"] - t0)
    print(f"abort -> agent_end:      {statistics.median(samples) * 1000:8.2f} ms median, "
          f"{max(samples) * 1000:.2f} ms max (tool blocked in signal.wait)")


def bench_import() -> None:
    """``import agentkit`` against a bare interpreter, each the best of several fresh processes
    (the best is the least disturbed by other load on the machine)."""

    def best(code: str, runs: int = 7) -> float:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - t0)
        return min(times)

    bare = best("pass")
    pydantic_floor = best("import pydantic\nclass M(pydantic.BaseModel):\n    x: int = 0\nM(x=1)")
    agentkit = best("import agentkit")
    print(f"import agentkit:         {(agentkit - bare) * 1000:8.1f} ms above a bare interpreter "
          f"(pydantic with one model: {(pydantic_floor - bare) * 1000:.1f} ms; target <= 200 ms)")


if __name__ == "__main__":
    bench_import()
    bench_loop_overhead()
    bench_dispatch()
    bench_parallel_batch()
    bench_abort_latency()
