"""A PostgreSQL server that closes idle connections (``idle_session_timeout``, as PgBouncer and
cloud load balancers do): the store's next call goes through on a new connection, never fails
the run, and never writes twice."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from agentkit import Agent, tool
from agentkit.sessions import Session
from agentkit.sessions.postgres import PostgresStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import UserMessage
from tests.servers import PostgresServer
from tests.sessions.invariants import assert_well_formed, roles

WAIT = 30.0


@pytest.fixture(scope="module")
def idle_closing_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A database on the test server whose sessions the server ends after 1 s idle."""
    with psycopg.connect(postgres_server.url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS idle_closing")
        admin.execute("CREATE DATABASE idle_closing")
        admin.execute("ALTER DATABASE idle_closing SET idle_session_timeout = '1s'")
    yield postgres_server.url.rsplit("/", 1)[0] + "/idle_closing"


def wait_until_closed_by_server(store: PostgresStore, admin_url: str) -> None:
    """Block until the server has ended the store's idle connection."""
    pid = store._link._conn.info.backend_pid  # the connection the store holds
    deadline = time.monotonic() + WAIT
    with psycopg.connect(admin_url, autocommit=True) as admin:
        query = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        while admin.execute(query, (pid,)).fetchone() is not None:
            assert time.monotonic() < deadline, "the server never closed the idle connection"
            time.sleep(0.05)


def test_the_call_after_an_idle_close_goes_through(
    idle_closing_url: str, postgres_server: PostgresServer, name: str
) -> None:
    store = PostgresStore(idle_closing_url)
    try:
        session = Session(name, store)
        session.append(UserMessage(content="one"))
        wait_until_closed_by_server(store, postgres_server.url)
        session.append(UserMessage(content="two"))  # an append on the dead connection
        wait_until_closed_by_server(store, postgres_server.url)
        assert [m.content for m in Session(name, store).load()] == ["one", "two"]  # a load
        wait_until_closed_by_server(store, postgres_server.url)
        assert name in [info.name for info in store.list()]
    finally:
        store.close()


def test_a_run_whose_tool_outlasts_the_idle_timeout_finishes(
    idle_closing_url: str, postgres_server: PostgresServer, name: str
) -> None:
    store = PostgresStore(idle_closing_url)

    @tool
    def slow() -> str:
        """Longer than the server keeps an idle connection."""
        wait_until_closed_by_server(store, postgres_server.url)
        return "done"

    try:
        model = ScriptedModel([reply(tool_call("slow")), "Finished."])
        agent = Agent(model=model.model, stream_fn=model, tools=[slow], system_prompt="s",
                      session=Session(name, store))  # fmt: skip
        result = agent.prompt("go")
        assert result.error is None and result.text == "Finished."
        stored = Session(name, store).load()
        assert roles(stored) == ["system", "user", "assistant", "tool_result", "assistant"]
        assert_well_formed(stored)
    finally:
        store.close()


def test_a_celery_task_after_a_quiet_period_succeeds(
    idle_closing_url: str, postgres_server: PostgresServer, name: str
) -> None:
    """A worker process keeps its store between tasks; the first task after a quiet period
    used to fail on the connection the server had closed meanwhile."""
    from agentkit.integrations.celery import run_session, submit

    store = PostgresStore(idle_closing_url)  # what agent_task keeps per worker process
    client = PostgresStore(idle_closing_url)  # the web process that submits
    model = ScriptedModel(["First answer.", "Second answer."])

    def build(session: Session) -> Agent:
        return Agent(model=model.model, stream_fn=model, system_prompt="s", session=session)

    class Task:  # stands in for the Celery task: submit() stores the prompt, then sends it
        def apply_async(self, args: tuple[str], **options: object) -> None:
            return None

    try:
        submit(Task(), Session(name, client), "one")
        assert run_session(Session(name, store), build)["answer"] == "First answer."
        wait_until_closed_by_server(store, postgres_server.url)  # the quiet period
        submit(Task(), Session(name, client), "two")
        assert run_session(Session(name, store), build)["answer"] == "Second answer."
    finally:
        store.close()
        client.close()
