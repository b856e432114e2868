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

**Resuming.** A run whose agent has a session is relayed from its run log
(:mod:`agentkit.runlog`): each event goes out with its sequence number as its ``id:``, and the
first ``run`` event carries the ``run_id``. Any process then follows that run from where a
client was with the second form, which starts nothing::

    @app.get("/runs/<run_id>/events")              # any worker process
    def events(run_id):
        return sse_response(request, store=store, run_id=run_id)

It resumes after the request's ``Last-Event-ID`` header (what a browser's ``EventSource`` sends
when it reconnects), so a client that reconnects to another worker gets every event once, in
order; leaving it stops nothing.

The framework is told by the request's class; none of them is imported unless it is the one
in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import runlog
from .aio import _END, _abort_and_wait, start_relayed
from .errors import RunLogError, SessionError
from .events import event_to_dict
from .run import Run, _wait_through_interrupts
from .waits import get_item

if TYPE_CHECKING:
    from .agent import Agent
    from .sessions import SessionStore
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
    agent: Agent | None = None,
    input: Any = None,
    images: Sequence[ImageContent] | None = None,
    *,
    store: SessionStore | None = None,
    run_id: str | None = None,
    after: int | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT,
    run_info: Mapping[str, Any] | None = None,
    payload: Callable[[Any], Any] = event_payload,
    **run_options: Any,
) -> Any:
    """The framework's streaming response of a run, in one of two forms.

    ``sse_response(request, agent, input)`` starts a run of ``agent`` on ``input`` and relays
    it; the client leaving aborts it. ``run_options`` are :meth:`~agentkit.Agent.prompt`'s.
    ``run_info`` (an id, say) is sent first as a ``run`` event and added to ``done``;
    ``payload(event)`` makes each event's JSON, on the agent's thread, for a run that is not
    logged. The run starts now, so a busy agent or a bad option raises here, in the view.

    ``sse_response(request, store=store, run_id=run_id)`` follows a run from its log, after the
    request's ``Last-Event-ID`` (or ``after``); the client leaving stops nothing. An unknown
    run raises :class:`~agentkit.errors.RunNotFoundError` here (a 404), an ``after`` past the
    run's last event :class:`~agentkit.errors.RunLogError`.

    ``request`` is the view's request (a Flask/Werkzeug, Django or Starlette/FastAPI request);
    the response is of the same framework.
    """
    if heartbeat <= 0:
        raise ValueError("heartbeat must be a positive number of seconds")
    framework = _framework(request)
    info = dict(run_info or {})
    if agent is None:
        if store is None or run_id is None:
            raise TypeError("sse_response() takes an agent and an input, or store= and run_id=")
        start = _last_event_id(request) if after is None else after
        runlog.follow(store, run_id, start).close()  # an unknown run or a bad after: now
        if framework == "starlette":
            return _streaming(framework, _async_log_body(request, store, run_id, start,
                                                         heartbeat, info))  # fmt: skip
        return _streaming(framework, _LogRelay(store, run_id, start, heartbeat, info))
    if framework == "starlette":
        body = _async_body(request, agent, input, images, heartbeat, info, payload, run_options)
        return _streaming(framework, body)
    return _streaming(framework, _relay(agent, input, images, heartbeat, info, payload,
                                        run_options))  # fmt: skip


def _streaming(framework: str, body: Any) -> Any:
    """The framework's streaming response of ``body``."""
    if framework == "starlette":
        from starlette.responses import StreamingResponse

        return StreamingResponse(body, media_type=_MEDIA_TYPE, headers=_HEADERS)
    if framework == "flask":
        from flask import Response

        return Response(body, mimetype=_MEDIA_TYPE, headers=_HEADERS)
    from django.http import StreamingHttpResponse  # type: ignore[import-untyped]

    response = StreamingHttpResponse(body, content_type=_MEDIA_TYPE)
    for name, value in _HEADERS.items():
        response[name] = value
    return response


def _last_event_id(request: Any) -> int:
    """The sequence number in the request's ``Last-Event-ID`` header (0 without one)."""
    value = request.headers.get("Last-Event-ID")
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise RunLogError(f"Last-Event-ID {value!r} is not an event's sequence number") from None


def _logged_store(agent: Agent, run: Run) -> SessionStore | None:
    """The store whose run log ``run`` writes to, or ``None`` for a run that is not logged."""
    writer = getattr(agent, "_session_writer", None)
    if writer is None:
        return None
    store: SessionStore = writer.session.store
    try:
        runlog.run_info(store, run.id)
    except SessionError:  # a store that keeps no run log, or one that failed at the start
        return None
    return store


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


def _log_frame(event: runlog.RunEvent) -> str:
    """A logged event as a frame whose ``id:`` is its sequence number; a text update in the
    shape :func:`event_payload` gives it (``kind`` and ``delta``)."""
    data = event.data
    if event.type == "message_update":
        update = data.get("update") or {}
        data = {"type": event.type, "kind": update.get("type"), "delta": update.get("delta", ""),
                "seq": event.seq}  # fmt: skip
    return f"id: {event.seq}\n" + _sse(event.type, data)


