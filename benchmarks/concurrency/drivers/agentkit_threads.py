#!/usr/bin/env python3
"""agentkit, thread style: N threads, each running a fresh Agent(...).prompt() (blocking).

What a Django/Flask request thread or a Celery thread-pool worker does. Each run gets its own
Agent (an agent holds its transcript), all share one Model pointed at the fake server;
agentkit's own openai-completions provider (urllib3, one process-wide pool) streams.
agentkit runs every tool call on a tool thread of the run; the native tool is the plain
function (--tool async gives it an async def, which agentkit runs on a loop of its own on
the tool thread).

``--fleet`` sets what a fleet process sets on every agent: a shared in-memory rate limiter
whose quota never binds and a spend ledger (in memory) whose caps never bind, each run
spending under its tenant's and its user's keys, at catalog prices: what the two cost a turn.
"""

import harness  # noqa: I001  (first: times the imports that follow)

from importlib.metadata import version as _dist_version

from agentkit import Agent, Model, tool

FRAMEWORK = "agentkit_threads"
MODE = "threads"
NATIVE_TOOL = "sync"


def add_args(parser) -> None:
    parser.add_argument(
        "--tools-on-loop-thread", action="store_true",
        help="tool_execution='inline': each tool call on the run's own thread, as the raw "
        "floor's are (not the default: a run cannot give up on a call that ignores an abort)",
    )
    parser.add_argument(
        "--fleet", action="store_true",
        help="a shared RateLimiter and a spend Ledger (both in memory, neither binding) on "
        "every run: the row agentkit_threads_fleet",
    )


def framework_name(args) -> str:
    return (FRAMEWORK + ("_tools_on_loop_thread" if args.tools_on_loop_thread else "")
            + ("_fleet" if getattr(args, "fleet", False) else ""))


def version() -> str:
    return f"agentkit {_dist_version('agentkit')}"


def make_model(base_url: str, priced: bool = False) -> Model:
    fields = dict(id=harness.MODEL, name=harness.MODEL, api="openai-completions", provider="openai",
                  base_url=base_url, reasoning=False, input=["text"], context_window=128000,
                  max_tokens=4096)
    if priced:  # a ledger prices every request (gpt-4o-mini's prices, USD per million tokens)
        fields["cost"] = {"input": 0.15, "output": 0.6, "cache_read": 0.075, "cache_write": 0}
    try:
        return Model(**fields)
    except Exception:  # a version that wants the cost table
        fields["cost"] = {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0}
        return Model(**fields)


def final_text(messages) -> str:
    for m in reversed(messages):
        if getattr(m, "role", None) == "assistant":
            return "".join(getattr(c, "text", "") for c in m.content if getattr(c, "type", "") == "text")
    return ""


class State:
    def __init__(self, args):
        self.fleet = getattr(args, "fleet", False)
        self.model = make_model(args.base_url, priced=self.fleet)
        self.tool = tool(harness.tool_fn(args))
        inline = getattr(args, "tools_on_loop_thread", False)
        self.options = {"tool_execution": "inline"} if inline else {}
        self.ledger = None
        if self.fleet:
            from agentkit.ledger import Cap, Ledger
            from agentkit.limits import Quota, RateLimiter

            # Quotas and caps far above what a batch uses: they are checked, never binding.
            self.options["rate_limiter"] = RateLimiter(
                {"openai": Quota(requests=1_000_000, tokens=10_000_000_000, per=60.0)})
            self.ledger = Ledger("memory://", caps=[Cap("user:*", "day", usd=1_000.0),
                                                    Cap("tenant:*", "month", usd=1_000_000.0)])

    def new_agent(self, i: int = 0) -> Agent:
        policies = []
        if self.ledger is not None:
            from agentkit.ledger import SpendPolicy

            policies.append(SpendPolicy(self.ledger, [f"tenant:t{i % 10}", f"user:t{i % 10}/{i}"]))
        return Agent(model=self.model, system_prompt=harness.SYSTEM, tools=[self.tool],
                     api_key=harness.API_KEY, policies=policies, **self.options)


def build(args) -> State:
    return State(args)


def run(state: State, i: int) -> str:
    with state.new_agent(i) as agent:
        return final_text(agent.prompt(harness.prompt(i)))


if __name__ == "__main__":
    harness.main(__import__(__name__))
