"""Two views: ``ask`` runs an agent and answers JSON; ``stream`` streams the run as SSE.

A Django (WSGI) worker thread simply blocks in ``agent.prompt()``; the agent runs on a worker
thread of its own and the view returns when it is done. The streaming view returns
:func:`agentkit.sse_response.sse_response`, which relays the run's events and writes a heartbeat
comment when the run is quiet (a long tool, say): if the client goes away, a write fails, Django
closes the response, and closing it aborts the run and waits for it to end.
``AGENTKIT_HEARTBEAT`` (seconds, default 1) sets how quickly a client that left is noticed.
"""

from __future__ import annotations

import json
import re
from typing import Any

from _support import last_text, model_spec, real_model, rule_model
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from agentkit import Agent, tool
from agentkit.events import to_jsonable
from agentkit.sse_response import sse_response
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


@require_GET
def stream(request: HttpRequest) -> HttpResponse:
    """Stream the run's events as server-sent events; ``done`` ends the stream."""
    prompt = _prompt(request)
    if not prompt:
        return JsonResponse({"error": "prompt is required"}, status=400)
    heartbeat = float(getattr(settings, "AGENTKIT_HEARTBEAT", 1.0))
    response: HttpResponse = sse_response(request, build_agent(), prompt, heartbeat=heartbeat)
    return response