def _relay(
    agent: Agent,
    input: Any,
    images: Sequence[ImageContent] | None,
    heartbeat: float,
    info: dict[str, Any],
    payload: Callable[[Any], Any],
    run_options: dict[str, Any],
) -> _Relay | _LogRelay:
    """Start the run and make the WSGI body that relays it: from its log when it has one."""
    items: queue.SimpleQueue[Any] = queue.SimpleQueue()
    unsubscribe = agent.subscribe(lambda event: items.put((event.type, payload(event))))
    try:
        run = agent.start(input, images, **run_options)
    except BaseException:
        unsubscribe()
        raise
    store = _logged_store(agent, run)
    if store is None:
        return _Relay(run, items, unsubscribe, heartbeat, info)
    unsubscribe()
    return _LogRelay(store, run.id, 0, heartbeat, {**info, "run_id": run.id}, run)


class _Relay:
    """A WSGI response body: the run's events, heartbeats while it is quiet, then ``done``.

    The WSGI server calls :meth:`close` when the response ends, also when a write failed
    because the client left, and also when the body was never iterated: closing aborts a run
    that is still going and waits for it.
    """

    def __init__(
        self,
        run: Run,
        items: queue.SimpleQueue[Any],
        unsubscribe: Callable[[], None],
        heartbeat: float,
        info: dict[str, Any],
    ) -> None:
        self._items, self._run, self._unsubscribe = items, run, unsubscribe
        run.add_done_callback(lambda _run: items.put(_END))
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
        _wait_through_interrupts(self._run)
        self._unsubscribe()


class _LogRelay:
    """A WSGI response body read from a run's log: its events after ``after``, each with its
    ``id:``, heartbeats while it is quiet, then ``done``. Closing it stops reading (within
    :data:`~agentkit.runlog.SLICE` seconds) and, for a run this response started (``run``),
    aborts the run and waits for it, as :class:`_Relay` does."""

    def __init__(self, store: SessionStore, run_id: str, after: int, heartbeat: float,
                 info: dict[str, Any], run: Run | None = None) -> None:  # fmt: skip
        self._stop = threading.Event()
        self._events = runlog.follow(store, run_id, after, keepalive=heartbeat, stop=self._stop)
        self._run, self._info = run, info
        self._lines = self._generate()

    def __iter__(self) -> Iterator[str]:
        return self._lines

    def _generate(self) -> Generator[str, None, None]:
        if self._info:
            yield _sse("run", self._info)
        stop_reason = None
        for event in self._events:
            if event is None:
                yield _HEARTBEAT  # the write that fails once the client is gone
                continue
            if event.type == "run_end":
                stop_reason = event.data.get("stop_reason")
            yield _log_frame(event)
        if self._run is not None:
            self._run.wait()
        yield _sse("done", {**self._info, "stop_reason": stop_reason})

    def close(self) -> None:
        """The response is over: stop reading; abort a run this response started."""
        self._stop.set()
        self._lines.close()
        self._events.close()
        if self._run is not None:
            _wait_through_interrupts(self._run)


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
    """An ASGI response body: the run started and relayed onto the event loop (from its log
    when it has one); the client's ``http.disconnect`` (or a cancelled response) aborts it."""
    items: asyncio.Queue[Any] = asyncio.Queue()
    run, unsubscribe, finished = start_relayed(
        agent, items, lambda event: (event.type, payload(event)), input, images, run_options
    )
    store = _logged_store(agent, run)
    body: AsyncIterator[str]
    if store is None:
        body = _async_relay(request, run, items, unsubscribe, finished, heartbeat, info)
    else:
        unsubscribe()
        body = _async_log_body(request, store, run.id, 0, heartbeat,
                               {**info, "run_id": run.id}, run, finished)  # fmt: skip
    async with contextlib.aclosing(body):  # type: ignore[type-var]
        async for line in body:
            yield line


async def _async_relay(
    request: Any,
    run: Run,
    items: asyncio.Queue[Any],
    unsubscribe: Callable[[], None],
    finished: asyncio.Future[None],
    heartbeat: float,
    info: dict[str, Any],
) -> AsyncIterator[str]:
    """The events of a run that is not logged, as :class:`_Relay` relays them."""

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


async def _async_log_body(
    request: Any,
    store: SessionStore,
    run_id: str,
    after: int,
    heartbeat: float,
    info: dict[str, Any],
    run: Run | None = None,
    finished: asyncio.Future[None] | None = None,
) -> AsyncIterator[str]:
    """An ASGI response body read from a run's log, as :class:`_LogRelay`; the client's
    ``http.disconnect`` ends it (and aborts a run this response started)."""
    events = runlog.aattach(store, run_id, after)
    gone = asyncio.ensure_future(_disconnected(request))
    next_event: asyncio.Future[Any] | None = None
    stop_reason = None
    try:
        if info:
            yield _sse("run", info)
        while True:
            if next_event is None:
                next_event = asyncio.ensure_future(events.__anext__())
            ready, _ = await asyncio.wait(
                {next_event, gone}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED
            )
            if gone in ready:
                return
            if next_event not in ready:
                yield _HEARTBEAT
                continue
            future, next_event = next_event, None
            try:
                event = future.result()
            except StopAsyncIteration:
                break
            if event.type == "run_end":
                stop_reason = event.data.get("stop_reason")
            yield _log_frame(event)
        if finished is not None:
            await asyncio.shield(finished)
        yield _sse("done", {**info, "stop_reason": stop_reason})
    finally:
        gone.cancel()
        if next_event is not None:
            next_event.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await next_event
        await events.aclose()  # type: ignore[attr-defined]
        if run is not None and finished is not None and not finished.done():
            await _abort_and_wait(run, finished)


async def _disconnected(request: Any) -> None:
    """Return once the ASGI server says the client has gone (``http.disconnect``)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return
