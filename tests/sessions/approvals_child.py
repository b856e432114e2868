"""A child process for the approval kill tests: runs an agent with deferred approvals on a
session, says ``ready`` on stdout at the moment to kill it, then waits to be killed.

Usage: ``python approvals_child.py STORE_URL SESSION MODE``: ``batch`` starts a run whose batch
has a slow ``charge`` (killed while it runs) and a ``transfer`` that needs approval; ``resume``
resumes the decided batch and is killed while the approved ``transfer`` runs; ``refund``
resumes a decided ``refund`` (idempotent) and is killed after its side effect."""

from __future__ import annotations

import sys
import threading

from agentkit import Agent, Approvals, tool
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel, reply, tool_call

FOREVER = threading.Event()  # never set: the process waits here until it is killed


@tool
def charge(amount: int) -> str:
    """Charge a card (not idempotent)."""
    print("ready", flush=True)
    FOREVER.wait()
    return "charged"


@tool(requires_approval=True)
def transfer(to: str, amount: int) -> str:
    """Send money (not idempotent)."""
    print("ready", flush=True)
    FOREVER.wait()
    return "sent"


@tool(requires_approval=True, idempotent=True)
def refund(order: str) -> str:
    """Refund an order (idempotent: a second refund of it changes nothing)."""
    print("ready", flush=True)  # after the side effect: the refund went out
    FOREVER.wait()
    return "refunded"


def main(store_url: str, name: str, mode: str) -> None:
    if mode == "refund":  # resumes a decided refund and is killed after its side effect
        agent = Agent(model=ScriptedModel([]).model, stream_fn=ScriptedModel([]), tools=[refund],
                      session=Session(name, store_url), approvals=Approvals(defer=True))  # fmt: skip
        agent.continue_()
        return
    model = ScriptedModel([reply(tool_call("charge", {"amount": 5}),
                                 tool_call("transfer", {"to": "ann", "amount": 50}))])  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[charge, transfer],
                  session=Session(name, store_url), approvals=Approvals(defer=True))  # fmt: skip
    if mode == "batch":
        agent.prompt("charge and pay ann")
    else:
        agent.continue_()


if __name__ == "__main__":
    main(*sys.argv[1:4])
