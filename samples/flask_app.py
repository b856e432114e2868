"""A Flask app that streams agent runs to the browser as server-sent events (SSE).

Run it: ``python samples/flask_app.py [--port 5000] [--model PROVIDER:MODEL_ID]`` and open
http://127.0.0.1:5000/. Endpoints:

- ``GET /runs/stream?prompt=...`` (``EventSource``) or ``POST /runs/stream`` with JSON
  ``{"prompt": ...}``: start a run and stream its events. The first SSE event, ``run``, carries
  the run's id; each agent event follows as ``event: <type>``; ``done`` ends the stream.
- ``POST /runs/<id>/steer`` with JSON ``{"message": ...}``: steer the running agent.
- ``POST /runs/<id>/abort``: abort it.
- ``GET /runs/<id>``: the run's status and transcript.

Each run gets an agent of its own on a worker thread; the request thread only relays its events,
through :func:`agentkit.sse_response.sse_response`. When the browser goes away, the next write
fails (a heartbeat comment is written every ``heartbeat`` seconds when nothing else is), the
server closes the response, and closing it aborts the run: nothing keeps running for a client
that left.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from _web import current_time, index_page, web_command_line, web_model
from flask import Flask, Response, abort, jsonify, request

from agentkit import Agent, AgentTool, Model
from agentkit.events import to_jsonable
from agentkit.loop import StreamFn
from agentkit.sse_response import sse_response


@dataclass
class RunEntry:
    """A run's id and the agent running it (one agent per run)."""

    id: str
    agent: Agent

    def done(self) -> bool:
        """Whether the run has ended."""
        return not self.agent.state.is_streaming


class RunRegistry:
    """The app's runs by id: running ones, and the last ``keep`` finished ones."""

    def __init__(self, keep: int = 100) -> None:
        self.keep = keep
        # Guards _runs: request threads add, look up and retire runs concurrently.
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, RunEntry] = OrderedDict()

    def add(self, entry: RunEntry) -> None:
        """Register a run; forget the oldest finished runs beyond ``keep``."""
        with self._lock:
            self._runs[entry.id] = entry
            finished = [key for key, e in self._runs.items() if e.done()]
            for key in finished[: max(0, len(finished) - self.keep)]:
                del self._runs[key]

    def get(self, run_id: str) -> RunEntry | None:
        """The run with this id, or ``None``."""
        with self._lock:
            return self._runs.get(run_id)


def create_app(
    stream_fn: StreamFn | None = None,
    model: Model | None = None,
    *,
    tools: Sequence[AgentTool] | None = None,
    system_prompt: str = "You are a helpful assistant. Use current_time for the time.",
    heartbeat: float = 1.0,
    keep_runs: int = 100,
) -> Flask:
    """Build the app. Given neither ``stream_fn`` nor ``model``, it runs the offline demo model,
    or the real model ``AGENTKIT_MODEL`` names; given only ``model``, the default stream function.
    ``heartbeat`` is how often (seconds) a quiet stream checks that its client is still there:
    a client that leaves while a tool is silent is noticed within about that time."""
    model, stream_fn = web_model(stream_fn, model)
    agent_tools = list(tools) if tools is not None else [current_time]
    runs = RunRegistry(keep_runs)
    app = Flask(__name__)
    app.extensions["agentkit_runs"] = runs

    @app.get("/")
    def index() -> str:
        return INDEX_HTML

    @app.route("/runs/stream", methods=["GET", "POST"])
    def stream_run() -> Response:
        data = request.get_json(silent=True) or {}
        prompt = data.get("prompt") or request.args.get("prompt", "")
        if not prompt:
            abort(400, "prompt is required")
        agent = Agent(
            model=model, stream_fn=stream_fn, tools=agent_tools, system_prompt=system_prompt
        )
        entry = RunEntry(uuid.uuid4().hex, agent)
        # A "run" event with the id, the run's events, heartbeats while it is quiet, "done";
        # the server closing the response (the client left) aborts the run.
        response: Response = sse_response(
            request, agent, prompt, heartbeat=heartbeat, run_info={"id": entry.id}
        )
        runs.add(entry)
        return response

    def _entry(run_id: str) -> RunEntry:
        entry = runs.get(run_id)
        if entry is None:
            abort(404, "no such run")
        return entry

    @app.post("/runs/<run_id>/steer")
    def steer(run_id: str) -> tuple[Response, int]:
        entry = _entry(run_id)
        message = (request.get_json(silent=True) or {}).get("message")
        if not message:
            abort(400, "message is required")
        if entry.done():
            return jsonify(error="the run has ended"), 409
        entry.agent.steer(message)
        return jsonify(steered=True), 202

    @app.post("/runs/<run_id>/abort")
    def abort_run(run_id: str) -> tuple[Response, int]:
        entry = _entry(run_id)
        entry.agent.abort()
        return jsonify(aborted=True), 202

    @app.get("/runs/<run_id>")
    def show(run_id: str) -> Response:
        entry = _entry(run_id)
        done = entry.done()
        messages = to_jsonable(entry.agent.state.messages) if done else []
        return jsonify(id=run_id, status="done" if done else "running", messages=messages)

    return app


INDEX_HTML = index_page(
    "agentkit + Flask",
    """document.getElementById("stop").onclick = () => {
  if (runId) fetch("/runs/" + runId + "/abort", {method: "POST"});
};
""",
)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the app with Flask's development server (one thread per request)."""
    port, model, stream_fn = web_command_line(argv, __doc__, default_port=5000)
    app = create_app(stream_fn, model)
    app.run(host="127.0.0.1", port=port, threaded=True)


if __name__ == "__main__":
    main()
