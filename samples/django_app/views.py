"""Two views: ``ask`` runs an agent and answers JSON; ``stream`` streams the run as SSE.

A Django (WSGI) worker thread simply blocks in ``agent.prompt()``; the agent runs on a worker
thread of its own and the view returns when it is done. The streaming view hands Django a
generator that relays the run's events and writes a heartbeat comment when the run is quiet
(a long tool, say): if the client goes away, a write fails, Django closes the generator, and
closing it aborts the run and waits for it to end. ``AGENTKIT_HEARTBEAT`` (seconds, default 1)
sets how quickly a client that left is noticed.
"""

from __future__ import annotations

import json
import queue
import re
from collections.abc import Iterator
from typing import Any

from _support import last_text, model_spec, real_model, rule_model
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.http import require_GET, require_POST

from agentkit import Agent, tool
from agentkit.events import event_to_dict, to_jsonable
from agentkit.testing import SCRIPTED_MODEL, Reply, reply, tool_call

ORDERS = {42: "shipped on Monday, arriving Thursday", 7: "waiting for payment"}


@tool
def lookup_order(order_id: int) -> str:
    """Look up the status of an order.

    Args:
        order_id: The order number.
    """
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return ORDERS[order_id]


def demo_answer(messages: list[Any]) -> Reply | str:
    """The offline demo model: look up the order number in the question, then report."""
    last = messages[-1]
    if last.role == "tool_result":
        return f"Your order is {last_text([last])}."
    number = re.search(r"\d+", last_text([last]))
    if number is None:
        return "Which order number?"
    return reply("Checking.", tool_call("lookup_order", {"order_id": int(number.group())}))


def build_agent() -> Agent:
    """A fresh agent for one request, on the model the settings name."""
    stream_fn = getattr(settings, "AGENTKIT_STREAM_FN", None)
    model = getattr(settings, "AGENTKIT_MODEL_OBJECT", None)
    if stream_fn is None and model is None:
        spec = model_spec(getattr(settings, "AGENTKIT_MODEL", None))
        if spec:
            model, stream_fn = real_model(spec)
        else:
            stream_fn = rule_model(demo_answer, delay=0.01)
    return Agent(
        model=model or SCRIPTED_MODEL,
        stream_fn=stream_fn,
        system_prompt="You help customers track their orders.",
        tools=[lookup_order],
    )


def _prompt(request: HttpRequest) -> str:
    if request.method == "POST":
        try:
            body = json.loads(request.body or b"{}")
        except ValueError:
            body = {}
        return str(body.get("prompt", "")) if isinstance(body, dict) else ""
    return request.GET.get("prompt", "")


@require_POST
def ask(request: HttpRequest) -> HttpResponse:
    """Run the agent to the end; answer ``{"answer", "stop_reason", "messages"}``."""
    prompt = _prompt(request)
    if not prompt:
        return JsonResponse({"error": "prompt is required"}, status=400)
    with build_agent() as agent:  # closing it aborts nothing here: prompt() already returned
        new_messages = agent.prompt(prompt)
    last = new_messages[-1]
    return JsonResponse(
        {
            "answer": last_text([last]),
            "stop_reason": last.stop_reason,
            "messages": to_jsonable(new_messages),
        }
    )


def _payload(event: Any) -> dict[str, Any]:
    """An event as JSON-ready data, made on the agent's thread while the event is current."""
    if event.type == "message_update":  # just the delta, not the whole partial message
        update = event.assistant_message_event
        return {"type": event.type, "kind": update.type, "delta": getattr(update, "delta", "")}
    return dict(event_to_dict(event))


@require_GET
def stream(request: HttpRequest) -> HttpResponse:
    """Stream the run's events as server-sent events; ``done`` ends the stream."""
    prompt = _prompt(request)
    if not prompt:
        return JsonResponse({"error": "prompt is required"}, status=400)
    agent = build_agent()
    heartbeat = float(getattr(settings, "AGENTKIT_HEARTBEAT", 1.0))

    def events() -> Iterator[str]:
        items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        unsubscribe = agent.subscribe(lambda event: items.put(_payload(event)))
        run = agent.start(prompt)
        run.add_done_callback(lambda _run: items.put(None))
        finished = False
        try:
            while not finished:
                try:
                    item = items.get(timeout=heartbeat)
                except queue.Empty:
                    yield ": heartbeat\n\n"  # fails once the client is gone: Django closes us
                    continue
                if item is None:
                    finished = True
                else:
                    yield f"event: {item['type']}\ndata: {json.dumps(item)}\n\n"
        finally:  # the client left (GeneratorExit) before the end: abort the run and wait
            if not finished:
                run.abort()
            run.wait()
            unsubscribe()
        last = agent.state.messages[-1]
        stop_reason = "aborted" if run.signal.aborted else getattr(last, "stop_reason", None)
        yield f"event: done\ndata: {json.dumps({'stop_reason': stop_reason})}\n\n"

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    return response
