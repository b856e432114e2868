"""Runs that any worker process follows and aborts: Django under gunicorn with three workers.

``POST /runs`` starts a run on a thread of the worker process that took the request and answers
at once with its id. Every other request may land on another worker: ``GET /runs/<id>/events``
streams the run's events from the session store's run log (a reconnecting ``EventSource`` sends
``Last-Event-ID`` and gets the rest, once, in order), ``POST /runs/<id>/abort`` and ``.../steer``
reach the run through the store, and ``GET /runs/<id>`` says how it stands. Each answer names
the worker process that served it (``X-Worker``), so you can watch the requests move.

    cd samples && gunicorn -c django_runs/gunicorn.conf.py     # then open http://127.0.0.1:8000
"""

from __future__ import annotations

import json
import os
import re
import threading
from typing import Any

from _support import last_text, model_spec, real_model, rule_model
from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from agentkit import Agent, runlog, tool
from agentkit.abort import AbortSignal
from agentkit.errors import RunNotFoundError
from agentkit.sessions import Session, SessionStore, open_store
from agentkit.sse_response import sse_response
from agentkit.testing import SCRIPTED_MODEL, Reply, reply, tool_call

# Guards _store and _agents: each worker process opens the store once, after gunicorn forked it.
_lock = threading.Lock()
_store: list[SessionStore] = []
_agents: dict[str, Agent] = {}  # the runs going on in this process, by id, until they end


def store() -> SessionStore:
    with _lock:
        if not _store:
            _store.append(open_store(settings.AGENTKIT_SESSIONS))
        return _store[0]


@tool
def research(topic: str, signal: AbortSignal) -> str:
    """Research a topic (takes a few seconds).

    Args:
        topic: What to research.
    """
    if signal.wait(float(os.environ.get("AGENTKIT_RESEARCH_SECONDS", "3"))):
        return "stopped"
    return f"{topic}: three sources agree it is worth it."


def demo_answer(messages: list[Any]) -> Reply | str:
    """The offline demo model: research the topic asked about, then report."""
    last = messages[-1]
    if last.role == "tool_result":
        return f"Here is what I found. {last_text([last])}"
    topic = re.sub(r"\s+", " ", last_text([last])).strip() or "agents"
    return reply("Let me research that.", tool_call("research", {"topic": topic}))


def build_agent(session: Session) -> Agent:
    spec = model_spec()
    model, stream_fn = real_model(spec) if spec else (SCRIPTED_MODEL,
                                                       rule_model(demo_answer, delay=0.02))
    return Agent(model=model, stream_fn=stream_fn, tools=[research], session=session,
                 system_prompt="You research what you are asked about.")  # fmt: skip


def answer(data: dict[str, Any], status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status)
    response["X-Worker"] = str(os.getpid())
    return response


@require_POST
def start(request: HttpRequest) -> HttpResponse:
    """Start a run: ``{"session", "prompt"}``; answer ``{"run_id", "worker"}`` at once."""
    try:
        body = json.loads(request.body or b"{}")
        session = Session(str(body.get("session") or "demo"), store())
    except ValueError as exc:
        return answer({"error": str(exc)}, 400)
    agent = build_agent(session)
    run = agent.start(str(body.get("prompt") or "agents"))
    with _lock:
        _agents[run.id] = agent

    def ended(_run: Any) -> None:
        with _lock:
            _agents.pop(run.id, None)

    run.add_done_callback(ended)
    return answer({"run_id": run.id, "worker": os.getpid()})


@require_GET
def events(request: HttpRequest, run_id: str) -> HttpResponse:
    """The run's events as server-sent events, after ``Last-Event-ID``."""
    try:
        response: HttpResponse = sse_response(request, store=store(), run_id=run_id,
                                              heartbeat=5.0)  # fmt: skip
    except RunNotFoundError:
        raise Http404("no such run") from None
    response["X-Worker"] = str(os.getpid())
    return response


@require_GET
def show(request: HttpRequest, run_id: str) -> HttpResponse:
    """How the run stands: live, or how it ended."""
    try:
        info = runlog.run_info(store(), run_id)
    except RunNotFoundError:
        raise Http404("no such run") from None
    return answer({"run_id": run_id, "session": info.session, "live": info.live,
                   "stop_reason": info.stop_reason, "events": info.last_seq})  # fmt: skip


@require_POST
def abort(request: HttpRequest, run_id: str) -> HttpResponse:
    """Abort the run, whichever process runs it."""
    try:
        return answer({"aborted": runlog.abort(store(), run_id)})
    except RunNotFoundError:
        raise Http404("no such run") from None


@require_POST
def steer(request: HttpRequest, run_id: str) -> HttpResponse:
    """Give the run a message after its current tool batch: ``{"text"}``."""
    text = str(json.loads(request.body or b"{}").get("text") or "")
    try:
        return answer({"steered": runlog.steer(store(), run_id, text)})
    except RunNotFoundError:
        raise Http404("no such run") from None


@require_GET
def page(request: HttpRequest) -> HttpResponse:
    """A page that starts a run, follows it and aborts it."""
    response = HttpResponse(PAGE)
    response["X-Worker"] = str(os.getpid())
    return response


PAGE = """<!doctype html>
<meta charset="utf-8"><title>Runs any worker follows</title>
<form id="ask"><input id="prompt" size="50" value="solar panels"> <button>Research</button>
<button type="button" id="abort">Abort</button></form>
<pre id="out"></pre>
<script>
let source = null, runId = null;
const out = document.getElementById("out");
function say(line) { out.textContent += line + "\\n"; }
document.getElementById("ask").onsubmit = async (e) => {
  e.preventDefault();
  if (source) source.close();
  out.textContent = "";
  const r = await fetch("/runs", {method: "POST", body: JSON.stringify(
    {session: "demo-" + Date.now(), prompt: document.getElementById("prompt").value})});
  const started = await r.json();
  runId = started.run_id;
  say("run " + runId + " started by worker " + started.worker);
  source = new EventSource("/runs/" + runId + "/events");   // reconnects with Last-Event-ID
  source.onmessage = () => {};
  for (const kind of ["tool_execution_start", "tool_execution_end", "run_end"]) {
    source.addEventListener(kind, (ev) => say(ev.lastEventId + " " + kind + " " + ev.data));
  }
  source.addEventListener("done", () => { say("done"); source.close(); });
};
document.getElementById("abort").onclick = async () => {
  if (!runId) return;
  const r = await fetch("/runs/" + runId + "/abort", {method: "POST"});
  say("abort sent through worker " + r.headers.get("X-Worker") + ": " + await r.text());
};
</script>
"""
