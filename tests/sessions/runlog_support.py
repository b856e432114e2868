"""What the run-log tests share: an agent whose tool waits on a gate (so a run is seen while it
runs), and helpers that read a run's log back."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agentkit import Agent, current_run_context, runlog, tool
from agentkit.runlog import RunEvent
from agentkit.sessions import Session, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call


@dataclass
class Gate:
    """The tool's gate: ``started`` is set when the tool runs; it returns when ``open`` is set,
    and ends early, setting ``aborted``, when its run is aborted."""

    started: threading.Event = field(default_factory=threading.Event)
    open: threading.Event = field(default_factory=threading.Event)
    aborted: threading.Event = field(default_factory=threading.Event)


def gated_agent(session: Session, gate: Gate, answer: str = "Done.", **options: Any) -> Agent:
    """An agent that calls ``wait_at_gate`` once, then answers ``answer``."""

    @tool
    def wait_at_gate(topic: str) -> str:
        """Wait until the test opens the gate."""
        signal = current_run_context().signal
        gate.started.set()
        remove = signal.add_callback(gate.open.set)
        try:
            gate.open.wait()
        finally:
            remove()
        if signal.aborted:
            gate.aborted.set()
            raise RuntimeError("stopped")
        return f"{topic}: found"

    model = ScriptedModel(
        [reply("Looking.", tool_call("wait_at_gate", {"topic": "x"})), answer, answer, answer]
    )
    return Agent(model=model.model, stream_fn=model, tools=[wait_at_gate], session=session,
                 **options)  # fmt: skip


def collect(store: SessionStore, run_id: str, after: int = 0) -> list[RunEvent]:
    """The run's events after ``after``, to its end."""
    return list(runlog.attach(store, run_id, after))


def text_of(events: list[RunEvent]) -> str:
    """The text deltas of ``events``, joined."""
    return "".join(
        e.data["update"]["delta"]
        for e in events
        if e.type == "message_update" and e.data["update"]["type"] == "text_delta"
    )
