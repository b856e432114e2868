"""Compaction on real session stores (SQLite, PostgreSQL): the record is durable the moment its
message ends; a process killed (SIGKILL) right after it leaves a session whose reload, in
another process, holds every message and shows the model the same compacted view."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentkit.compaction import Compaction
from agentkit.sessions import Session
from agentkit.transcript import COMPACTION_ROLE, compacted_view
from agentkit.types import role_of
from tests.compaction_support import Windowed, agent_for, is_summary_request, view_key
from tests.servers import PostgresServer

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'sessions.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.url


def run_child_until_compacted(store_url: str, name: str) -> list[list[object]]:
    """Run the child until its first compaction record is stored, SIGKILL it, and return the
    view it would have sent next."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.policies.compaction_crash_child", store_url, name],
        stdout=subprocess.PIPE, cwd=ROOT, env=env, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        view_line = child.stdout.readline()
        assert child.stdout.readline().strip() == "ready", view_line
        child.send_signal(signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(60)
    import json

    view = json.loads(view_line)
    assert isinstance(view, list)
    return view


def test_a_kill_after_the_compaction_record_leaves_the_same_view(store_url: str) -> None:
    name = f"compaction-crash-{os.getpid()}"
    expected_view = run_child_until_compacted(store_url, name)

    session = Session(name, store_url)
    stored = session.load()
    assert role_of(stored[-1]) == COMPACTION_ROLE  # killed before any later message
    assert [role_of(m) for m in stored].count("tool_result") >= 3  # load() keeps everything
    assert view_key(compacted_view(stored)) == expected_view

    # another process (this one) resumes the session: the next request is that view
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction(), session=session)
    assert view_key(compacted_view(agent.state.messages)) == expected_view
    result = agent.continue_()
    assert result.stop_reason == "stop", result.error_message
    first = windowed.model.requests[0]
    assert not is_summary_request(first.context)
    assert view_key(first.messages) == expected_view
    # and keeps going inside the window, every message durable
    for turn in range(6):
        assert agent.prompt(f"fetch more {turn}").stop_reason == "stop"
    assert max(windowed.sizes) <= windowed.window
    reloaded = Session(name, store_url).load()
    assert len(reloaded) == len(agent.state.messages)
    assert view_key(compacted_view(reloaded)) == view_key(compacted_view(agent.state.messages))
    session.store.close()
