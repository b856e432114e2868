"""The FastAPI sample on a real uvicorn server on 127.0.0.1, with a streaming ``requests``
client, including one that disconnects mid-run (which must abort the run)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

import requests  # noqa: E402
from fastapi import FastAPI  # noqa: E402
from fastapi_app import create_app  # noqa: E402
from sample_helpers import (  # noqa: E402
    sse_events,
    stream_demo_run,
    stream_until,
    text_streaming,
    tool_started,
    wait_until,
)

from agentkit import tool  # noqa: E402
from agentkit.abort import AbortSignal  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402

WAIT = 10.0


@pytest.fixture
def serve() -> Iterator[Callable[[FastAPI], str]]:
    """Start an app on a real uvicorn server (port 0) on a thread; return its base URL."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(app: FastAPI) -> str:
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="test-uvicorn")
        thread.start()
        started.append((server, thread))
        assert wait_until(lambda: server.started, timeout=WAIT), "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(WAIT)


def test_stream_a_whole_run(serve: Callable[[FastAPI], str]) -> None:
    app = create_app()  # the offline demo model: a tool call, then an answer
    base = serve(app)
    shown = stream_demo_run(base, timeout=WAIT)
    assert [m["role"] for m in shown["messages"]][-3:] == ["assistant", "tool_result", "assistant"]


def test_ask_and_errors(serve: Callable[[FastAPI], str]) -> None:
    base = serve(create_app())
    answer = requests.post(f"{base}/ask", json={"prompt": "time?"}, timeout=WAIT).json()
    assert answer["answer"].startswith("It is ")
    with requests.get(f"{base}/runs/stream", params={"prompt": "time?"}, stream=True) as r:
        assert [n for n, _ in sse_events(r)][-1] == "done"
    assert requests.get(f"{base}/runs/stream", timeout=WAIT).status_code == 400
    assert requests.get(f"{base}/runs/nope", timeout=WAIT).status_code == 404
    assert requests.get(f"{base}/", timeout=WAIT).text.startswith("<!doctype html>")


def app_with_a_quiet_step() -> tuple[threading.Event, threading.Event, ScriptedModel, FastAPI]:
    """The sample app on a model that calls one quiet step: a tool that writes nothing for up to
    60 s and ends early only on an abort; the events say it started and that it saw the abort."""
    started = threading.Event()
    noticed = threading.Event()

    @tool
    def slow_step(signal: AbortSignal) -> str:
        """A quiet step: no events until the run is aborted (60 s at most)."""
        started.set()
        if signal.wait(60):
            noticed.set()
            signal.throw_if_aborted()
        return "done"

    model = ScriptedModel([reply(tool_call("slow_step", {})), "never asked"])
    return started, noticed, model, create_app(model, model.model, tools=[slow_step])


def test_client_disconnect_during_a_quiet_tool_aborts_the_run(
    serve: Callable[[FastAPI], str],
) -> None:
    started, noticed, model, app = app_with_a_quiet_step()
    base = serve(app)
    baseline = threading.active_count()
    r, run_id = stream_until(base, "Work", tool_started)
    assert started.wait(WAIT)
    r.close()  # the browser tab is closed while the tool works
    assert noticed.wait(WAIT), "the tool kept running after its client left"
    agent = app.state.runs[run_id]
    assert agent.wait_for_idle(WAIT)
    result = agent.state.messages[-1]
    assert (result.role, result.is_error) == ("tool_result", True)
    assert "abort" in result.content[0].text.lower()
    assert len(model.requests) == 1  # an aborted run makes no further request
    assert wait_until(lambda: threading.active_count() <= baseline, timeout=WAIT), [
        t.name for t in threading.enumerate()
    ]


def test_client_disconnect_mid_answer_aborts_the_run(serve: Callable[[FastAPI], str]) -> None:
    model = ScriptedModel([reply("Streaming on and on. " * 200, hang=True)], delay=0.02)
    app = create_app(model, model.model)
    base = serve(app)
    r, run_id = stream_until(base, "Talk", text_streaming)
    r.close()
    agent = app.state.runs[run_id]
    assert wait_until(lambda: not agent.state.is_streaming, timeout=WAIT), "the run kept going"
    last = agent.state.messages[-1]
    assert (last.role, last.stop_reason) == ("assistant", "aborted")


def test_client_leaving_ask_aborts_the_run(serve: Callable[[FastAPI], str]) -> None:
    """``POST /ask`` is a plain endpoint: uvicorn does not cancel it when its client leaves,
    so the app watches for the disconnect itself; an 8 s tool must not run on for nobody."""
    import httpx

    started, noticed, model, app = app_with_a_quiet_step()
    base = serve(app)

    async def ask_then_leave() -> None:
        async with httpx.AsyncClient(timeout=WAIT) as client:
            asking = asyncio.ensure_future(client.post(f"{base}/ask", json={"prompt": "Work"}))
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, started.wait, WAIT)
            asking.cancel()  # the client gives up: its connection is closed
            with pytest.raises(asyncio.CancelledError):
                await asking

    asyncio.run(ask_then_leave())
    assert noticed.wait(WAIT), "the run went on after its client left"
    (agent,) = app.state.runs.values()
    assert agent.wait_for_idle(WAIT)
    result = agent.state.messages[-1]
    assert (result.role, result.is_error) == ("tool_result", True)
    assert len(model.requests) == 1  # an aborted run makes no further request
