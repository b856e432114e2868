"""Injected faults: processes SIGKILLed mid-run, stores restarted mid-run, two processes
writing one session at once. Each time: nothing committed is lost, nothing is duplicated, and
the run can finish."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent, AgentTool, tool
from agentkit.abort import AbortSignal
from agentkit.sessions import INTERRUPTED_TEXT, Session, SessionConflictError, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import UserMessage
from tests.servers import PostgresServer, RedisServer
from tests.sessions.crash_child import random_tools
from tests.sessions.invariants import assert_well_formed

pytestmark = pytest.mark.processes

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


def test_killed_while_a_parallel_batch_runs_keeps_the_result_announced(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    """``charge`` ended and was announced while the slow ``lookup`` ran: the kill loses
    neither its result nor its effect, and only ``lookup`` (idempotent) runs again."""
    kill_when_ready(start_child(store_url, name, "parallel"))
    stored = Session(name, open_stores()).load()
    assert [getattr(m, "tool_name", m.role) for m in stored][-1] == "charge"
    assert stored[-1].content[0].text == "charged" and not stored[-1].is_error
    runs, stored = resume(name, open_stores, "Both done.")
    assert runs == {"charge": 0, "lookup": 1}
    assert [getattr(m, "tool_name", m.role) for m in stored] == [
        "system", "user", "assistant", "lookup", "charge", "assistant"]  # fmt: skip
    assert stored[4].content[0].text == "charged"  # what was announced, not "interrupted"
    assert_well_formed(stored)


KILLS_PER_STORE = 4


def test_random_kills_with_another_writer_keep_every_invariant(
    store_url: str, open_stores: Callable[[], SessionStore], name: str, tmp_path: Path
) -> None:
    """A run of parallel batches SIGKILLed at random moments, resumed each time by a new
    process, while another writer stores user messages (as ``celery.submit()`` does). After
    each kill the session loads; after each resume every call has exactly one result right
    after its message; every result announced before the kill is stored as announced; no user
    message is lost or doubled; ``charge`` (not idempotent) never ran twice for one call."""
    rng = random.Random(0x5E55)
    ledger = tmp_path / "charges"
    ledger.touch()
    sent: list[str] = []
    for kill in range(KILLS_PER_STORE):
        child = start_child(store_url, name, f"random:{ledger}:3:kill{kill}")
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "started"
        other = Session(name, open_stores())
        time.sleep(rng.uniform(0.0, 0.2))  # the fault's moment: random, by design
        sent.append(f"also {kill}")
        submit_like(other, sent[-1])
        time.sleep(rng.uniform(0.0, 0.2))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=WAIT)
        announced = dict(json.loads(line.split(" ", 1)[1]) for line in out.splitlines()
                         if line.startswith("announced "))  # fmt: skip
        stored = Session(name, open_stores()).load()  # loads, whatever the moment
        results = {m.tool_call_id: m for m in stored if m.role == "tool_result"}
        for call_id, text in announced.items():
            assert call_id in results, f"announced {call_id} is not stored\n{err}"
            assert results[call_id].content[0].text == text
        resumed = Agent(model=ScriptedModel(["Noted."] * 20).model,
                        stream_fn=ScriptedModel(["Noted."] * 20), tools=random_tools(str(ledger)),
                        session=Session(name, open_stores()))  # fmt: skip
        if resumed.state.messages[-1].role != "assistant":
            outcome = resumed.continue_()
            assert outcome.error is None, outcome.error_message  # a conflict says so here
        stored = Session(name, open_stores()).load()
        assert stored == resumed.state.messages
        assert_well_formed(stored)
        assert [t for t in user_texts(stored) if t.startswith("also")] == sent
    charges = ledger.read_text().split()
    assert len(charges) == len(set(charges))  # no charge ran twice


def submit_like(session: Session, text: str) -> None:
    """Store a user message the way ``agentkit.celery.submit()`` does."""
    while True:
        session.load()
        try:
            session.append(UserMessage(content=text))
            return
        except SessionConflictError:
            continue


def user_texts(messages: list[Any]) -> list[str]:
    return [m.content if isinstance(m.content, str) else m.content[0].text
            for m in messages if m.role == "user"]  # fmt: skip


def test_many_connections_opening_a_new_sqlite_file_at_once(tmp_path: Path) -> None:
    """Turning a new file to WAL from two connections at once would deadlock, so SQLite answers
    one "database is locked" without waiting: every opener must still get the store (two
    processes appending to a new session file met this)."""
    from agentkit.sessions import SqliteStore

    failures: list[str] = []
    for trial in range(40):
        path = tmp_path / f"new-{trial}.db"
        gate = threading.Barrier(8)

        def open_it(path: Path = path, gate: threading.Barrier = gate) -> None:
            gate.wait(WAIT)
            try:
                SqliteStore(path, timeout=WAIT).close()
            except Exception as exc:  # noqa: BLE001 - counted, and shown if any
                failures.append(str(exc))

        openers = [threading.Thread(target=open_it, name=f"opener-{i}") for i in range(8)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(WAIT)
    assert failures == []
