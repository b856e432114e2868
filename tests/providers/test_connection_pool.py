"""The process-wide connection pool under load: it grows with the requests at once and keeps
those connections for the next ones, closes connections left idle, and a connect to an IP
address happens on the request's own thread (no thread per new connection)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from replay_server import API_KEY, ReplayServer, Reply, chat_sse, make_model, options

from agentkit import Agent
from agentkit.providers import http as http_module
from agentkit.providers import stream, stream_simple
from agentkit.types import Context, UserMessage

CHAT = "openai-completions"
CTX = Context(messages=[UserMessage(content="hi")])


def _in_flight_round(server: ReplayServer, width: int) -> list[str]:
    """``width`` requests at once, all held by the server until every one has arrived."""
    body = chat_sse({"content": "held "}, {"content": "then done"})
    stall = body.index(b"\n\n") + 2
    server.release.clear()
    server.enqueue(*[Reply(body, stall_after=stall, resume=True) for _ in range(width)])
    model = make_model(CHAT, server.url)
    results: list[str] = []
    lock = threading.Lock()  # guards results

    def one() -> None:
        message = stream(model, CTX, options()).result(timeout=30)
        with lock:
            results.append(message.stop_reason)

    threads = [threading.Thread(target=one, name=f"test-request-{i}") for i in range(width)]
    before = len(server.requests)
    for thread in threads:
        thread.start()
    arrived = server.wait_for_requests(before + width, timeout=30)
    server.release.set()
    for thread in threads:
        thread.join(30)
    assert arrived
    return results


def test_the_pool_keeps_as_many_connections_as_requests_ran_at_once(
    server: ReplayServer,
) -> None:
    width = 48  # more than the 32 connections the pool used to keep per host
    assert _in_flight_round(server, width) == ["stop"] * width
    assert server.connections == width
    assert _in_flight_round(server, width) == ["stop"] * width
    assert server.connections == width  # every connection was kept for the second round


def test_connections_left_idle_are_closed(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_module, "_REAP_EVERY", 0.0)
    model = make_model(CHAT, server.url)
    server.enqueue(*[Reply(chat_sse({"content": "x"})) for _ in range(3)])
    for _ in range(2):
        assert stream(model, CTX, options()).result(timeout=10).stop_reason == "stop"
    assert server.connections == 1  # kept alive between two requests in a row
    monkeypatch.setattr(http_module, "IDLE_TIMEOUT", -1.0)  # any idle connection is too old
    assert stream(model, CTX, options()).result(timeout=10).stop_reason == "stop"
    pool = http_module._manager(None).connection_from_url(server.url)
    assert all(conn is None for conn in pool.pool.queue)  # closed when it was given back


def test_a_connect_to_an_ip_address_starts_no_thread(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    server.enqueue(Reply(chat_sse({"content": "hello"})))
    agent = Agent(model=make_model(CHAT, server.url), stream_fn=stream_simple, api_key=API_KEY)
    result: Any = agent.prompt("hi")  # a new server: its first request opens a connection
    assert result[-1].stop_reason == "stop" and server.connections == 1
    ours = [name for name in started if name.startswith("agentkit")]
    assert ours == ["agentkit-agent"]  # the run's worker; the connect ran on it
