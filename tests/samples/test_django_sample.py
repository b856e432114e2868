"""The Django sample through Django's test client."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import django
import pytest
from django.http import StreamingHttpResponse
from django.test import Client, override_settings
from sample_helpers import wait_until

from agentkit import AbortSignal, tool
from agentkit.testing import ScriptedModel, reply, tool_call

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")
django.setup()


@pytest.fixture
def client() -> Client:
    return Client()


def sse(response: StreamingHttpResponse) -> Iterator[tuple[str, Any]]:
    """The ``(event, data)`` pairs of a streaming response, as Django produces them."""
    for chunk in response.streaming_content:
        text = bytes(chunk).decode() if not isinstance(chunk, str) else chunk
        if text.startswith(":"):  # a heartbeat comment
            continue
        lines = dict(line.split(": ", 1) for line in text.strip().splitlines())
        yield lines["event"], json.loads(lines["data"])


def test_ask_runs_the_agent_and_answers_json(client: Client) -> None:
    response = client.post(
        "/ask", {"prompt": "Where is order 42?"}, content_type="application/json"
    )
    assert response.status_code == 200
    body = response.json()
    assert body["answer"] == "Your order is shipped on Monday, arriving Thursday."
    assert body["stop_reason"] == "stop"
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]


def test_ask_reports_tool_failures_to_the_model(client: Client) -> None:
    body = client.post("/ask", {"prompt": "And order 99?"}, content_type="application/json").json()
    result = body["messages"][2]
    assert result["is_error"] is True
    assert "no order 99" in result["content"][0]["text"]


def test_ask_rejects_bad_requests(client: Client) -> None:
    assert client.post("/ask", {}, content_type="application/json").status_code == 400
    assert client.post("/ask", "not json", content_type="application/json").status_code == 400
    assert client.get("/ask").status_code == 405


def test_ask_with_a_scripted_model_from_settings(client: Client) -> None:
    model = ScriptedModel(["Hello from the settings' model."])
    with override_settings(AGENTKIT_STREAM_FN=model, AGENTKIT_MODEL_OBJECT=model.model):
        body = client.post("/ask", {"prompt": "Hi"}, content_type="application/json").json()
    assert body["answer"] == "Hello from the settings' model."
    assert model.requests[0].messages[-1].content[0].text == "Hi"


def test_stream_sends_every_event_then_done(client: Client) -> None:
    response = client.get("/stream", {"prompt": "Where is order 7?"})
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "text/event-stream"
    events = list(sse(response))
    names = [name for name, _ in events]
    assert names[:2] == ["agent_start", "turn_start"]
    assert names[-2:] == ["agent_end", "done"]
    assert names.index("tool_execution_start") < names.index("tool_execution_end")
    text = "".join(
        d["delta"] for n, d in events if n == "message_update" and d["kind"] == "text_delta"
    )
    assert text == "Checking.Your order is waiting for payment."
    assert events[-1][1] == {"stop_reason": "stop"}
    assert client.get("/stream").status_code == 400


def test_stream_closed_early_aborts_the_run(client: Client) -> None:
    """A client that disconnects: Django closes the response, and the run is aborted."""
    model = ScriptedModel(
        [reply(tool_call("lookup_order", {"order_id": 42})), reply("On and on. " * 100, hang=True)],
        delay=0.01,
    )
    before = threading.active_count()
    with override_settings(AGENTKIT_STREAM_FN=model, AGENTKIT_MODEL_OBJECT=model.model):
        response = client.get("/stream", {"prompt": "Where is order 42?"})
        events = sse(response)
        for name, data in events:
            if name == "message_update" and data["kind"] == "text_delta":
                break  # the answer is streaming
        response.close()  # what the WSGI server does when the client goes away
    signal = model.requests[-1].options.signal  # the request under way (each turn has its own)
    assert signal is not None and signal.aborted
    assert wait_until(lambda: threading.active_count() <= before, timeout=5), [
        t.name for t in threading.enumerate()
    ]


_tool_started = threading.Event()
_tool_signals: list[AbortSignal] = []


@tool
def slow_lookup(signal: AbortSignal) -> str:
    """A quiet step: no events for up to 60 s unless the run is aborted."""
    _tool_signals.append(signal)
    _tool_started.set()
    signal.wait(60)
    signal.throw_if_aborted()
    return "done"


def test_a_quiet_tool_gets_heartbeats_and_a_disconnect_aborts_it(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a tool is silent the stream still writes (heartbeat comments), which is how a
    server notices a client that left; closing the response then aborts the tool."""
    import django_app.views as views

    monkeypatch.setattr(views, "lookup_order", slow_lookup)
    model = ScriptedModel([reply(tool_call("slow_lookup", {})), "never asked"])
    settings = {
        "AGENTKIT_STREAM_FN": model,
        "AGENTKIT_MODEL_OBJECT": model.model,
        "AGENTKIT_HEARTBEAT": 0.2,
    }
    with override_settings(**settings):
        response = client.get("/stream", {"prompt": "Work"})
        chunks = iter(response.streaming_content)
        for chunk in chunks:
            if b"tool_execution_start" in bytes(chunk):
                break
        assert _tool_started.wait(10)
        assert bytes(next(chunks)).startswith(b": heartbeat")  # the tool is still running
        response.close()  # the write failed: the WSGI server closes the response
    assert _tool_signals[-1].aborted  # the tool under way was aborted
