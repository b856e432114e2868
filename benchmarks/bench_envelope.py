"""The run envelope's cost: budgets and usage per turn, and a 1,000-turn run with budgets on.

Run: ``python benchmarks/bench_envelope.py``. Prints ratios measured in the same process (the
machines are shared and noisy, so absolute times move): the loop's time per turn with every
budget set (and usage totals, which are always kept) against the same loop with only the turn
cap lifted; then a 1,000-turn Agent run, one tool call per turn, ended by ``max_turns=1000``,
checked for a valid transcript. Nothing asserts a time.
"""

from __future__ import annotations

import resource
import statistics
import time
from typing import Any

from bench_core import instant_stream_fn

from agentkit import (
    AbortSignal,
    Agent,
    AssistantMessage,
    Budgets,
    Model,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    tool,
)
from agentkit.budgets import BudgetPolicy
from agentkit.loop import AgentContext, AgentLoopConfig, run_agent_loop
from agentkit.testing import ScriptedModel, reply, tool_call

TURNS = 1000
ALL_LIMITS = Budgets(
    max_turns=TURNS * 10,
    max_tool_calls=10**6,
    max_input_tokens=10**9,
    max_output_tokens=10**9,
    max_cost=10**6,
    timeout=600,
)
NO_LIMITS = Budgets(max_turns=None)


def loop_seconds_per_turn(budgets: Budgets, turns: int = 50) -> float:
    """One run of ``turns`` turns on an instant provider; seconds per turn."""
    model = Model(id="bench", api="bench", provider="bench", base_url="")
    remaining = {"n": turns}

    def finish_turn(turn: Any, signal: AbortSignal) -> str:
        remaining["n"] -= 1
        return "continue" if remaining["n"] > 0 else "end"

    config = AgentLoopConfig(
        model=model, finish_turn=finish_turn, policies=[BudgetPolicy(budgets)]
    )
    started = time.perf_counter()
    result = run_agent_loop(
        [UserMessage(content="go")], AgentContext(), config, lambda e: None,
        stream_fn=instant_stream_fn,
    )
    elapsed = time.perf_counter() - started
    assert result.usage.requests == turns, result.usage
    return elapsed / turns


def bench_envelope_per_turn() -> None:
    for turns, runs in ((50, 40), (1, 400)):
        lean, full = [], []
        for _ in range(runs):  # interleaved: drift on a shared machine hits both alike
            lean.append(loop_seconds_per_turn(NO_LIMITS, turns))
            full.append(loop_seconds_per_turn(ALL_LIMITS, turns))
        lean_us, full_us = statistics.median(lean) * 1e6, statistics.median(full) * 1e6
        print(f"{turns:2d}-turn runs, usage only:        {lean_us:8.1f} µs per turn")
        print(f"{turns:2d}-turn runs, every budget set:  {full_us:8.1f} µs per turn "
              f"({full_us / lean_us:.2f}x; {full_us - lean_us:+.1f} µs)")


@tool
def step(n: int) -> str:
    """One step of work."""
    return str(n)


def next_step(context: Any, options: Any) -> Any:
    return reply(tool_call("step", {"n": len(context.messages)}))


def thousand_turns_unbounded() -> float:
    """The same run with no budget at all (the script ends it after TURNS turns); seconds."""
    scripted = ScriptedModel([next_step] * (TURNS - 1) + ["done"])
    agent = Agent(
        model=scripted.model, stream_fn=scripted, tools=[step], budgets={"max_turns": None}
    )
    started = time.perf_counter()
    result = agent.prompt("work")
    assert result.usage.requests == TURNS
    return time.perf_counter() - started


def bench_thousand_turns() -> None:
    scripted = ScriptedModel([next_step] * (TURNS + 1))
    agent = Agent(
        model=scripted.model,
        stream_fn=scripted,
        tools=[step],
        budgets=Budgets(max_turns=TURNS, max_tool_calls=TURNS, max_cost=1.0, timeout=600),
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = agent.prompt("work")
    elapsed = time.perf_counter() - started
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    unbounded = thousand_turns_unbounded()
    calls = [c.id for m in result if isinstance(m, AssistantMessage) for c in m.content
             if isinstance(c, ToolCall)]
    answered = [m.tool_call_id for m in result if isinstance(m, ToolResultMessage)]
    print(f"1,000-turn Agent run, budgets on: {elapsed:.2f} s "
          f"({elapsed / TURNS * 1e3:.2f} ms per turn incl. a tool call and a scripted reply)")
    print(f"  stop: {result.stop_reason} ({result.budget}), requests {result.usage.requests}, "
          f"tool calls {result.usage.tool_calls}, every call answered: {calls == answered}, "
          f"peak RSS +{(rss_after - rss_before) / 1024:.0f} MB")
    print(f"  the same 1,000 turns with no budget: {unbounded:.2f} s "
          f"(budgets on / off: {elapsed / unbounded:.2f}x)")


if __name__ == "__main__":
    bench_envelope_per_turn()
    bench_thousand_turns()
