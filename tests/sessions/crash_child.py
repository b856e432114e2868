"""A child process for the crash tests: runs an agent (or a plain writer) on a session, says
``ready`` on stdout at the moment to kill it, then waits to be killed.

Usage: ``python crash_child.py STORE_URL SESSION MODE``, MODE one of ``mid-tool``,
``mid-message``, ``between-messages``, ``append:<tag>:<count>``, ``parallel`` (killed once a
fast call of a parallel batch has announced its end, while the slow one runs),
``random:<ledger>:<turns>:<tag>`` (turns of parallel batches, printing what it announces, until
killed; ``charge`` writes its call id to the ledger file before it returns) or
``celery-abort:<run_id>`` (``run_session``, its run channel on the Redis store's server, with
a tool that ignores an abort; ``ready`` once the abort reached it).
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from typing import Any

from agentkit import Agent, RunContext, tool
from agentkit.abort import AbortSignal
from agentkit.sessions import Session, SessionConflictError
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import UserMessage

FOREVER = threading.Event()  # never set: the process waits here until it is killed


def ready() -> None:
    print("ready", flush=True)


def main(store_url: str, name: str, mode: str) -> None:
    session = Session(name, store_url)
    if mode.startswith("append:"):
        _, tag, count = mode.split(":")
        sys.stdin.readline()  # the parent starts every writer at once
        for index in range(int(count)):
            while True:
                try:
                    session.append(UserMessage(content=f"{tag}-{index}"))
                    break
                except SessionConflictError:
                    session.load()
        return

    @tool
    def charge(amount: int, signal: AbortSignal) -> str:
        """Charge a card (not idempotent)."""
        ready()
        FOREVER.wait()
        return "charged"

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read a value (idempotent)."""
        return f"value of {key}"

    if mode.startswith("random:"):
        _, ledger, turns, tag = mode.split(":")
        run_random(session, ledger, int(turns), tag)
        return
    if mode.startswith("celery-abort:"):
        run_celery_abort(session, store_url, mode.split(":", 1)[1])
        return
    if mode == "parallel":
        slow_lookup(session)
        return

    if mode == "mid-tool":
        model = ScriptedModel([reply("Charging.", tool_call("charge", {"amount": 5}))])
    elif mode == "between-messages":
        model = ScriptedModel([reply("Looking.", tool_call("lookup", {"key": "k"}))])
    else:  # mid-message: a slow answer, killed after its first delta
        model = ScriptedModel([reply("a long answer that streams slowly " * 20, delay=0.01)])
    agent = Agent(model=model.model, stream_fn=model, tools=[charge, lookup],
                  system_prompt="be brief", session=session)  # fmt: skip

    def listener(event: Any) -> None:
        if mode == "mid-message" and event.type == "message_update":
            ready()
            FOREVER.wait()
        if mode == "between-messages" and event.type == "message_end":
            if event.message.role == "assistant":
                ready()
                FOREVER.wait()

    agent.subscribe(listener)
    agent.prompt("go")


def slow_lookup(session: Session) -> None:
    """``lookup`` (idempotent, slow) and ``charge`` (fast) in one parallel batch; ready once
    ``charge``'s end is announced."""

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read a value (idempotent)."""
        FOREVER.wait()  # slow: killed before it ends
        return "never"

    @tool
    def charge(amount: int, signal: AbortSignal) -> str:
        """Charge a card (not idempotent)."""
        return "charged"

    def listener(event: Any) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "charge":
            ready()

    model = ScriptedModel([reply(tool_call("lookup", {"key": "k"}),
                                 tool_call("charge", {"amount": 5}))])  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[lookup, charge],
                  system_prompt="be brief", session=session)  # fmt: skip
    agent.subscribe(listener)
    agent.prompt("go")


def random_tools(ledger: str) -> list[Any]:
    """``lookup`` (idempotent) and ``charge`` (not: it writes its call id to ``ledger``, the
    side effect that must never happen twice), each taking a few random milliseconds."""

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """A read."""
        time.sleep(random.uniform(0, 0.03))
        return f"value of {key}"

    @tool
    def charge(ctx: RunContext[None], amount: int) -> str:
        """A charge."""
        with open(ledger, "a") as file:
            file.write(ctx.tool_call_id + "\n")
        time.sleep(random.uniform(0, 0.03))
        return f"charged {amount}"

    return [lookup, charge]


def random_model(turns: int, tag: str) -> ScriptedModel:
    """Answers with a parallel batch of both tools, ``turns`` times, then in text; the call ids
    start with ``tag`` (unique, as a real model's are)."""
    count = 0

    def answer(context: Any, options: Any) -> Any:
        nonlocal count
        count += 1
        if count > turns:
            return reply("All done.", delay=0.002)
        return reply("Working.", tool_call("lookup", {"key": str(count)}, f"{tag}-{count}-l"),
                     tool_call("charge", {"amount": count}, f"{tag}-{count}-c"),
                     delay=0.002)  # fmt: skip

    return ScriptedModel([answer] * (turns + 10))


def run_random(session: Session, ledger: str, turns: int, tag: str) -> None:
    def listener(event: Any) -> None:
        if event.type == "tool_execution_end":
            text = event.result.content[0].text if event.result.content else ""
            print("announced", json.dumps([event.tool_call_id, text]), flush=True)

    model = random_model(turns, tag)
    agent = Agent(model=model.model, stream_fn=model, tools=random_tools(ledger),
                  system_prompt="be brief", session=session)  # fmt: skip
    agent.subscribe(listener)
    print("started", flush=True)
    agent.prompt("go")
    print("finished", flush=True)
    FOREVER.wait()


def run_celery_abort(session: Session, url: str, run_id: str) -> None:
    from agentkit.integrations.celery import RunChannel, run_session

    @tool(idempotent=True)
    def export(signal: AbortSignal) -> str:
        """A long export that ignores an abort."""
        print("in-tool", flush=True)
        signal.wait()  # until the abort reaches it, then it carries on regardless
        ready()
        FOREVER.wait()
        return "exported"

    def build(session: Session) -> Agent:
        model = ScriptedModel([reply(tool_call("export")), "Exported."])
        return Agent(model=model.model, stream_fn=model, tools=[export], system_prompt="s",
                     tool_abort_grace=60.0, session=session)  # fmt: skip

    run_session(session, build, RunChannel(url, run_id), attempt=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
