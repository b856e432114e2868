"""An abort reaches every read of a response over real HTTP: stalled after the headers or in
the middle of the body, chunked or close-delimited, with or without ``Connection: close``, on
each of the four wire APIs.

A response that says ``Connection: close`` hands its socket from the connection to the response
(``http.client`` drops ``connection.sock``), so an abort that shuts down only the sockets its
connections hold now would miss it; the request must keep hold of the socket itself.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from replay_server import (
    ReplayServer,
    Reply,
    chat_sse,
    check_protocol,
    fixture_bytes,
    make_model,
    options,
    wait_no_http_threads,
)

from agentkit.abort import AbortController
from agentkit.errors import RequestAbortedError
from agentkit.events import ErrorEvent
from agentkit.providers import stream
from agentkit.providers.http import StreamingRequest
from agentkit.types import Context, StreamOptions, UserMessage

CTX = Context(messages=[UserMessage(content="hi")])

BODIES = {
    "anthropic-messages": "vendor/anthropic-thinking-text.sse",
    "openai-completions": "vendor/openai-chat-text-usage.sse",
    "openai-responses": "vendor/openai-responses-text.sse",
    "google-generative-ai": "vendor/gemini-sse-thinking-text.sse",
}

FRAMINGS = {
    "chunked": {"chunked": True},
    "chunked, Connection: close": {"chunked": True, "headers": {"Connection": "close"}},
    "close-delimited": {"chunked": False},  # the replay server says Connection: close
}

WAIT = 10.0
"""Seconds to wait for what should take milliseconds (the server stalls six times as long)."""


@pytest.fixture
def server(server: ReplayServer) -> ReplayServer:
    server.stall_seconds = 6 * WAIT  # a read the abort misses lasts until the test gives up
    return server


def stalled(body: bytes, framing: str, stall_after: int) -> Reply:
    return Reply(body=body, stall_after=stall_after, **FRAMINGS[framing])  # type: ignore[arg-type]


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("api", sorted(BODIES))
def test_an_abort_ends_a_stream_stalled_mid_body(
    server: ReplayServer, api: str, framing: str
) -> None:
    body = fixture_bytes(BODIES[api])
    server.enqueue(stalled(body, framing, len(body) // 2))
    controller = AbortController()
    s = stream(
        make_model(api, server.url), CTX, options(signal=controller.signal, timeout=(5, 60))
    )
    events: list[Any] = []
    first_delta = threading.Event()

    def consume() -> None:
        for event in s:
            events.append(event)
            if event.type.endswith("_delta"):
                first_delta.set()

    reader = threading.Thread(target=consume, name="test-consumer")
    reader.start()
    assert first_delta.wait(WAIT)  # the headers and half the body were read; the rest stalls
    assert not s.done()
    controller.abort()
    message = s.result(timeout=WAIT)
    reader.join(WAIT)
    assert not reader.is_alive()
    assert message.stop_reason == "aborted"
    assert isinstance(events[-1], ErrorEvent) and events[-1].reason == "aborted"
    check_protocol(events)
    assert wait_no_http_threads(WAIT)


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_an_abort_ends_a_body_read_stalled_right_after_the_headers(
    server: ReplayServer, framing: str
) -> None:
    body = fixture_bytes(BODIES["anthropic-messages"])
    server.enqueue(stalled(body, framing, 0))
    controller = AbortController()
    request = StreamingRequest(
        url=f"{server.url}/v1/messages",
        headers={"Content-Type": "application/json"},
        body=b"{}",
        options=StreamOptions(signal=controller.signal, timeout=(5, 60)),
        provider_label="Anthropic",
    )
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            for _ in request.iter_bytes():
                pass
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what the read raised
            outcome.append(exc)

    with request:
        request.open()  # status line and headers are in; the body never starts
        reader = threading.Thread(target=read, name="test-reader")
        reader.start()
        controller.abort()  # before or during the read: either way it must end it
        reader.join(WAIT)
        assert not reader.is_alive(), "the abort did not reach the stalled read"
    assert len(outcome) == 1 and isinstance(outcome[0], RequestAbortedError)


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_a_run_deadline_ends_a_stalled_stream_and_its_request_thread(
    server: ReplayServer, framing: str
) -> None:
    from replay_server import API_KEY

    from agentkit import Agent, Budgets
    from agentkit.providers import stream_simple

    body = fixture_bytes(BODIES["openai-completions"])
    server.enqueue(stalled(body, framing, len(body) // 2))
    agent = Agent(
        model=make_model("openai-completions", server.url),
        stream_fn=stream_simple,
        api_key=API_KEY,
        tool_abort_grace=6 * WAIT,  # a run that waited the grace out would outlast the test
    )
    results: list[Any] = []
    ended = threading.Event()

    def run() -> None:
        results.append(agent.prompt("hi", budgets=Budgets(timeout=0.3)))
        ended.set()

    runner = threading.Thread(target=run, name="test-run")
    runner.start()
    assert ended.wait(WAIT), "the deadline did not end the run"
    runner.join(WAIT)
    result = results[0]
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    assert result[-1].stop_reason == "aborted"
    assert wait_no_http_threads(WAIT)  # the request's own thread ended with it


def test_an_abort_ends_a_trickling_close_delimited_stream_before_its_next_byte(
    server: ReplayServer,
) -> None:
    body = chat_sse(*[{"content": f"w{i} "} for i in range(5)])
    first = body.index(b"\n\n") + 2
    second = body.index(b"\n\n", first) + 2
    server.enqueue(Reply(body=body, chunked=False, stall_after=first, trickle=True))
    controller = AbortController()
    s = stream(
        make_model("openai-completions", server.url),
        CTX,
        options(signal=controller.signal, timeout=(5, 60)),
    )
    deltas: list[str] = []
    arrived = threading.Condition()

    def consume() -> None:
        for event in s:
            if event.type == "text_delta":
                with arrived:
                    deltas.append(event.delta)
                    arrived.notify_all()

    reader = threading.Thread(target=consume, name="test-consumer")
    reader.start()
    for _ in range(second - first):  # the second event, one byte at a time
        server.trickle_gate.release()
    with arrived:  # every byte let out so far has been read
        assert arrived.wait_for(lambda: len(deltas) == 2, WAIT), deltas
    controller.abort()  # no further byte comes until the test is over
    message = s.result(timeout=WAIT)
    reader.join(WAIT)
    assert message.stop_reason == "aborted"
    assert message.content[0].text == "w0 w1 "  # type: ignore[union-attr]
