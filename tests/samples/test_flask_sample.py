"""The Flask sample against a real server on 127.0.0.1 and a streaming ``requests`` client."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import requests
from flask import Flask
from flask_app import create_app
from sample_helpers import (
    sse_events,
    stream_demo_run,
    stream_until,
    text_streaming,
    tool_started,
    wait_until,
)

from agentkit import tool
from agentkit.abort import AbortSignal
from agentkit.testing import ScriptedModel, reply, tool_call

Event = tuple[str, Any]




@tool
def slow_step(signal: AbortSignal) -> str:
    """A quiet step: no events for up to 30 s unless the run is aborted."""
    if signal.wait(30):
        signal.throw_if_aborted()
    return "done"


def runs_of(app: Flask) -> Any:
    return app.extensions["agentkit_runs"]


def test_stream_a_whole_run(serve_flask: Callable[[Flask], str]) -> None:
    app = create_app()  # the offline demo model: a tool call, then an answer
    base = serve_flask(app)
    shown = stream_demo_run(base, timeout=5)
    assert [m["role"] for m in shown["messages"]] == [
        "system", "user", "assistant", "tool_result", "assistant",
    ]  # fmt: skip


def test_eventsource_get_and_errors(serve_flask: Callable[[Flask], str]) -> None:
    base = serve_flask(create_app())
    with requests.get(f"{base}/runs/stream", params={"prompt": "time?"}, stream=True) as r:
        assert [n for n, _ in sse_events(r)][-1] == "done"
    assert requests.get(f"{base}/runs/stream", timeout=5).status_code == 400
    assert requests.post(f"{base}/runs/nope/abort", timeout=5).status_code == 404
    assert requests.get(f"{base}/", timeout=5).text.startswith("<!doctype html>")


def test_steer_a_running_run(serve_flask: Callable[[Flask], str]) -> None:
    model = ScriptedModel(
        [reply(tool_call("pause", {})), "Switching to French.", "Voilà."], delay=0.01
    )

    steered = threading.Event()  # set once the steer was accepted

    @tool
    def pause() -> str:
        """Wait until the run has been steered."""
        steered.wait(10)  # the deadline only matters if the steer never came
        return "ok"

    base = serve_flask(create_app(model, model.model, tools=[pause], heartbeat=0.1))
    seen: list[Event] = []
    with requests.post(f"{base}/runs/stream", json={"prompt": "Hi"}, stream=True) as r:
        for name, data in sse_events(r):
            seen.append((name, data))
            if name == "tool_execution_start":
                run_id = seen[0][1]["id"]
                steer = requests.post(
                    f"{base}/runs/{run_id}/steer", json={"message": "Answer in French."}, timeout=5
                )
                steered.set()
                assert steer.status_code == 202
    user_texts = [
        d["message"]["content"][0]["text"]
        for n, d in seen
        if n == "message_start" and d["message"]["role"] == "user"
    ]
    assert user_texts == ["Hi", "Answer in French."]
    assert seen[-1][1]["stop_reason"] == "stop"
    # Steering a finished run is refused.
    late = requests.post(f"{base}/runs/{run_id}/steer", json={"message": "x"}, timeout=5)
    assert late.status_code == 409


def test_abort_endpoint(serve_flask: Callable[[Flask], str]) -> None:
    model = ScriptedModel([reply("A very long answer. " * 100, hang=True)], delay=0.02)
    app = create_app(model, model.model, heartbeat=0.1)
    base = serve_flask(app)
    with requests.post(f"{base}/runs/stream", json={"prompt": "Go"}, stream=True) as r:
        events = sse_events(r)
        run_id = next(events)[1]["id"]
        for name, data in events:
            if name == "message_update" and data["kind"] == "text_delta":
                assert requests.post(f"{base}/runs/{run_id}/abort", timeout=5).status_code == 202
                break
        rest = list(events)
    assert rest[-1] == ("done", {"id": run_id, "stop_reason": "aborted"})
    assert runs_of(app).get(run_id).agent.state.messages[-1].stop_reason == "aborted"


def test_client_disconnect_mid_stream_aborts_the_run(serve_flask: Callable[[Flask], str]) -> None:
    model = ScriptedModel([reply("Streaming on and on. " * 200, hang=True)], delay=0.02)
    app = create_app(model, model.model, heartbeat=0.1)
    base = serve_flask(app)
    baseline = threading.active_count()
    session = requests.Session()
    r, run_id = stream_until(base, "Talk", text_streaming, client=session)
    r.close()  # the browser tab is closed mid-answer
    session.close()
    entry = runs_of(app).get(run_id)
    assert entry.agent.wait_for_idle(5), "the run kept going after its client left"
    last = entry.agent.state.messages[-1]
    assert (last.role, last.stop_reason) == ("assistant", "aborted")
    assert not entry.agent.state.is_streaming
    assert wait_until(lambda: threading.active_count() <= baseline, timeout=5), [
        t.name for t in threading.enumerate()
    ]


def leave_during_the_tool(app: Flask, base: str) -> Any:
    """Start a streamed run, disconnect once its tool starts; the run's registry entry."""
    r, run_id = stream_until(base, "Work", tool_started)
    r.close()
    return runs_of(app).get(run_id)


def test_client_disconnect_during_a_quiet_tool_aborts_it(serve_flask: Callable[[Flask], str]) -> None:
    """No events while a tool runs: the heartbeat is what notices the client left."""
    model = ScriptedModel([reply(tool_call("slow_step", {})), "never asked"])
    app = create_app(model, model.model, tools=[slow_step], heartbeat=0.1)
    base = serve_flask(app)
    baseline = threading.active_count()
    entry = leave_during_the_tool(app, base)
    assert entry.agent.wait_for_idle(5), "the tool kept running after its client left"
    result = entry.agent.state.messages[-1]
    assert (result.role, result.is_error) == ("tool_result", True)
    assert "abort" in result.content[0].text.lower()
    assert len(model.requests) == 1  # an aborted run makes no further request
    assert wait_until(lambda: threading.active_count() <= baseline, timeout=5), [
        t.name for t in threading.enumerate()
    ]


def test_the_default_heartbeat_notices_a_disconnect_within_seconds(
    serve_flask: Callable[[Flask], str],
) -> None:
    """With the app's default heartbeat, a client that leaves during a quiet 30 s tool is
    noticed in a couple of seconds, not after the tool."""
    model = ScriptedModel([reply(tool_call("slow_step", {})), "never asked"])
    app = create_app(model, model.model, tools=[slow_step])
    entry = leave_during_the_tool(app, serve_flask(app))
    assert entry.agent.wait_for_idle(15), "the quiet tool kept running after its client left"
    result = entry.agent.state.messages[-1]
    assert (result.role, result.is_error) == ("tool_result", True)
