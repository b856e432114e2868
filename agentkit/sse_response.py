"""A run as a server-sent-events (SSE) response, for Flask, Django and Starlette/FastAPI.

    from agentkit.sse_response import sse_response

    @app.get("/runs/stream")                     # Flask, Django or FastAPI alike
    def stream(request):
        return sse_response(request, Agent(...), request.args["prompt"])

Each agent event goes out as ``event: <type>`` with its JSON as ``data`` (a text update carries
only its ``delta``, not the whole message so far), and ``done`` ends the stream with the run's
``stop_reason``. The hard part is the client that leaves: a web server only notices that when a
write fails, and a run inside a long tool writes nothing. So while the run is quiet a heartbeat
comment (``: heartbeat``) is written every ``heartbeat`` seconds; once the client has gone, the
server closes the response and closing it aborts the run and waits for it to end. On
Starlette/FastAPI the disconnect is also watched for directly (the ASGI ``http.disconnect``
message), and the run is relayed without blocking the event loop (:mod:`agentkit.aio`).

The framework is told by the request's class; none of them is imported unless it is the one
in use.
"""

from __future__ import annotations

import asyncio
import json
import queue
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .aio import _END, _abort_and_wait, start_relayed
from .events import event_to_dict
from .run import Run, _wait_through_interrupts
from .waits import get_item

if TYPE_CHECKING:
    from .agent import Agent
    from .types import ImageContent

__all__ = ["DEFAULT_HEARTBEAT", "event_payload", "sse_response"]

DEFAULT_HEARTBEAT = 15.0
"""Seconds of quiet between two heartbeat comments: at most how long a client that left goes
unnoticed while the run writes nothing."""

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering
_MEDIA_TYPE = "text/event-stream"
_HEARTBEAT = ": heartbeat\n\n"


def event_payload(event: Any) -> dict[str, Any]:
    """An agent event as the JSON an SSE client gets: a text update carries just its ``delta``
    (``{"type": "message_update", "kind": ..., "delta": ...}``), other events all their fields."""
    if event.type == "message_update":
        update = event.assistant_message_event
        return {"type": event.type, "kind": update.type, "delta": getattr(update, "delta", "")}
    return event_to_dict(event)


def sse_response(
    request: Any,
    agent: Agent,
    input: Any,
    images: Sequence[ImageContent] | None = None,
    *,
    heartbeat: float = DEFAULT_HEARTBEAT,
    run_info: Mapping[str, Any] | None = None,
    payload: Callable[[Any], Any] = event_payload,
    **run_options: Any,
) -> Any:
    """Start a run of ``agent`` on ``input`` and return the framework's streaming response of it.

    ``request`` is the view's request (a Flask/Werkzeug, Django or Starlette/FastAPI request);
    the response is of the same framework. ``run_options`` are :meth:`~agentkit.Agent.prompt`'s.
    ``run_info`` (an id, say) is sent first as a ``run`` event and added to ``done``.
    ``payload(event)`` makes each event's JSON, on the agent's thread while the event is
    current. The run starts now, so a busy agent or a bad option raises here, in the view.
    """
    if heartbeat <= 0:
        raise ValueError("heartbeat must be a positive number of seconds")
    framework = _framework(request)
    info = dict(run_info or {})
    if framework == "starlette":
        from starlette.responses import StreamingResponse

        body = _async_body(request, agent, input, images, heartbeat, info, payload, run_options)
        return StreamingResponse(body, media_type=_MEDIA_TYPE, headers=_HEADERS)
    relay = _Relay(agent, input, images, heartbeat, info, payload, run_options)
    if framework == "flask":
        from flask import Response

        return Response(relay, mimetype=_MEDIA_TYPE, headers=_HEADERS)
    from django.http import StreamingHttpResponse  # type: ignore[import-untyped]

    response = StreamingHttpResponse(relay, content_type=_MEDIA_TYPE)
    for name, value in _HEADERS.items():
        response[name] = value
    return response


def _framework(request: Any) -> str:
    """``"flask"``, ``"django"`` or ``"starlette"``, from the modules of the request's class."""
    for cls in type(request).__mro__:
        package = cls.__module__.split(".", 1)[0]
        if package in ("flask", "werkzeug"):
            return "flask"
        if package == "django":
            return "django"
        if package in ("starlette", "fastapi"):
            return "starlette"
    raise TypeError(
        f"sse_response() takes a Flask, Django or Starlette/FastAPI request, not "
        f"{type(request).__module__}.{type(request).__qualname__}"
    )


