"""The WSGI app the gunicorn tests serve with several worker processes: a run started by one
request runs on that worker's thread; its events are followed, and it is aborted, by requests
any worker may serve. The store is ``$AGENTKIT_TEST_STORE``.

- ``POST /runs?session=S`` starts a run (a tool call, then an answer streamed in small deltas);
  it answers ``{"run_id", "pid"}``;
- ``GET /runs/<id>/events`` follows the run from its log, after ``Last-Event-ID``;
- ``POST /runs/<id>/abort`` aborts it.

Every answer says which worker process served it in ``X-Worker``.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, abort, jsonify, request

from agentkit import Agent, runlog, tool
from agentkit.errors import RunNotFoundError
from agentkit.sessions import Session, open_store
from agentkit.sse_response import sse_response
from agentkit.testing import ScriptedModel, reply, tool_call

app = Flask(__name__)
_store: list[Any] = []  # opened in each worker at its first request (after the fork)


def store() -> Any:
    if not _store:
        _store.append(open_store(os.environ["AGENTKIT_TEST_STORE"]))
    return _store[0]


@tool
def look_up(topic: str) -> str:
    """Look a topic up."""
    return f"{topic}: found"


@app.after_request
def worker(response: Any) -> Any:
    response.headers["X-Worker"] = str(os.getpid())
    return response


@app.post("/runs")
def start() -> Any:
    chunks = int(request.args.get("chunks", "30"))
    model = ScriptedModel(
        [reply("Looking.", tool_call("look_up", {"topic": "x"})), reply("y" * chunks, delay=0.002)],
        chunk_size=1,
    )
    agent = Agent(model=model.model, stream_fn=model, tools=[look_up],
                  session=Session(request.args["session"], store()))  # fmt: skip
    run = agent.start("go")
    return jsonify(run_id=run.id, pid=os.getpid())


@app.get("/runs/<run_id>/events")
def events(run_id: str) -> Any:
    try:
        return sse_response(request, store=store(), run_id=run_id, heartbeat=1.0)
    except RunNotFoundError:
        abort(404)


@app.post("/runs/<run_id>/abort")
def abort_run(run_id: str) -> Any:
    return jsonify(aborted=runlog.abort(store(), run_id))
