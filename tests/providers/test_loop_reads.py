"""An agent run reads each model response on its own worker thread (no request thread, no
hand-off per event), and an abort still ends a stalled read or a stalled connect at once.
Over real HTTP from the local replay server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    chat_sse,
    http_threads,
    make_model,
    wait_no_http_threads,
)

from agentkit import Agent, tool
from agentkit.event_stream import EventStream
from agentkit.local.repair import with_text_tool_calls
from agentkit.providers import http as http_module
from agentkit.providers import stream_simple

CHAT = "openai-completions"


def _agent(base_url: str, **options: Any) -> Agent:
    return Agent(
        model=make_model(CHAT, base_url), stream_fn=stream_simple, api_key=API_KEY, **options
    )


def test_a_run_reads_the_response_on_its_worker_thread(server: ReplayServer) -> None:
    words = chat_sse(*[{"content": f"w{i} "} for i in range(5)])
    # The second answer stalls after its first event until the first update was seen: a
    # request thread would be alive then, blocked on the stalled read.
    stall = words.index(b"\n\n") + 2
    server.enqueue(Reply(words), Reply(words, chunk=7, stall_after=stall, resume=True))
    agent = _agent(server.url)
    assert agent.prompt("warm the pool")[-1].stop_reason == "stop"
    assert wait_no_http_threads()  # the first request's connect ran on a short-lived thread
    seen: list[tuple[threading.Thread, list[threading.Thread]]] = []

    def listener(event: Any) -> None:
        if event.type == "message_update":
            seen.append((threading.current_thread(), http_threads()))
            server.release.set()

    agent.subscribe(listener)
    new = agent.prompt("again")
    assert new[-1].stop_reason == "stop", new[-1].error_message
    assert new[-1].text == "".join(f"w{i} " for i in range(5))
    assert len(seen) >= 5
    assert {thread for thread, _ in seen} == {seen[0][0]}  # the run's worker thread
    assert all(not alive for _, alive in seen)  # no request thread read it
    assert server.connections == 1  # and the pooled connection went back after each answer


def test_an_abort_ends_a_stalled_read_of_a_run_at_once(server: ReplayServer) -> None:
    text = chat_sse(*[{"content": f"w{i} "} for i in range(20)])
    first_event = text.index(b"\n\n") + 2
    server.enqueue(Reply(text, stall_after=first_event))
    agent = _agent(server.url)
    streaming = threading.Event()
    agent.subscribe(lambda e: streaming.set() if e.type == "message_update" else None)
    run = agent.start("hello")
    try:
        assert streaming.wait(5)  # the server now stalls the rest of the body
        started = time.monotonic()
        run.abort()
        assert run.wait(5)
        assert time.monotonic() - started < 1.0  # the stalled read ended at once (100 ms goal)
        result = run.result()
        assert result.stop_reason == "aborted"
        assert result[-1].text == "w0 "  # what arrived before the abort is kept
    finally:
        server.release.set()
    assert not http_threads()


def test_an_abort_while_a_run_connects_ends_it_at_once(
    full_listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    connecting = threading.Event()
    original = http_module._ConnectionTracker.connect

    def connect(self: Any, connection: Any, do_connect: Any) -> None:
        connecting.set()
        original(self, connection, do_connect)

    monkeypatch.setattr(http_module._ConnectionTracker, "connect", connect)
    agent = _agent(f"http://127.0.0.1:{full_listener}", timeout=(2, 5), max_retries=0)
    run = agent.start("hello")
    assert connecting.wait(5)
    started = time.monotonic()
    run.abort()
    assert run.wait(5)
    assert time.monotonic() - started < 1.0  # not the 2 s connect timeout
    assert run.result().stop_reason == "aborted"
    assert wait_no_http_threads(10)  # the connect thread ends when connect() gives up


def test_a_pump_is_advanced_by_reads_and_closed_by_its_consumer() -> None:
    stream: EventStream[int, str] = EventStream(lambda e: e == 3, lambda e: f"ended at {e}")
    steps: list[int] = []
    closed = threading.Event()

    def produce() -> Iterator[None]:
        try:
            for value in range(1, 5):
                steps.append(value)
                stream.push(value)
                yield
        finally:
            closed.set()

    stream.set_pump(produce())
    assert steps == []  # nothing runs until the consumer reads
    assert stream.get() == 1 and steps == [1]
    assert stream.get() == 2 and steps == [1, 2]
    assert stream.result() == "ended at 3"  # runs the pump to its end, as a thread is joined
    assert steps == [1, 2, 3, 4] and closed.is_set()

    early: EventStream[int, str] = EventStream(lambda e: e == 3, str)
    closed.clear()
    stream = early
    steps.clear()
    early.set_pump(produce())
    assert early.get() == 1
    early.close()  # the consumer left early: the producer's finally runs now
    assert closed.is_set() and steps == [1]


def test_a_relayed_stream_is_read_on_the_worker_thread_and_aborted_at_once(
    server: ReplayServer,
) -> None:
    """``with_text_tool_calls`` relays the request like a provider does: on the run's worker
    thread, with no relay thread, and an abort of a stalled read ends it at once."""
    text = chat_sse(*[{"content": f"w{i} "} for i in range(20)])
    server.enqueue(Reply(text, stall_after=text.index(b"\n\n") + 2))
    agent = Agent(
        model=make_model(CHAT, server.url),
        stream_fn=with_text_tool_calls(stream_simple),
        api_key=API_KEY,
        tools=[tool(echo)],  # a declared tool, so the stream is relayed, not passed through
    )
    relays: list[list[str]] = []

    def listener(event: Any) -> None:
        if event.type == "message_update":
            relays.append([t.name for t in threading.enumerate() if t.name == "agentkit-text-calls"])
            streaming.set()

    streaming = threading.Event()
    agent.subscribe(listener)
    run = agent.start("hello")
    try:
        assert streaming.wait(5)
        started = time.monotonic()
        run.abort()
        assert run.wait(5)
        assert time.monotonic() - started < 1.0
        result = run.result()
        assert result.stop_reason == "aborted"
        assert result[-1].text == "w0 "
    finally:
        server.release.set()
    assert relays and not any(relays)  # no relay thread: the worker thread relayed it
    assert not http_threads()


def echo(text: str) -> str:
    """Say ``text`` back.

    Args:
        text: What to say.
    """
    return text