def _sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _done(run: Run, info: dict[str, Any]) -> str:
    """The closing ``done`` event: ``aborted`` when an abort ended the run (also inside a tool
    batch, where the transcript ends with a tool result), else the result's stop reason."""
    if run.signal.aborted:
        reason = "aborted"
    else:
        try:
            reason = run._result_now().stop_reason
        except Exception:  # noqa: BLE001 - an internal failure: the run still ended
            reason = "error"
    return _sse("done", {**info, "stop_reason": reason})


class _Relay:
    """A WSGI response body: the run's events, heartbeats while it is quiet, then ``done``.

    The WSGI server calls :meth:`close` when the response ends, also when a write failed
    because the client left, and also when the body was never iterated: closing aborts a run
    that is still going and waits for it.
    """

    def __init__(
        self,
        agent: Agent,
        input: Any,
        images: Sequence[ImageContent] | None,
        heartbeat: float,
        info: dict[str, Any],
        payload: Callable[[Any], Any],
        run_options: dict[str, Any],
    ) -> None:
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        put = self._items.put
        self._unsubscribe = agent.subscribe(lambda event: put((event.type, payload(event))))
        try:
            self._run = agent.start(input, images, **run_options)
        except BaseException:
            self._unsubscribe()
            raise
        self._run.add_done_callback(lambda _run: put(_END))
        self._heartbeat = heartbeat
        self._info = info
        self._lines = self._generate()

    def __iter__(self) -> Iterator[str]:
        return self._lines

    def _generate(self) -> Generator[str, None, None]:
        if self._info:
            yield _sse("run", self._info)
        while True:
            try:
                item = get_item(lambda wait: self._items.get(timeout=wait), self._heartbeat)
            except queue.Empty:
                yield _HEARTBEAT  # the write that fails once the client is gone
                continue
            if item is _END:
                break
            yield _sse(*item)
        self._run.wait()
        yield _done(self._run, self._info)

    def close(self) -> None:
        """The response is over: abort the run if it still goes, and wait for its end."""
        self._lines.close()
        self._run.abort()  # does nothing once the run has ended
        _wait_through_interrupts(self._run)
        self._unsubscribe()


async def _async_body(
    request: Any,
    agent: Agent,
    input: Any,
    images: Sequence[ImageContent] | None,
    heartbeat: float,
    info: dict[str, Any],
    payload: Callable[[Any], Any],
    run_options: dict[str, Any],
) -> AsyncIterator[str]:
    """An ASGI response body: as :class:`_Relay`, relayed onto the event loop; the client's
    ``http.disconnect`` (or a cancelled response) aborts the run."""
    items: asyncio.Queue[Any] = asyncio.Queue()
    run, unsubscribe, finished = start_relayed(
        agent, items, lambda event: (event.type, payload(event)), input, images, run_options
    )

    async def abort_when_gone() -> None:
        # The run is aborted here, not by this body's clean-up: a server that stops iterating
        # a body suspended at a ``yield`` (Starlette on a disconnect) does not close it.
        await _disconnected(request)
        run.abort()

    gone = asyncio.ensure_future(abort_when_gone())
    next_item: asyncio.Future[Any] | None = None
    try:
        if info:
            yield _sse("run", info)
        while True:
            if next_item is None:
                next_item = asyncio.ensure_future(items.get())
            ready, _ = await asyncio.wait(
                {next_item, gone}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED
            )
            if gone in ready:
                return  # the client left: the run is aborted, the finally block waits for it
            if next_item not in ready:
                yield _HEARTBEAT
                continue
            item, next_item = next_item.result(), None
            if item is _END:
                break
            yield _sse(*item)
        await asyncio.shield(finished)
        yield _done(run, info)
    finally:
        gone.cancel()
        if next_item is not None:
            next_item.cancel()
        unsubscribe()
        if not finished.done():
            await _abort_and_wait(run, finished)


async def _disconnected(request: Any) -> None:
    """Return once the ASGI server says the client has gone (``http.disconnect``)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return
