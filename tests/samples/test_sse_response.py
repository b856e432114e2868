"""``sse_response()``: one run as a server-sent-events response, on the real servers of each
framework (Werkzeug for Flask, Django's development server, uvicorn for Starlette), read by a
real client (``requests``; ``httpx`` for uvicorn). A client that leaves while the run is quiet
(a tool that writes nothing) must abort the run: the heartbeats are what notice it on WSGI."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import django
import httpx
import pytest
import requests
import uvicorn
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.test import override_settings
from django.urls import path
from flask import Flask
from flask import request as flask_request
from sample_helpers import sse_events, wait_until
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from werkzeug.serving import make_server

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.sse_response import event_payload, sse_response
from agentkit.testing import ScriptedModel, reply, tool_call

WAIT = 10.0
HEARTBEAT = 0.1

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")
django.setup()


class QuietTool:
    """A tool that writes nothing until the run is aborted (60 s at most)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.aborted = threading.Event()

    def agent(self) -> Agent:
        @tool
        def quiet(signal: AbortSignal) -> str:
            """Work quietly."""
            self.started.set()
            if signal.wait(60):
                self.aborted.set()
                signal.throw_if_aborted()
            return "finished"

        model = ScriptedModel([reply("Working.", tool_call("quiet", {})), "Done."])
        return Agent(model=model.model, stream_fn=model, tools=[quiet])


def demo_agent() -> Agent:
    @tool
    def lookup() -> str:
        """Look it up."""
        return "42"

    model = ScriptedModel([reply("Looking.", tool_call("lookup", {})), "It is 42."])
    return Agent(model=model.model, stream_fn=model, tools=[lookup])


# --- one tiny app per framework: GET /stream?prompt=... ----------------------------------------

AgentFactory = Callable[[], Agent]
_django_agent: list[AgentFactory] = []  # the factory Django's view uses (one test at a time)


def flask_app(make_agent: AgentFactory) -> Any:
    app = Flask(__name__)

    @app.get("/stream")
    def stream() -> Any:
        prompt = flask_request.args["prompt"]
        return sse_response(
            flask_request, make_agent(), prompt, heartbeat=HEARTBEAT, run_info={"id": "r1"}
        )

    return app


def django_stream(request: Any) -> Any:
    return sse_response(
        request, _django_agent[-1](), request.GET["prompt"], heartbeat=HEARTBEAT,
        run_info={"id": "r1"},
    )  # fmt: skip


urlpatterns = [path("stream", django_stream)]


def starlette_app(make_agent: AgentFactory) -> Starlette:
    async def stream(request: Request) -> Any:
        prompt = request.query_params["prompt"]
        return sse_response(
            request, make_agent(), prompt, heartbeat=HEARTBEAT, run_info={"id": "r1"}
        )

    return Starlette(routes=[Route("/stream", stream)])


@pytest.fixture
def serve() -> Iterator[Callable[[str, AgentFactory], str]]:
    """``serve(framework, make_agent)``: the app on that framework's real server on a free
    port; its base URL."""
    stops: list[Callable[[], None]] = []

    def start(framework: str, make_agent: AgentFactory) -> str:
        if framework == "flask":
            server = make_server("127.0.0.1", 0, flask_app(make_agent), threaded=True)
            return _serve_wsgi(server, stops)
        if framework == "django":
            _django_agent.append(make_agent)
            overridden = override_settings(ROOT_URLCONF=__name__)
            overridden.enable()
            stops.append(overridden.disable)
            server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
            server.set_app(WSGIHandler())
            return _serve_wsgi(server, stops)
        config = uvicorn.Config(starlette_app(make_agent), host="127.0.0.1", port=0)
        config.log_level = "warning"
        uv = uvicorn.Server(config)
        thread = threading.Thread(target=uv.run, name="test-uvicorn")
        thread.start()

        def stop() -> None:
            uv.should_exit = True
            thread.join(WAIT)

        stops.append(stop)
        assert wait_until(lambda: uv.started, timeout=WAIT), "uvicorn did not start"
        return f"http://127.0.0.1:{uv.servers[0].sockets[0].getsockname()[1]}"

    yield start
    for stop in reversed(stops):
        stop()


def _serve_wsgi(server: Any, stops: list[Callable[[], None]]) -> str:
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-server"
    )
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)

    stops.append(stop)
    return f"http://127.0.0.1:{server.server_address[1]}"


# --- reading the stream --------------------------------------------------------------------


def read_all(framework: str, url: str) -> list[tuple[str, Any]]:
    """Every ``(event, data)`` of the stream at ``url``; heartbeats are comments, skipped."""
    if framework == "starlette":
        return asyncio.run(_read_all_httpx(url))
    with requests.get(url, stream=True, timeout=WAIT) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        assert r.headers["Cache-Control"] == "no-cache"
        return list(sse_events(r))


