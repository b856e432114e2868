"""A run of an :class:`~agentkit.Agent`: the :class:`Run` handle that :meth:`Agent.start`
returns, and :class:`AgentRunStream`, the events of one run as an iterator.

A run executes on a worker thread of its own; these objects are how any other thread waits for
it, aborts it, reads its result or iterates its events. They know nothing of the agent beyond
the callables it hands them.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ._log import agentkit_logger
from .abort import AbortController, AbortSignal
from .errors import AgentError
from .events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TextDeltaEvent,
    TurnEndEvent,
)
from .output import OutputSpec
from .results import RunResult, as_run_result
from .waits import get_item, wait_event

if TYPE_CHECKING:

    from .options import RunOptions

running_agent: ContextVar[Any] = ContextVar("agentkit_running_agent", default=None)
"""The :class:`~agentkit.Agent` whose run's worker thread, or one of whose tool calls, runs in
this context (``None`` elsewhere): how a sub-agent finds its parent (:mod:`agentkit.subagents`)."""

Listener = Callable[[AgentEvent], Any]
Subscribe = Callable[[Listener], Callable[[], None]]
"""``subscribe(listener) -> unsubscribe``: how a stream listens to its agent's events."""


class Run:
    """One run of an :class:`~agentkit.Agent`, returned by :meth:`~agentkit.Agent.start`."""

    def __init__(self, controller: AbortController) -> None:
        self.id: str = uuid.uuid4().hex
        """The run's id: how its run log (:mod:`agentkit.runlog`) names it, when its agent has
        a session."""
        self._controller = controller
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        # Guards _callbacks against add_done_callback racing the run's end, and the hand-over
        # between the worker beginning (_begun) and a starter that gives up first (_cancelled).
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Run], Any]] = []
        self._begun = False
        self._cancelled = False
        self._messages: RunResult = RunResult()
        self._error: BaseException | None = None
        self._settled: threading.Event | None = None
        """Set once the done callbacks ran, for a run held by a thread that lives on after it
        (:meth:`_host`), which a waiter cannot join."""
        self.options: RunOptions | None = None
        """The options the run goes by, its own over its agent's (a
        :class:`~agentkit.options.RunOptions`), once its body has begun (``None`` until then,
        and for a compaction)."""

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._controller.signal

    def abort(self) -> None:
        """Ask the run to stop; safe from any thread, does nothing once it is done."""
        self._controller.abort()

    def done(self) -> bool:
        """Whether the run has ended (listeners included)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends or ``timeout`` seconds pass; return whether it ended.

        Once the run has ended, the rest of ``timeout`` is spent letting its thread finish the
        done callbacks; a callback that takes longer does not hold the caller past ``timeout``.
        Raises :class:`AgentError` when called from the run's own thread (a listener or hook)
        before the run ended, since that wait could never end.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        thread = self._thread
        if thread is threading.current_thread() and not self._done.is_set():
            raise AgentError(
                "A run cannot wait for itself: this was called from the run's own thread "
                "(a listener or a hook)"
            )
        if not wait_event(self._done, timeout):
            return False
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._settled is not None:  # its thread goes on after the run: not joined
                self._settled.wait(remaining)
            else:
                thread.join(remaining)  # it only has its done callbacks left to run
        return True

    def result(self, timeout: float | None = None) -> RunResult:
        """The run's :class:`~agentkit.RunResult`: its new messages (a list) with its output,
        usage, stop reason and error; raises ``TimeoutError`` if it has not ended in time."""
        if not self.wait(timeout):
            raise TimeoutError("the run did not end in time")
        if self._error is not None:
            raise self._error
        return self._messages.copy_envelope(self._messages)

    def add_done_callback(self, fn: Callable[[Run], Any]) -> None:
        """Call ``fn(run)`` when the run ends (at once if it has); on the worker thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def _host(self) -> None:
        """The run is held by the calling thread, which lives on after it (a blocking call off
        the main thread, a sub-agent's tool call)."""
        self._thread = threading.current_thread()
        self._settled = threading.Event()

    def _begin(self) -> bool:
        """Called first on the worker thread: whether the run is still wanted."""
        with self._lock:
            self._begun = not self._cancelled
            return self._begun

    def _cancel_unbegun(self) -> bool:
        """Called by a starter that gives up: cancel the run if its worker has not begun."""
        with self._lock:
            if self._begun:
                return False
            self._cancelled = True
            self._thread = None  # it may never start; nothing to join
            return True

    def _settle(self, messages: list[Any], error: BaseException | None) -> None:
        self._messages, self._error = as_run_result(messages), error
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                agentkit_logger().exception("agentkit: a run's done callback raised")
        if self._settled is not None:
            self._settled.set()


    def _result_now(self) -> RunResult:
        """:meth:`result` of a run that has ended, without joining its thread (which may still
        be finishing its done callbacks): for an event loop, which must never wait on a
        thread."""
        assert self._done.is_set()
        if self._error is not None:
            raise self._error
        return self._messages.copy_envelope(self._messages)


