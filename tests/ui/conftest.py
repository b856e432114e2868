"""The page under test: a real UiServer on 127.0.0.1 over a SQLite store, prompting sessions with
a scripted agent whose tool waits on a gate the test opens (so a live run is seen while it runs)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("flask", reason="the ui extra is not installed (pip install -e '.[ui]')")

from agentkit import Agent, current_run_context, tool  # noqa: E402
from agentkit.sessions import Session, SqliteStore  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from agentkit.ui import UiServer  # noqa: E402

HOSTILE = '<script>window.pwned = true</script><img src=x onerror="window.pwned = true">'
"""What a model might write: the page must show it as text and run none of it."""


@dataclass
class Gate:
    """The tool's gate: ``started`` is set when it runs, it returns when ``open`` is set (or
    when its run is aborted)."""

    started: threading.Event = field(default_factory=threading.Event)
    open: threading.Event = field(default_factory=threading.Event)
    aborted: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def page_server(tmp_path: Path, gate: Gate) -> Iterator[UiServer]:
    @tool
    def look_up(topic: str) -> str:
        """Look a topic up."""
        signal = current_run_context().signal
        remove = signal.add_callback(gate.open.set)  # an abort opens the gate too
        gate.started.set()
        try:
            gate.open.wait()
        finally:
            remove()
        if signal.aborted:
            gate.aborted.set()
            raise RuntimeError("stopped")
        return f"{topic}: found {HOSTILE}"

    def build(session: Session) -> Agent:
        model = ScriptedModel(
            [reply("Looking it up.", tool_call("look_up", {"topic": HOSTILE})),
             f"Here it is: {HOSTILE}"]
        )  # fmt: skip
        return Agent(model=model.model, stream_fn=model, tools=[look_up], session=session)

    with SqliteStore(tmp_path / "sessions.db") as store, UiServer(store, build_agent=build) as server:
        yield server