async def _read_all_httpx(url: str) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    async with httpx.AsyncClient(timeout=WAIT) as client:
        async with client.stream("GET", url) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            name = "message"
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[len("data: ") :])))
    return events


def leave_once_the_tool_runs(framework: str, url: str, tool: QuietTool) -> list[str]:
    """Read the stream until the tool starts, then disconnect; the event names read."""
    if framework == "starlette":
        return asyncio.run(_leave_httpx(url, tool))
    names: list[str] = []
    session = requests.Session()
    r = session.get(url, stream=True, timeout=WAIT)
    for name, _ in sse_events(r):
        names.append(name)
        if name == "tool_execution_start":
            break
    assert tool.started.wait(WAIT)
    r.close()  # the browser tab is closed while the tool works
    session.close()
    return names


async def _leave_httpx(url: str, tool: QuietTool) -> list[str]:
    names: list[str] = []
    async with httpx.AsyncClient(timeout=WAIT) as client:
        async with client.stream("GET", url) as r:
            # Held until the end: an async generator left by ``break`` and dropped is closed
            # by the loop at once, which closes the response, and the client would leave early.
            lines = r.aiter_lines()
            async for line in lines:
                if line.startswith("event: "):
                    names.append(line[len("event: ") :])
                    if names[-1] == "tool_execution_start":
                        break
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, tool.started.wait, WAIT)
            await lines.aclose()
    return names  # leaving the blocks closed the connection


FRAMEWORKS = ["flask", "django", "starlette"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_run_streams_as_server_sent_events(
    framework: str, serve: Callable[[str, AgentFactory], str]
) -> None:
    base = serve(framework, demo_agent)
    events = read_all(framework, f"{base}/stream?prompt=what")
    names = [name for name, _ in events]
    assert names[:3] == ["run", "agent_start", "turn_start"]
    assert names[-2:] == ["agent_end", "done"]
    assert events[0][1] == {"id": "r1"}
    assert events[-1][1] == {"id": "r1", "stop_reason": "stop"}
    assert names.index("tool_execution_start") < names.index("tool_execution_end")
    deltas = [d for n, d in events if n == "message_update" and d["kind"] == "text_delta"]
    assert "".join(d["delta"] for d in deltas) == "Looking.It is 42."
    assert set(deltas[0]) == {"type", "kind", "delta"}  # a delta, not the message so far


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_client_leaving_a_quiet_run_aborts_it(
    framework: str, serve: Callable[[str, AgentFactory], str]
) -> None:
    quiet = QuietTool()
    agents: list[Agent] = []

    def make_agent() -> Agent:
        agents.append(quiet.agent())
        return agents[-1]

    base = serve(framework, make_agent)
    names = leave_once_the_tool_runs(framework, f"{base}/stream?prompt=work", quiet)
    assert names[0] == "run"
    assert quiet.aborted.wait(WAIT), "the tool kept running after its client left"
    agent = agents[0]
    assert agent.wait_for_idle(WAIT)
    result = agent.state.messages[-1]
    assert (result.role, result.is_error) == ("tool_result", True)
    assert "abort" in result.content[0].text.lower()


def test_a_response_never_sent_still_aborts_its_run() -> None:
    """A WSGI server closes a response it never iterated (the client left first): the run
    started by ``sse_response()`` is aborted then."""
    quiet = QuietTool()
    agent = quiet.agent()
    app = flask_app(lambda: agent)
    with app.test_request_context("/stream?prompt=work"):
        response = sse_response(flask_request, agent, "work", heartbeat=HEARTBEAT)
    assert quiet.started.wait(WAIT)
    response.close()
    assert quiet.aborted.is_set()
    assert not agent.state.is_streaming


def test_other_requests_and_bad_heartbeats_are_refused() -> None:
    agent = demo_agent()
    with pytest.raises(TypeError, match="Flask, Django or Starlette"):
        sse_response(object(), agent, "hi")
    with pytest.raises(ValueError, match="heartbeat"):
        sse_response(object(), agent, "hi", heartbeat=0)
    assert not agent.state.is_streaming  # nothing was started


def test_event_payload_sends_text_updates_as_deltas() -> None:
    events: list[Any] = []
    agent = demo_agent()
    agent.subscribe(lambda event: events.append(event_payload(event)))
    agent.prompt("what")
    updates = [e for e in events if e["type"] == "message_update"]
    assert updates and all(set(e) == {"type", "kind", "delta"} for e in updates)
    assert events[-1]["type"] == "agent_end" and len(events[-1]["messages"]) == 4
