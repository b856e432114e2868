"""The indexes each store keeps, on real SQLite, Redis and PostgreSQL stores of their own: which
sessions have calls waiting for a decision, found without reading every session (the page's
approval inbox reads only those), and how many of a session's records are messages (its marker
records are not, in the list nor in an export)."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from agentkit import Agent, Approvals, tool
from agentkit.sessions import Session, SessionStore, encode_message, import_jsonl, open_store
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import AssistantMessage, TextContent, UserMessage

WAIT = 60.0


@tool(requires_approval=True)
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order}"


def two_refunds(context: Any, options: Any) -> Any:
    if context.messages[-1].role == "tool_result":
        return "Both handled."
    return reply(tool_call("refund", {"order": "A", "amount": 5}),
                 tool_call("refund", {"order": "B", "amount": 7}))  # fmt: skip


def agent_on(session: Session) -> Agent:
    model = ScriptedModel([two_refunds] * 4)
    return Agent(model=model.model, stream_fn=model, tools=[refund], session=session,
                 approvals=Approvals(defer=True))  # fmt: skip


def wait_for_approval(store: SessionStore, name: str) -> list[str]:
    """Run a session until its two calls wait; return their ids."""
    result = agent_on(Session(name, store)).prompt("refund both")
    assert result.stop_reason == "approval"
    return [request.id for request in result.pending_approvals]


@pytest.fixture
def store(fresh_store_url: str) -> Iterator[SessionStore]:
    with open_store(fresh_store_url) as opened:
        yield opened


def awaiting(store: SessionStore) -> list[str]:
    return [info.name for info in store.awaiting_approval()]


def really_waiting(store: SessionStore) -> list[str]:
    """What the index must name at least: every session with an undecided call (read whole)."""
    return [i.name for i in store.list() if Session(i.name, store).pending_approvals()]


def test_the_index_names_exactly_the_sessions_whose_calls_wait(store: SessionStore) -> None:
    first = wait_for_approval(store, "first")
    second = wait_for_approval(store, "second")
    Session("chat", store).append(UserMessage(content="no tools here"))
    assert awaiting(store) == really_waiting(store) == ["first", "second"]

    Session("first", store).approve(first[0])  # one of two decided: still waiting
    assert awaiting(store) == ["first", "second"]
    Session("first", store).deny(first[1], "no")  # all decided: nothing waits for a person
    assert awaiting(store) == really_waiting(store) == ["second"]
    assert agent_on(Session("first", store)).continue_().stop_reason == "stop"
    assert awaiting(store) == ["second"]

    # A new batch of the same session waits, its calls with the ids of the last (a model's
    # ids need not be unique across turns).
    assert wait_for_approval(store, "first") == first
    assert awaiting(store) == really_waiting(store) == ["first", "second"]
    for call_id in second:
        Session("second", store).approve(call_id)
    assert awaiting(store) == ["first"]
    assert Session("first", store).delete()
    assert awaiting(store) == really_waiting(store) == []
    # A record that is not JSON is none of the index's business (loading the session names it).
    store.append("odd", ["not json", '{"role": "approval_request"}'], 0)
    assert awaiting(store) == []


def test_a_new_answer_closes_what_an_abandoned_batch_left_waiting(store: SessionStore) -> None:
    wait_for_approval(store, "moved-on")
    session = Session("moved-on", store)
    session.load()
    session.append(AssistantMessage(content=[TextContent(text="let us start over")], api="x",
                                    provider="x", model="x"))  # fmt: skip
    assert really_waiting(store) == [] and awaiting(store) == []


def _forget_the_indexes(url: str) -> None:
    """Make the store look as one written before the stores kept their indexes."""
    if url.startswith("sqlite://"):
        with sqlite3.connect(url[len("sqlite://") :]) as db:
            db.execute("DROP TABLE agentkit_waiting_calls")
            db.execute("ALTER TABLE agentkit_sessions DROP COLUMN markers")
    elif url.startswith("redis://"):
        import redis

        with redis.Redis.from_url(url) as client:
            client.delete(*client.keys("agentkit:waiting*"), "agentkit:markers",
                          "agentkit:indexes-made")  # fmt: skip
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE agentkit_waiting_calls")
            conn.execute("ALTER TABLE agentkit_sessions DROP COLUMN markers")


def test_a_store_written_before_the_indexes_is_indexed_when_opened(fresh_store_url: str) -> None:
    with open_store(fresh_store_url) as store:
        wait_for_approval(store, "old")
        wait_for_approval(store, "decided")
        for call_id in [r.id for r in Session("decided", store).pending_approvals()]:
            Session("decided", store).approve(call_id)
        Session("chat", store).append(UserMessage(content="hello"))
        deferring_run(store, "deferred")
        before = counts(store)
    _forget_the_indexes(fresh_store_url)
    with open_store(fresh_store_url) as store:
        assert awaiting(store) == really_waiting(store) == ["old"]
        assert counts(store) == before == loaded_counts(store)


# --- what the store counts: messages, not markers ----------------------------------------------


@tool
def slow() -> str:
    """A tool during which another writer stores the user's next message."""
    return "slow done"