# --- starting a worker thread without waiting for it ------------------------------------------
#
# ``Thread.start()`` returns only once the new thread is running, and under load (many threads
# wanting the GIL) that takes from a few to hundreds of milliseconds. A thread with nothing else
# to do may wait; an event loop may not. Inside :func:`starting_threads_elsewhere`, worker
# threads are handed to one process-wide starter thread that waits for them instead.

_elsewhere = threading.local()


def announce_failure(
    failure: Any, reduce: Callable[[AgentEvent], None], listeners: Sequence[Listener]
) -> None:
    """Announce a failed run's failure message with the events a run ends with (SPEC 5.5):
    ``reduce`` updates the agent's state, then each listener hears each event. A listener that
    raises again here is logged, not raised: the caller of ``prompt()`` never sees a
    listener's or a hook's exception."""
    events: list[AgentEvent] = [
        MessageStartEvent(failure),
        MessageEndEvent(failure),
        TurnEndEvent(failure, []),
        AgentEndEvent([failure]),
    ]
    for event in events:
        reduce(event)
        for listener in listeners:
            try:
                listener(event)
            except Exception:
                agentkit_logger().exception(
                    "agentkit: a listener raised while reporting a failed run"
                )


@contextmanager
def starting_threads_elsewhere() -> Iterator[None]:
    """Make :func:`start_worker` calls inside the block return at once, leaving the wait for
    the thread to come up to the starter thread (an event loop starting a run)."""
    before = getattr(_elsewhere, "active", False)
    _elsewhere.active = True
    try:
        yield
    finally:
        _elsewhere.active = before


_Start = tuple[threading.Thread, Callable[[BaseException], None]]


STARTER_IDLE = 2.0
"""Seconds the starter thread waits for more work before it ends (an idle process holds no
agentkit thread)."""


class _Starter:
    """The starter thread (``agentkit-starter``): starts the threads handed to it, in order,
    and reports a thread that could not start to its ``failed`` callback. It ends after
    :data:`STARTER_IDLE` seconds without work; the next hand-over starts it again (that one
    start is waited for: on a process that was idle, it is quick)."""

    def __init__(self) -> None:
        self.queue: queue.SimpleQueue[_Start] = queue.SimpleQueue()
        # Guards thread: whether a starter thread is serving the queue (set by a hand-over
        # that found none, cleared by the thread as it ends for want of work).
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    def hand_over(self, item: _Start) -> None:
        self.queue.put(item)
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._serve, name="agentkit-starter", daemon=True
                )
                self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                thread, failed = self.queue.get(timeout=STARTER_IDLE)
            except queue.Empty:
                with self.lock:
                    if self.queue.empty():  # a hand-over after this starts a new thread
                        self.thread = None
                        return
                continue
            try:
                thread.start()
            except BaseException as exc:  # noqa: BLE001 - "can't start new thread": the run fails
                failed(exc)
            del thread, failed


_starter = _Starter()


def _new_starter_in_child() -> None:
    # A forked child has no starter thread, only its parent's object: make a fresh one.
    global _starter
    _starter = _Starter()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_starter_in_child)


def start_worker(thread: threading.Thread, failed: Callable[[BaseException], None]) -> None:
    """Start a run's worker ``thread``: here, or, inside :func:`starting_threads_elsewhere`, on
    the starter thread (then ``failed(exc)`` is called there if it cannot start; here, the
    exception propagates)."""
    if getattr(_elsewhere, "active", False):
        _starter.hand_over((thread, failed))
    else:
        thread.start()


def caller_hosts_run() -> bool:
    """Whether a blocking call (``prompt()``, ``continue_()``) runs its run on the calling thread,
    which would otherwise only wait for a worker thread: on any thread but the main one.

    The main thread keeps a worker, since Ctrl-C arrives there as an exception at any instant and
    must abort the run rather than break it; other threads never receive one. A thread running an
    event loop keeps a worker too, so that the run's code never finds that loop running. So a web
    or task worker thread holds its run itself: one thread fewer per run (its memory, its start
    and its hand-over of the result), the same events, order and abort.
    """
    if threading.current_thread() is threading.main_thread():
        return False
    asyncio = sys.modules.get("asyncio")  # not imported: no loop can be running
    if asyncio is None:
        return True
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _wait_through_interrupts(run: Run) -> None:
    """Abort ``run`` and wait for it to end, even if more ``KeyboardInterrupt``s arrive: one
    that lands inside the abort itself (a second Ctrl-C right after the first) aborts again."""
    while True:
        try:
            run.abort()  # does nothing once the run has ended
            run.wait()
            return
        except KeyboardInterrupt:
            continue


