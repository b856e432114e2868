"""An append whose transaction is still committing on the PostgreSQL server when a reader starts
(a run SIGKILLed right after it sent its COMMIT: the server finishes the commit on its own,
later). The reader waits for it, so a resumed agent reads what the killed run stored and its
memory is the store's; before, it read the session without that append, and its run then failed
on it, its memory in another order than the store (the random-kill test saw this in CI).

The commit is held open deterministically: the real append pauses, by an injected hook, after
it wrote everything and before its transaction commits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from agentkit import Agent, tool
from agentkit.sessions import Session, encode_message
from agentkit.sessions import postgres as pg
from agentkit.sessions.order import deferral_marker
from agentkit.sessions.postgres import PostgresStore
from agentkit.testing import ScriptedModel
from agentkit.types import AssistantMessage, TextContent, ToolCall, UserMessage
from tests.servers import PostgresServer
from tests.sessions.invariants import assert_well_formed

WAIT = 30.0
DEAD = "dead-writer"
"""The name of the thread whose append stays uncommitted until the test lets it go."""


@pytest.fixture
def url(postgres_server: PostgresServer) -> str:
    return postgres_server.fresh_url()


class Held:
    """The append of the :data:`DEAD` thread, held open: ``paused`` is set once it has written
    its records (its transaction open, as one whose COMMIT is on its way); set ``release`` to
    let it commit."""

    def __init__(self) -> None:
        self.paused = threading.Event()
        self.release = threading.Event()


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[Held]:
    hold = Held()
    index = pg._index

    def pausing(cur: Any, name: str, change: Any) -> None:
        index(cur, name, change)
        if threading.current_thread().name == DEAD:
            hold.paused.set()
            assert hold.release.wait(WAIT)

    monkeypatch.setattr(pg, "_index", pausing)
    yield hold
    hold.release.set()


def append_in_flight(
    url: str, name: str, records: list[Any], version: int, held: Held
) -> threading.Thread:
    """The killed run's last append (an assistant message among its records, which is where
    the hook holds it), on a connection of its own, held before its commit."""

    def write() -> None:
        with PostgresStore(url) as store:
            store.append(name, [encode_message(r) for r in records], version)

    writer = threading.Thread(target=write, name=DEAD)
    writer.start()
    assert held.paused.wait(WAIT)
    return writer


def until_blocked_or_done(url: str, reader: threading.Thread) -> bool:
    """Wait until a backend waits for the held append's lock (True) or ``reader`` is done
    without waiting (False: it read past the append)."""
    deadline = time.monotonic() + WAIT
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND cardinality(pg_blocking_pids(pid)) > 0"
    )
    with psycopg.connect(url, autocommit=True) as admin:
        while True:
            if admin.execute(query).fetchone()[0]:  # type: ignore[index]
                return True
            if not reader.is_alive():
                return False
            assert time.monotonic() < deadline, "neither blocked nor done"
            reader.join(0.02)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), name="reader")
    thread.start()
    return thread, out


def test_a_load_waits_for_an_append_that_is_committing(
    url: str, name: str, held: Held
) -> None:
    with PostgresStore(url) as store:
        Session(name, store).append(UserMessage(content="one"))
        answer = AssistantMessage(content=[TextContent(text="two")])
        writer = append_in_flight(url, name, [answer], 1, held)
        reader, loaded = in_thread(lambda: store.load(name))
        blocked = until_blocked_or_done(url, reader)
        held.release.set()
        writer.join(WAIT)
        reader.join(WAIT)
    assert blocked, "the load read past an append that was committing"
    records, version = loaded[0]
    assert version == 2 and len(records) == 2


@tool(idempotent=True)
def lookup(key: str) -> str:
    """A read (idempotent: settling re-runs it)."""
    return f"value of {key}"


def test_a_resumed_agent_reads_what_the_killed_run_was_committing(
    url: str, name: str, held: Held
) -> None:
    # Stored: a finished batch, then a user's message from another writer; committing: the
    # killed run's next answer (a call), after a marker placing that message after its turn.
    asks = AssistantMessage(content=[ToolCall(id="l2", name="lookup", arguments={"key": "b"})],
                            stop_reason="tool_use")  # fmt: skip
    with PostgresStore(url) as store:

        def resume() -> Agent:
            model = ScriptedModel(["Noted."])
            return Agent(model=model.model, stream_fn=model, tools=[lookup],
                         session=Session(name, store))  # fmt: skip

        resume().close()  # the session starts with the agent's system message
        session = Session(name, store)
        session.load()
        session.append(UserMessage(content="go"),
                       AssistantMessage(content=[TextContent(text="Working.")]),
                       UserMessage(content="also this"))  # fmt: skip
        writer = append_in_flight(url, name, [deferral_marker(1), asks], 4, held)

        reader, resumed = in_thread(resume)
        blocked = until_blocked_or_done(url, reader)
        held.release.set()
        writer.join(WAIT)
        reader.join(WAIT)
        agent = resumed[0]
        result = agent.continue_() if agent.state.messages[-1].role != "assistant" else None
        stored = Session(name, store).load()
    assert blocked, "the resumer read past the killed run's append"
    assert result is None or result.error is None, result.error_message if result else None
    assert stored == agent.state.messages
    assert_well_formed(stored)
    assert [getattr(m, "role", None) for m in stored][-3:] == ["tool_result", "user", "assistant"]


def test_a_load_waits_for_a_hanging_append_no_longer_than_the_stores_timeout(
    url: str, name: str, held: Held
) -> None:
    with PostgresStore(url) as store, PostgresStore(url, timeout=1.0) as impatient:
        Session(name, store).append(UserMessage(content="one"))
        answer = AssistantMessage(content=[TextContent(text="two")])
        writer = append_in_flight(url, name, [answer], 1, held)
        reader, loaded = in_thread(lambda: impatient.load(name))
        reader.join(WAIT)
        ended_while_held = not reader.is_alive()
        held.release.set()
        writer.join(WAIT)
        assert ended_while_held  # the append never committed meanwhile: it read without it
        assert loaded[0][1] == 1
        assert impatient.load(name)[1] == 2  # the connection is still good