def deferring_run(store: SessionStore, name: str) -> None:
    """A run during whose tool batch another writer stores a message: the run's writer then
    stores a marker record (the message waits for the turn's end)."""
    other = Session(name, store)

    def interject(event: Any) -> None:
        if event.type == "tool_execution_start":
            other.load()
            other.append(UserMessage(content="and also this"))

    model = ScriptedModel([reply(tool_call("slow")), "Answer to both."])
    agent = Agent(model=model.model, stream_fn=model, tools=[slow], session=Session(name, store))
    agent.subscribe(interject)
    assert agent.prompt("first").text == "Answer to both."
    records, version = store.load(name)
    assert sum('"role":"deferred"' in r for r in records) == 1 and version == len(records)


def counts(store: SessionStore) -> dict[str, int]:
    return {info.name: info.messages for info in store.list()}


def loaded_counts(store: SessionStore) -> dict[str, int]:
    return {info.name: len(Session(info.name, store).load()) for info in store.list()}


def test_a_session_counts_and_exports_its_messages_not_its_markers(store: SessionStore) -> None:
    deferring_run(store, "deferred")
    wait_for_approval(store, "waiting")
    loaded = Session("deferred", store).load()
    assert counts(store) == loaded_counts(store) and counts(store)["deferred"] == len(loaded)
    assert [i.messages for i in store.awaiting_approval()] == [counts(store)["waiting"]]

    exported = io.StringIO()
    assert Session("deferred", store).export_jsonl(exported) == len(loaded)
    lines = exported.getvalue().splitlines()
    assert json.loads(lines[0])["messages"] == len(loaded) == len(lines) - 1
    assert not [line for line in lines if '"role":"deferred"' in line]
    copy = import_jsonl(store, io.StringIO(exported.getvalue()), "deferred-copy")
    assert copy.load() == loaded and counts(store)["deferred-copy"] == len(loaded)


# --- the page's inbox ------------------------------------------------------------------------


def _fill(store: SessionStore, count: int) -> None:
    """``count`` finished chats, none waiting."""
    records = [encode_message(UserMessage(content="hi")),
               encode_message(AssistantMessage(content=[TextContent(text="hello")], api="x",
                                               provider="x", model="x"))]  # fmt: skip
    for index in range(count):
        store.append(f"chat-{index:05d}", records, 0)


def test_the_inbox_reads_only_the_sessions_that_wait(
    store: SessionStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("flask", reason="the ui extra is not installed")
    from agentkit.ui import UiServer

    _fill(store, 2000)
    waiting = {name: wait_for_approval(store, name) for name in ("ticket-1", "ticket-2")}
    for call_id in wait_for_approval(store, "ticket-3"):  # decided, not resumed yet
        Session("ticket-3", store).approve(call_id)
    assert len(store.list()) == 2003

    reads: list[str] = []
    load: Callable[[str], Any] = store.load

    def counted(name: str) -> Any:
        reads.append(name)
        return load(name)

    monkeypatch.setattr(store, "load", counted)
    with UiServer(store) as server:
        client = requests.Session()
        client.get(server.url, timeout=WAIT)  # the sessions list (it reads what it shows)
        reads.clear()
        page = client.get(server.url.split("?")[0].rstrip("/") + "/approvals", timeout=WAIT)
    assert page.status_code == 200
    for ids in waiting.values():
        assert all(call_id in page.text for call_id in ids)
    assert sorted(reads) == ["ticket-1", "ticket-2"]  # not the 2,001 others