class _StreamEnd:
    """Queue token: the run is over."""


class _WithPartial:
    """Queue item: a message update and the typed output's partial object at that moment."""

    __slots__ = ("event", "partial")

    def __init__(self, event: Any, partial: Any) -> None:
        self.event, self.partial = event, partial


class _PartialObjects:
    """A stream's listener with an ``output_type``: each text delta comes with the partial
    object of the reply's text so far (read from the deltas, in event order, since the
    streaming message itself may be further along by the time the event is yielded)."""

    def __init__(self, events: queue.SimpleQueue[Any], output: OutputSpec) -> None:
        self._events, self._output, self._text = events, output, ""

    def __call__(self, event: Any) -> None:
        if isinstance(event, MessageStartEvent):
            self._text = ""
        elif isinstance(event, MessageUpdateEvent) and isinstance(
            event.assistant_message_event, TextDeltaEvent
        ):
            self._text += event.assistant_message_event.delta
            self._events.put(_WithPartial(event, self._output.partial(self._text)))
            return
        self._events.put(event)


_STREAM_END = _StreamEnd()


class AgentRunStream:
    """The events of one run as an iterator; see :meth:`~agentkit.Agent.stream`.

    ``for event in stream`` iterates a generator that closes the stream when the loop is left
    in any way (``break`` included), so leaving early aborts the run and waits for it, with no
    reliance on this object being garbage collected.
    """

    def __init__(
        self,
        subscribe: Subscribe,
        launch: Callable[[Callable[[Run], None]], Run],
        output: OutputSpec | None = None,
    ) -> None:
        """Listen with ``subscribe``, then start the run with ``launch(bind)``, which hands the
        run to ``bind`` before its worker starts; with ``output``, partial objects are read."""
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._finished = False
        self._run: Run | None = None
        self._output = output
        self.partial_output: Any = None
        """With an ``output_type``: the object so far in the reply being streamed (not yet
        validated; a dict for a model type), updated as each event is yielded."""
        put: Listener = self._events.put
        if output is not None:  # the text is read when the event happens, not when yielded
            put = _PartialObjects(self._events, output)
        self._unsubscribe = subscribe(put)
        try:
            launch(self._bind)
        except BaseException:
            if self._run is not None and not self._run.done():
                self.close()  # interrupted after the run started: abort it and wait
            self._finished = True
            self._unsubscribe()
            raise

    def _bind(self, run: Run) -> None:
        """Take the run before its worker starts."""
        self._run = run
        # No reference back to self: dropping the stream must free it. The listener goes with
        # the run, so a stream dropped unfinished does not keep collecting the agent's events.
        events, unsubscribe = self._events, self._unsubscribe

        def ended(_run: Run) -> None:
            events.put(_STREAM_END)
            unsubscribe()

        run.add_done_callback(ended)

    @property
    def run(self) -> Run:
        """The run whose events this yields."""
        assert self._run is not None
        return self._run

    def __iter__(self) -> Iterator[AgentEvent]:
        try:
            while not self._finished:
                item = self._next_item()
                if item is _STREAM_END:
                    self._finish()
                    return
                yield cast(AgentEvent, self._track(item))
        finally:
            self.close()  # left early (break, an exception) or finished: either way, ended

    def __next__(self) -> AgentEvent:
        if self._finished:
            raise StopIteration
        item = self._next_item()
        if item is _STREAM_END:
            self._finish()
            raise StopIteration
        return cast(AgentEvent, self._track(item))

    def _track(self, item: Any) -> Any:
        """The event of a queue item; a partial object that came with it becomes
        :attr:`partial_output`."""
        if isinstance(item, _WithPartial):
            if item.partial is not None:
                self.partial_output = item.partial
            return item.event
        return item

    def _next_item(self) -> Any:
        try:
            return get_item(lambda timeout: self._events.get(timeout=timeout))
        except BaseException:
            self.close()
            raise

    def result(self) -> RunResult:
        """The run's :class:`~agentkit.RunResult` (waits for the run)."""
        return self.run.result()

    def close(self) -> None:
        """Abort the run if it is still going and wait for it to end."""
        if self._finished:
            return
        _wait_through_interrupts(self.run)
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        self._unsubscribe()
        self.run.wait()

    def __enter__(self) -> AgentRunStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A stream dropped before its end aborts its run, but does not wait for it: a
        # finalizer runs on whatever thread drops the last reference (the run's own, or a
        # thread holding a lock the run needs), where waiting could block or deadlock. The
        # run winds down on its worker; wait for it with agent.wait_for_idle(). Leaving a
        # ``for`` loop or a ``with`` block early closes the stream and does wait.
        run = getattr(self, "_run", None)
        if run is not None and not getattr(self, "_finished", True):
            run.abort()
