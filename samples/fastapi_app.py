"""A FastAPI app that streams agent runs as server-sent events (SSE), on asyncio.

Run it: ``python samples/fastapi_app.py [--port 8000] [--model PROVIDER:MODEL_ID]`` (needs
``pip install 'agentkit[samples]'`` for FastAPI and uvicorn). Endpoints:

- ``GET /runs/stream?prompt=...`` (``EventSource``) or ``POST /runs/stream`` with JSON
  ``{"prompt": ...}``: start a run and stream its events. The first SSE event, ``run``, carries
  the run's id; each agent event follows as ``event: <type>``; ``done`` ends the stream.
- ``POST /ask`` with JSON ``{"prompt": ...}``: run and answer ``{"answer": ...}`` in one go.
- ``GET /runs/<id>``: the run's status and transcript.

The endpoints are ``async``: :func:`agentkit.sse_response.sse_response` and ``await
agent.aprompt()`` relay a run that goes on on the agent's own worker thread, so the event loop
keeps serving other requests. A client that goes away aborts its run: the SSE response watches
for the disconnect (and writes heartbeats while the run is quiet); ``/ask`` awaits its run
beside the disconnect, since uvicorn does not cancel a plain endpoint whose client left.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from _support import last_text
from _web import current_time, index_page, web_command_line, web_model
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from agentkit import Agent, AgentTool, Model
from agentkit.events import to_jsonable
from agentkit.loop import StreamFn
from agentkit.sse_response import sse_response

T = TypeVar("T")


async def unless_client_leaves(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` (``agent.aprompt(...)``), cancelling it, which aborts the run, if the
    client disconnects first. uvicorn does not cancel a plain endpoint whose client left, so
    without this a run would go on to its end for nobody."""
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    finally:
        watcher.cancel()


def create_app(
    stream_fn: StreamFn | None = None,
    model: Model | None = None,
    *,
    tools: Sequence[AgentTool] | None = None,
    system_prompt: str = "You are a helpful assistant. Use current_time for the time.",
    heartbeat: float = 15.0,
    keep_runs: int = 100,
) -> FastAPI:
    """Build the app. Given neither ``stream_fn`` nor ``model``, it runs the offline demo model,
    or the real model ``AGENTKIT_MODEL`` names. ``app.state.runs`` maps run ids to their
    agents (the last ``keep_runs``). ``heartbeat``: seconds between the comments a quiet
    stream writes (for proxies that cut idle connections, and servers that only notice a
    client that left when a write fails)."""
    model, stream_fn = web_model(stream_fn, model)
    agent_tools = list(tools) if tools is not None else [current_time]
    app = FastAPI(title="agentkit + FastAPI")
    runs: OrderedDict[str, Agent] = OrderedDict()  # touched on the event loop only
    app.state.runs = runs

    def new_agent() -> tuple[str, Agent]:
        run_id = uuid.uuid4().hex
        agent = Agent(
            model=model, stream_fn=stream_fn, tools=agent_tools, system_prompt=system_prompt
        )
        runs[run_id] = agent
        while len(runs) > keep_runs:
            runs.popitem(last=False)
        return run_id, agent

    async def prompt_of(request: Request) -> str:
        prompt = request.query_params.get("prompt", "")
        if request.method == "POST":
            try:
                prompt = (await request.json()).get("prompt", "") or prompt
            except ValueError:
                pass
        if not prompt:
            raise HTTPException(400, "prompt is required")
        return str(prompt)

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return INDEX_HTML

    @app.api_route("/runs/stream", methods=["GET", "POST"])
    async def stream_run(request: Request) -> StreamingResponse:
        prompt = await prompt_of(request)
        run_id, agent = new_agent()
        # A "run" event with the id, the run's events, heartbeats while it is quiet, "done";
        # a client that leaves aborts the run.
        response: StreamingResponse = sse_response(
            request, agent, prompt, heartbeat=heartbeat, run_info={"id": run_id}
        )
        return response

    @app.post("/ask")
    async def ask(request: Request) -> dict[str, Any]:
        prompt = await prompt_of(request)
        run_id, agent = new_agent()
        messages = await unless_client_leaves(request, agent.aprompt(prompt))
        return {"id": run_id, "answer": last_text(messages)}

    @app.get("/runs/{run_id}")
    async def show(run_id: str) -> dict[str, Any]:
        agent = runs.get(run_id)
        if agent is None:
            raise HTTPException(404, "no such run")
        done = not agent.state.is_streaming
        messages = to_jsonable(agent.state.messages) if done else []
        return {"id": run_id, "status": "done" if done else "running", "messages": messages}

    return app


INDEX_HTML = index_page(
    "agentkit + FastAPI",
    """// Closing the stream is how a client stops a run: the server aborts it.
document.getElementById("stop").onclick = () => { if (source) source.close(); };
""",
)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the app with uvicorn on 127.0.0.1."""
    import uvicorn

    port, model, stream_fn = web_command_line(argv, __doc__, default_port=8000)
    app = create_app(stream_fn, model)
    uvicorn.run(app, host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
