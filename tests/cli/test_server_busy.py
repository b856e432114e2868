"""A kept model server busy with another process's request is said, not waited on silently:
the request lock of :mod:`agentkit.local.busy`, held by a real second process, and the
command's wiring of it (``agentkit.cli.agent_setup._server_turns``)."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from agentkit import Agent, tool
from agentkit.cli.agent_setup import BUSY_TEXT, _server_turns
from agentkit.cli.console import Console
from agentkit.local.busy import REQUESTS_FILE, ServerTurns
from agentkit.testing import ScriptedModel, reply, tool_call

HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


@contextmanager
def held_by_another_process(directory: Path) -> Iterator[None]:
    """Another process holds the server's request lock until the block ends."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory / REQUESTS_FILE)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        yield
    finally:
        child.communicate("", timeout=30)


def test_a_free_server_is_taken_for_the_request_and_let_go_of_after(tmp_path: Path) -> None:
    told: list[str] = []
    mine = ServerTurns(tmp_path, lambda: told.append("mine"))
    other = ServerTurns(tmp_path, lambda: told.append("other"))
    assert mine.sending() and mine.sending()  # a second request of the same run: still free
    assert not other.sending() and told == ["other"]  # another process sees it busy
    mine.answered()
    assert other.sending() and told == ["other"]
    other.close()
    mine.close()


@pytest.mark.processes
def test_a_busy_server_is_said_once_a_run_and_the_request_goes_on(tmp_path: Path) -> None:
    told: list[int] = []
    turns = ServerTurns(tmp_path, lambda: told.append(1))
    with held_by_another_process(tmp_path):
        assert turns.sending() is False and turns.sending() is False
        assert told == [1]
        turns.new_run()
        assert turns.sending() is False and told == [1, 1]
    assert turns.sending() is True  # the other process ended: its lock went with it
    turns.close()


def test_a_folder_that_cannot_hold_the_lock_counts_as_free(tmp_path: Path) -> None:
    turns = ServerTurns(tmp_path / "gone", lambda: (_ for _ in ()).throw(AssertionError))
    assert turns.sending() is True
    turns.answered()
    turns.close()


@tool
def look() -> str:
    """Look."""
    return "seen"


@pytest.mark.processes
def test_the_command_says_the_wait_once_and_lets_go_after_each_answer(tmp_path: Path) -> None:
    err = io.StringIO()
    console = Console(io.StringIO(), io.StringIO(), err)
    console.local_server = SimpleNamespace(directory=tmp_path)
    model = ScriptedModel([reply(tool_call("look")), "done", "again"])
    agent = Agent(model=model.model, stream_fn=model, tools=[look])
    _server_turns(console, agent)
    with held_by_another_process(tmp_path):
        assert agent.prompt("look").text == "done"  # two requests, one notice
    assert err.getvalue().count(BUSY_TEXT) == 1
    assert agent.prompt("again").text == "again"  # the server was free: nothing said
    assert err.getvalue().count(BUSY_TEXT) == 1
    # After the answer the lock is free for another process.
    other = ServerTurns(tmp_path, lambda: None)
    assert other.sending()
    other.close()
    console.server_turns.close()
