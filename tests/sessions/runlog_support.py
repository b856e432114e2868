"""What the run-log tests share: an agent whose tool waits on a gate (so a run is seen while it
runs), and helpers that read a run's log back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import requests

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


WAIT = 60.0


def frames(response: requests.Response) -> Iterator[tuple[str | None, str, str]]:
    """``(id, event, data)`` of each server-sent event frame as it arrives (comments skipped);
    leaving early leaves the connection to the caller."""
    buffer = b""
    while True:
        data = response.raw.read1(65536)
        if not data:
            return
        buffer += data
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            fields = dict(line.split(": ", 1) for line in block.decode().splitlines()
                          if ": " in line and not line.startswith(":"))  # fmt: skip
            if "data" in fields:
                yield fields.get("id"), fields.get("event", "message"), fields["data"]


def connect(url: str, last: int, other_than: str | None) -> requests.Response:
    """A new connection to the events at ``url`` after ``last``, served by a worker process
    other than ``other_than`` (its ``X-Worker``) if one answers within a few tries: the kernel,
    not the client, picks the process that accepts."""
    headers = {"Connection": "close"}
    if last:
        headers["Last-Event-ID"] = str(last)
    for _ in range(12):
        response = requests.get(url, headers=headers, stream=True, timeout=WAIT)
        if response.headers["X-Worker"] != other_than:
            return response
        response.close()
    return requests.get(url, headers=headers, stream=True, timeout=WAIT)


def elsewhere(probe: str, pid: str) -> requests.Session:
    """A client whose kept-alive connection a worker process other than ``pid`` serves (found
    by asking ``probe``, a URL every worker answers with its ``X-Worker``)."""
    for _ in range(50):
        client = requests.Session()
        if client.get(probe, timeout=WAIT).headers["X-Worker"] != pid:
            return client
        client.close()
    raise AssertionError("no other worker process answered")


def every_worker_up(url: str, workers: int) -> None:
    """Wait until ``workers`` different worker processes have answered ``url`` (gunicorn's
    workers come up one by one: a site answers before all of them can)."""
    seen: set[str] = set()
    deadline = time.monotonic() + WAIT
    while len(seen) < workers:
        assert time.monotonic() < deadline, f"only {len(seen)} of {workers} workers answered"
        try:
            seen.add(requests.get(url, headers={"Connection": "close"}, timeout=5)
                     .headers["X-Worker"])  # fmt: skip
        except requests.ConnectionError:
            threading.Event().wait(0.05)  # not listening yet
