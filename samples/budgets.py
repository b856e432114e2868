"""Budgets: a run that would go on forever ends gracefully, with a summary and a valid transcript.

Run it: ``python samples/budgets.py [--model PROVIDER:MODEL_ID]``. The agent keeps searching (the
scripted model never stops calling its tool); ``Budgets(max_turns=3, max_cost=0.50,
timeout=60, summarize=True)`` ends the run after three requests, and a last request without
tools sums up. The result says why the run stopped (``budget``, ``max_turns``), what it used,
and every tool call in the transcript has its result.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from _support import model_from_command_line

from agentkit import Agent, Budgets, RunResult, tool
from agentkit.testing import reply, tool_call


@tool
def search(query: str) -> str:
    """Search the archive.

    Args:
        query: What to look for.
    """
    return f"3 more documents mention {query!r}; keep digging?"


def keep_searching(context: Any, options: Any) -> Any:
    return reply(tool_call("search", {"query": "quarterly report"}))


SCRIPT = [keep_searching] * 3 + [
    "Summary: three searches found nine documents about the quarterly report; "
    "reading them is what is left."
]


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> RunResult:
    """Run until the budget ends it; print why it stopped and what it used."""
    model, stream_fn = model_from_command_line(SCRIPT, argv, __doc__)
    agent = Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="Search the archive until you are sure you found everything.",
        tools=[search],
        budgets=Budgets(max_turns=3, max_cost=0.50, timeout=60, summarize=True),
    )
    result = agent.prompt("Find everything about the quarterly report.")
    print(f"stopped: {result.stop_reason} ({result.budget})", file=out)
    print(f"used: {result.usage.requests} requests, {result.usage.tool_calls} tool calls, "
          f"${result.usage.cost.total:.4f}", file=out)
    print(f"answer: {result.text}", file=out)
    return result


if __name__ == "__main__":
    main()
