"""Injected faults: processes SIGKILLed mid-run, stores restarted mid-run, two processes
writing one session at once. Each time: nothing committed is lost, nothing is duplicated, and
the run can finish."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent, AgentTool, tool
from agentkit.abort import AbortSignal
from agentkit.sessions import INTERRUPTED_TEXT, Session, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.servers import PostgresServer, RedisServer

CHILD = Path(__file__).with_name("crash_child.py")
ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0


def start_child(store_url: str, name: str, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, str(CHILD), store_url, name, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def kill_when_ready(child: subprocess.Popen[str]) -> None:
    """Wait for the child's ``ready`` line, then SIGKILL it."""
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.strip() != "ready":
        child.kill()
        _, err = child.communicate(timeout=WAIT)
        raise AssertionError(f"the child did not get ready: {line!r}\n{err}")
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=WAIT)
    assert child.returncode == -signal.SIGKILL


def counting_tools() -> tuple[dict[str, int], list[AgentTool]]:
    runs = {"charge": 0, "lookup": 0}

    @tool
    def charge(amount: int, signal: AbortSignal) -> str:
        """Charge a card (not idempotent)."""
        runs["charge"] += 1
        return "charged"

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read a value (idempotent)."""
        runs["lookup"] += 1
        return f"value of {key}"

    return runs, [charge, lookup]


def resume(
    name: str, open_stores: Callable[[], SessionStore], answer: str
) -> tuple[dict[str, int], list[Any]]:
    """Continue session ``name`` in this process with the crashed child's tools (so the
    transcript's declarations stay as they are) and a model that answers ``answer``; return how
    often each tool ran and the stored transcript afterwards."""
    runs, tools = counting_tools()
    model = ScriptedModel([answer])
    agent = Agent(model=model.model, stream_fn=model, tools=tools,
                  session=Session(name, open_stores()))  # fmt: skip
    agent.continue_()
    return runs, Session(name, open_stores()).load()


def test_killed_mid_tool_resumes_without_rerunning_it(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    kill_when_ready(start_child(store_url, name, "mid-tool"))
    runs, stored = resume(name, open_stores, "Could not charge; please check.")
    assert runs == {"charge": 0, "lookup": 0}  # never executed twice
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool_result", "assistant"]
    assert stored[3].is_error
    assert stored[3].content[0].text == INTERRUPTED_TEXT.format(name="charge", id="call_1")
    assert stored[-1].content[0].text == "Could not charge; please check."


def test_killed_between_messages_reruns_the_idempotent_tool_once(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    kill_when_ready(start_child(store_url, name, "between-messages"))
    runs, stored = resume(name, open_stores, "The value is known.")
    assert runs == {"charge": 0, "lookup": 1}
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool_result", "assistant"]
    assert stored[3].content[0].text == "value of k" and not stored[3].is_error


def test_killed_mid_message_loses_only_the_partial_message(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    kill_when_ready(start_child(store_url, name, "mid-message"))
    stored = Session(name, open_stores()).load()
    assert [m.role for m in stored] == ["system", "user"]  # the half-streamed answer is gone
    _, stored = resume(name, open_stores, "A complete answer.")
    assert [m.role for m in stored] == ["system", "user", "assistant"]


def test_two_processes_append_at_once(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    count = 40
    children = [start_child(store_url, name, f"append:{tag}:{count}") for tag in ("a", "b")]
    for child in children:  # both start as soon as each has read its line
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    for child in children:
        _, err = child.communicate(timeout=WAIT * 2)
        assert child.returncode == 0, err
    texts = [m.content for m in Session(name, open_stores()).load()]
    assert len(texts) == 2 * count
    for tag in ("a", "b"):  # each writer's messages: all there, once each, in its order
        assert [t for t in texts if t.startswith(tag)] == [f"{tag}-{i}" for i in range(count)]


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_store_restarted_mid_run(kind: str, request: pytest.FixtureRequest, name: str) -> None:
    """The store goes down while a tool runs: the run ends with a clear store error, and after
    the restart the session holds everything committed and the run finishes."""
    from agentkit.sessions import open_store

    server: RedisServer | PostgresServer = request.getfixturevalue(f"{kind}_server")
    in_tool, proceed = threading.Event(), threading.Event()

    @tool
    def slow(signal: AbortSignal) -> str:
        """A tool during which the store restarts."""
        in_tool.set()
        proceed.wait(WAIT)
        return "done"

    store = open_store(server.url)
    try:
        model = ScriptedModel([reply(tool_call("slow"))])
        agent = Agent(model=model.model, stream_fn=model, tools=[slow], system_prompt="s",
                      session=Session(name, store))  # fmt: skip
        run = agent.start("go")
        assert in_tool.wait(WAIT)
        crash = signal.SIGKILL if kind == "redis" else signal.SIGINT
        server.stop(crash)
        proceed.set()
        (*_, failure) = run.result(WAIT)
        assert failure.stop_reason == "error"
        store_name = "Redis" if kind == "redis" else "PostgreSQL"
        assert f"{store_name} session store" in (failure.error_message or "")
        server.start()
        stored = Session(name, store).load()
        assert [m.role for m in stored] == ["system", "user", "assistant"]  # all committed
        model.add("Finished.")
        resumed = Agent(model=model.model, stream_fn=model, tools=[slow],
                        session=Session(name, store))  # fmt: skip
        resumed.continue_()
        stored = Session(name, store).load()
        assert [m.role for m in stored] == ["system", "user", "assistant", "tool_result",
                                            "assistant"]  # fmt: skip
        assert stored[3].is_error  # slow() is not idempotent: it was not run again
    finally:
        store.close()
