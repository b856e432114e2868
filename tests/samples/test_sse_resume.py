"""``sse_response()`` resuming from a run's log: each event goes out with its sequence number as
``id:``, and the follow form (``store=``, ``run_id=``) resumes after ``Last-Event-ID`` on every
framework's real server (Werkzeug for Flask, Django's development server, uvicorn for
Starlette); a follower that leaves stops nothing."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import django
import pytest
import requests
import uvicorn
from django.core.handlers.wsgi import WSGIHandler
from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
from django.http import Http404
from django.test import override_settings
from django.urls import path
from flask import Flask, abort
from flask import request as flask_request
from sample_helpers import wait_until
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import Route
from werkzeug.serving import make_server

from agentkit import runlog
from agentkit.errors import RunNotFoundError
from agentkit.sessions import Session, SessionStore, SqliteStore
from agentkit.sse_response import sse_response
from tests.sessions.runlog_support import Gate, frames, gated_agent

WAIT = 10.0
HEARTBEAT = 0.1

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")
django.setup()

_store: list[SessionStore] = []  # the store the Django view follows runs in (one test at a time)


def flask_app(store: SessionStore) -> Flask:
    app = Flask(__name__)

    @app.get("/runs/<run_id>/events")
    def events(run_id: str) -> Any:
        try:
            return sse_response(flask_request, store=store, run_id=run_id, heartbeat=HEARTBEAT)
        except RunNotFoundError:
            abort(404)

    return app


def django_events(request: Any, run_id: str) -> Any:
    try:
        return sse_response(request, store=_store[-1], run_id=run_id, heartbeat=HEARTBEAT)
    except RunNotFoundError:
        raise Http404("no such run") from None


urlpatterns = [path("runs/<str:run_id>/events", django_events)]


def starlette_app(store: SessionStore) -> Starlette:
    async def events(request: Request) -> Any:
        try:
            return sse_response(request, store=store, run_id=request.path_params["run_id"],
                                heartbeat=HEARTBEAT)  # fmt: skip
        except RunNotFoundError:
            raise HTTPException(404) from None

    return Starlette(routes=[Route("/runs/{run_id}/events", events)])


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    with SqliteStore(tmp_path / "sessions.db") as opened:
        yield opened


@pytest.fixture
def serve(store: SessionStore) -> Iterator[Callable[[str], str]]:
    """``serve(framework)``: the follow view on that framework's real server; its base URL."""
    stops: list[Callable[[], None]] = []

    def start(framework: str) -> str:
        if framework in ("flask", "django"):
            if framework == "flask":
                server: Any = make_server("127.0.0.1", 0, flask_app(store), threaded=True)
            else:
                _store.append(store)
                overridden = override_settings(ROOT_URLCONF=__name__)
                overridden.enable()
                stops.append(overridden.disable)
                server = ThreadedWSGIServer(("127.0.0.1", 0), WSGIRequestHandler)
                server.set_app(WSGIHandler())
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
            thread.start()
            stops.append(lambda: (server.shutdown(), server.server_close(), thread.join(WAIT)))
            return f"http://127.0.0.1:{server.server_address[1]}"
        config = uvicorn.Config(starlette_app(store), host="127.0.0.1", port=0, log_level="warning")
        uv = uvicorn.Server(config)
        thread = threading.Thread(target=uv.run)
        thread.start()
        stops.append(lambda: (setattr(uv, "should_exit", True), thread.join(WAIT)))
        assert wait_until(lambda: uv.started, timeout=WAIT)
        return f"http://127.0.0.1:{uv.servers[0].sockets[0].getsockname()[1]}"

    yield start
    for stop in reversed(stops):
        stop()


FRAMEWORKS = ["flask", "django", "starlette"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_follower_resumes_after_last_event_id_and_gets_each_event_once(
    framework: str, serve: Callable[[str], str], store: SessionStore
) -> None:
    base = serve(framework)
    gate = Gate()
    agent = gated_agent(Session("chat", store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)
    got: list[int] = []
    with requests.get(f"{base}/runs/{run.id}/events", stream=True, timeout=WAIT) as first:
        for event_id, _name, _data in frames(first):
            got.append(int(event_id or 0))
            if len(got) == 5:
                break  # the connection drops here
    gate.open.set()
    headers = {"Last-Event-ID": str(got[-1])}
    with requests.get(f"{base}/runs/{run.id}/events", headers=headers, stream=True,
                      timeout=WAIT) as second:  # fmt: skip
        rest = list(frames(second))
    ids = got + [int(i) for i, _n, _d in rest if i is not None]
    last = runlog.run_info(store, run.id).last_seq
    assert ids == list(range(1, last + 1))
    assert [n for _i, n, _d in rest][-2:] == ["run_end", "done"]
    assert '"stop_reason": "stop"' in rest[-1][2]
    agent.close()


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_follower_that_leaves_stops_nothing_and_unknown_runs_are_404(
    framework: str, serve: Callable[[str], str], store: SessionStore
) -> None:
    base = serve(framework)
    assert requests.get(f"{base}/runs/nope/events", timeout=WAIT).status_code == 404
    gate = Gate()
    agent = gated_agent(Session("chat", store), gate)
    run = agent.start("go")
    with requests.get(f"{base}/runs/{run.id}/events", stream=True, timeout=WAIT) as r:
        next(frames(r))
    assert gate.started.wait(WAIT)
    assert not run.done()
    gate.open.set()
    assert run.wait(WAIT) and not gate.aborted.is_set()
    assert runlog.run_info(store, run.id).stop_reason == "stop"
    agent.close()


def test_the_start_form_of_a_session_agent_sends_ids_and_the_run_id(store: SessionStore) -> None:
    gate = Gate()
    gate.open.set()
    agent = gated_agent(Session("chat", store), gate)
    app = flask_app(store)

    @app.get("/start")
    def start() -> Any:
        return sse_response(flask_request, agent, "go", heartbeat=HEARTBEAT, run_info={"k": 1})

    body = app.test_client().get("/start").get_data(as_text=True)
    blocks = [b for b in body.split("\n\n") if b]
    assert blocks[0].startswith("event: run\n")
    assert '"run_id": "' in blocks[0] and '"k": 1' in blocks[0]
    ids = [int(line[4:]) for b in blocks for line in b.splitlines() if line.startswith("id: ")]
    assert ids == list(range(1, len(ids) + 1)) and len(ids) > 10
    assert blocks[-1].startswith("event: done\n") and '"stop_reason": "stop"' in blocks[-1]
    agent.close()
