"""A child process for the crash tests: runs an agent (or a plain writer) on a session, says
``ready`` on stdout at the moment to kill it, then waits to be killed.

Usage: ``python crash_child.py STORE_URL SESSION MODE``, MODE one of ``mid-tool``,
``mid-message``, ``between-messages`` or ``append:<tag>:<count>``.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from agentkit import Agent, tool
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


if __name__ == "__main__":
    main(*sys.argv[1:4])
