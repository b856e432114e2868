"""agentkit.celery's run without Celery: ``run_session`` on a real Redis, its event stream and
its commands, and what makes a repeated delivery harmless."""

from __future__ import annotations

import threading
import uuid

import pytest

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.integrations.celery import AgentRunFailedError, RunChannel, run_session, submit
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel
from agentkit.types import UserMessage
from tests.servers import RedisServer
from tests.sessions.invariants import assert_well_formed
from tests.sessions.test_faults import kill_when_ready, start_child


def builder(model: ScriptedModel):  # noqa: ANN201 - a BuildAgent
    def build(session: Session) -> Agent:
        return Agent(model=model.model, stream_fn=model, system_prompt="s", session=session)

    return build


def test_a_repeated_run_of_a_finished_session_does_not_call_the_model(
    redis_server: RedisServer, name: str
) -> None:
    before = threading.active_count()
    model = ScriptedModel(["The answer."])
    session = Session(name, redis_server.url)
    session.append(UserMessage(content="question"))
    channel = RunChannel(redis_server.url, uuid.uuid4().hex)
    try:
        first = run_session(session, builder(model), channel, attempt=1)
        again = run_session(Session(name, redis_server.url), builder(model), channel, attempt=2)
        first_events = list(channel.follow())  # up to the first run's run_end
        end_of_first = first_events[-1][0]
        assert end_of_first is not None
        events = [e for _id, e in first_events] + [e for _id, e in channel.follow(end_of_first)]
    finally:
        channel.close()
    assert first == again == {"session": name, "answer": "The answer.", "messages": 2}
    assert len(model.requests) == 1
    assert [e["type"] for e in events].count("run_start") == 2
    assert threading.active_count() <= before  # the publishing and command threads are gone


def test_a_command_sent_before_the_run_starts_is_applied_once(
    redis_server: RedisServer, name: str
) -> None:
    model = ScriptedModel(["First answer.", "Second answer.", "Third answer."])
    session = Session(name, redis_server.url)
    session.append(UserMessage(content="question"))
    channel = RunChannel(redis_server.url, uuid.uuid4().hex)
    try:
        channel.follow_up("and one more thing")  # queued before any worker picked the run up
        run_session(session, builder(model), channel)
        stored = [m.content for m in Session(name, redis_server.url).load() if m.role == "user"]
        assert stored == ["question", [_text("and one more thing")]]
        # The same run delivered again (a new message came in meanwhile): not applied twice.
        writer = Session(name, redis_server.url)
        writer.load()
        writer.append(UserMessage(content="new"))
        session.load()
        run_session(session, builder(model), channel)
    finally:
        channel.close()
    users = [m for m in Session(name, redis_server.url).load() if m.role == "user"]
    assert len(users) == 3


def _text(text: str) -> object:
    from agentkit.types import TextContent

    return TextContent(text=text)


def test_an_abort_sent_before_the_run_starts_is_not_lost(
    redis_server: RedisServer, name: str
) -> None:
    model = ScriptedModel(["never"])
    session = Session(name, redis_server.url)
    session.append(UserMessage(content="question"))
    channel = RunChannel(redis_server.url, uuid.uuid4().hex)
    try:
        channel.abort()
        with pytest.raises(AgentRunFailedError, match="aborted the run before it started"):
            run_session(session, builder(model), channel)
    finally:
        channel.close()
    assert model.requests == []


def test_an_empty_session_fails_clearly(redis_server: RedisServer, name: str) -> None:
    with pytest.raises(AgentRunFailedError, match="is empty: there is nothing to run"):
        run_session(Session(name, redis_server.url), builder(ScriptedModel()))


def test_submit_stores_the_prompt_before_sending(redis_server: RedisServer, name: str) -> None:
    sent: list[tuple[object, ...]] = []

    class Task:
        def apply_async(self, args: tuple[object, ...], **options: object) -> str:
            sent.append(args)
            assert [m.role for m in Session(name, redis_server.url).load()] == ["user"]
            return "result"

    assert submit(Task(), Session(name, redis_server.url), "hello") == "result"
    assert sent == [(name,)]


@pytest.mark.processes
def test_an_abort_applied_before_the_worker_died_is_not_lost(
    redis_server: RedisServer, name: str
) -> None:
    """The worker applies a client's abort to a tool that ignores it and is SIGKILLed inside
    the abort grace (an OOM kill, an operator): the redelivered attempt ends aborted, without
    re-running the tool or calling the model."""
    session = Session(name, redis_server.url)
    session.append(UserMessage(content="export everything"))
    run_id = uuid.uuid4().hex
    child = start_child(redis_server.url, name, f"celery-abort:{run_id}")
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "in-tool"
    channel = RunChannel(redis_server.url, run_id)
    try:
        channel.abort()
        kill_when_ready(child)  # the abort reached the tool, which carries on regardless
        exports: list[str] = []

        @tool(idempotent=True)
        def export(signal: AbortSignal) -> str:
            """A long export that ignores an abort."""
            exports.append("again")
            return "exported"

        model = ScriptedModel(["Exported."])

        def build(session: Session) -> Agent:
            return Agent(model=model.model, stream_fn=model, tools=[export], system_prompt="s",
                         session=session)  # fmt: skip

        with pytest.raises(AgentRunFailedError, match="aborted"):
            run_session(Session(name, redis_server.url), build, channel, attempt=2)
    finally:
        channel.close()
    assert exports == [] and model.requests == []
    stored = Session(name, redis_server.url).load()
    assert [m.role for m in stored] == ["user", "assistant", "tool_result"]
    assert stored[-1].is_error and stored[-1].content[0].text == "Operation aborted"
    assert_well_formed(stored)


def test_one_run_per_session_holds_its_lease(redis_server: RedisServer, name: str) -> None:
    """A second run waits until the first releases the session; the same run delivered again
    (its worker died) takes its own lease over at once."""
    import redis

    from agentkit.integrations.celery import SessionLease

    client = redis.Redis.from_url(redis_server.url)
    try:
        first = SessionLease(client, name, "run-1")
        first.acquire()
        again = SessionLease(client, name, "run-1")
        again.acquire()  # the redelivery: at once
        second = SessionLease(client, name, "run-2")
        holding = threading.Event()

        def take() -> None:
            second.acquire()
            holding.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        assert not holding.wait(0.5)  # still the first run's
        again.release()
        assert holding.wait(30)
        waiter.join(30)
        assert client.get(second.key) == b"run-2"
        first.release()  # a stale holder's release leaves another run's lease alone
        assert client.get(second.key) == b"run-2"
        second.release()
        assert client.get(second.key) is None
    finally:
        client.close()
