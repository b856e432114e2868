"""Thread-safe event streams: a producer pushes events from any thread, a consumer iterates.

Both layers use it: a provider's answer is an :class:`AssistantMessageEventStream`, and
``agent_loop`` hands back an :class:`EventStream` of agent events. Unlike the reference, a stream
never leaves its consumer hanging: if the producer fails, iteration and :meth:`EventStream.result`
re-raise the failure, and a stream ended without a result says so instead of blocking forever.

A producer either runs on a thread of its own (:meth:`EventStream.set_producer`) or, when the
consumer asked for it with :func:`consuming_here`, is a generator that the consumer's own reads
advance (:meth:`EventStream.set_pump`): no thread start and no cross-thread hand-off per event.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .errors import StreamEndedError
from .events import AssistantMessageEvent, DoneEvent, ErrorEvent
from .types import AssistantMessage
from .waits import WAKE, _Wake, get_item

E = TypeVar("E")
R = TypeVar("R")


class _End:
    """Queue token: no more events."""


PRODUCER_EXIT_TIMEOUT = 1.0
"""Seconds :meth:`EventStream.result` waits for a producer thread that has settled the stream
(a producer exits right after its terminal event, so this is only a bound)."""

_END = _End()

_here = threading.local()
"""``consuming``: whether this thread reads the stream a producer is about to make at once."""


@contextmanager
def consuming_here(here: bool = True) -> Iterator[None]:
    """Tell producers started inside the block that this thread reads their stream itself,
    at once and to its end, so they may produce on it (:meth:`EventStream.set_pump`).

    The agent loop wraps its ``stream_fn`` call in it. A producer that cannot be advanced step
    by step (or whose caller did not ask) keeps its own thread. ``here=False`` takes it back
    inside the block: a stream-function wrapper that reads the stream while it waits for
    something else too (a guardrail's verdict) needs the producer on its own thread.
    """
    before = getattr(_here, "consuming", False)
    _here.consuming = here
    try:
        yield
    finally:
        _here.consuming = before


def consumed_here() -> bool:
    """Whether the current thread is inside :func:`consuming_here`."""
    return bool(getattr(_here, "consuming", False))


def _drain(steps: Iterator[object]) -> None:
    for _ in steps:
        pass


class EventStream(Generic[E, R]):
    """An iterable, thread-safe queue of events with a result.

    ``is_complete(event)`` marks the event that completes the stream (it is still delivered),
    and ``extract_result(event)`` turns it into the result. ``push`` after completion is
    ignored; the first result wins.
    """

    def __init__(
        self,
        is_complete: Callable[[E], bool] | None = None,
        extract_result: Callable[[E], R] | None = None,
    ) -> None:
        self._is_complete = is_complete
        self._extract_result = extract_result
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Guards _done, _has_result, _result and _error; _settled is set once they are final.
        self._lock = threading.Lock()
        self._settled = threading.Event()
        self._done = False
        self._has_result = False
        self._result: Any = None
        self._error: BaseException | None = None
        self._producer: threading.Thread | None = None
        self._pump: Iterator[object] | None = None

    # --- producer side ---------------------------------------------------------------------

    def push(self, event: E) -> None:
        """Deliver ``event``; if it completes the stream, settle the result and stop."""
        completes = self._is_complete is not None and self._is_complete(event)
        with self._lock:
            if self._done:
                return
            self._queue.put(event)
            if not completes:
                return
            self._done = True
            if not self._has_result and self._extract_result is not None:
                self._has_result = True
                self._result = self._extract_result(event)
        self._queue.put(_END)
        self._settled.set()

    def end(self, result: Any = _END) -> None:
        """Stop iteration; settle the result with ``result`` if one is given and none was yet."""
        with self._lock:
            if result is not _END and not self._has_result:
                self._has_result = True
                self._result = result
            if self._done:
                return
            self._done = True
        self._queue.put(_END)
        self._settled.set()

    def fail(self, error: BaseException) -> None:
        """End the stream with ``error``: the consumer's iteration and ``result()`` raise it."""
        with self._lock:
            if self._done:
                return
            self._done = True
            self._error = error
        self._queue.put(_END)
        self._settled.set()

    def set_producer(self, thread: threading.Thread) -> None:
        """Name the thread that feeds this stream; :meth:`result` waits for it to exit, so no
        producer thread outlives the consumer's use of the stream."""
        self._producer = thread

    def start_producer(self, steps: Iterator[object], name: str) -> None:
        """Produce with ``steps`` (see :meth:`set_pump`): on the consumer's own thread when it
        asked with :func:`consuming_here`, else on a daemon thread called ``name``."""
        if consumed_here():
            self.set_pump(steps)
            return
        thread = threading.Thread(target=_drain, args=(steps,), name=name, daemon=True)
        self.set_producer(thread)  # result() returns once the thread is gone
        thread.start()

    def set_pump(self, steps: Iterator[object]) -> None:
        """Produce on the consumer's thread: each step of ``steps`` does a bounded piece of work
        (one read) and pushes what it made. :meth:`get`, iteration and :meth:`result` advance
        it while they have nothing to return; :meth:`close` closes it. Meant for one consumer,
        the thread that asked for it with :func:`consuming_here`.

        ``steps`` must end the stream before it is exhausted, and every blocking wait in it must
        be woken by its own abort signal (the consumer has no other way out of a step)."""
        self._pump = steps

    def close(self) -> None:
        """The consumer is done with the stream: close a pump still running (its ``finally``
        blocks run, giving back what it holds). A producer thread is left to end on its own."""
        pump, self._pump = self._pump, None
        close = getattr(pump, "close", None)
        if close is not None:
            close()

    def _step(self) -> None:
        """Advance the pump once; drop it when it is exhausted (or raised)."""
        pump = self._pump
        if pump is None:
            return
        try:
            next(pump)
        except StopIteration:
            self._pump = None
        except BaseException:
            self._pump = None
            raise

    # --- consumer side ---------------------------------------------------------------------

    def wake(self) -> None:
        """Make a consumer blocked in :meth:`get` return :data:`WAKE` (safe from any thread)."""
        self._queue.put(WAKE)

    def get(self, timeout: float | None = None) -> E | _Wake | None:
        """The next event, :data:`WAKE` after :meth:`wake`, or ``None`` once the stream ended.

        Raises ``queue.Empty`` after ``timeout`` seconds without anything to return. With a
        pump, the pump is advanced first while nothing is queued (a step is not cut short by
        ``timeout``; it ends when its read does, or when its signal aborts).
        """
        while self._pump is not None and self._queue.empty():
            self._step()
        item = get_item(lambda wait: self._queue.get(timeout=wait), timeout)
        if item is _END:
            self._queue.put(_END)  # stay ended for every later call
            if self._error is not None:
                raise self._error
            return None
        return item

    def __iter__(self) -> Iterator[E]:
        while True:
            item = self.get()
            if item is None:
                return
            if item is WAKE:
                continue
            yield item  # type: ignore[misc]

    def _wait_for_producer(self) -> bool:
        """Whether :meth:`result` should wait for the producer thread to exit."""
        return True

    def done(self) -> bool:
        """Whether the stream has ended (its events may still be waiting to be read)."""
        return self._settled.is_set()

    def result(self, timeout: float | None = None) -> R:
        """Block until the stream settles and return its result, or raise why it has none.

        A pump is run to its end first, as a producer thread is waited for."""
        while self._pump is not None:
            self._step()
        if not self._settled.wait(timeout):
            raise TimeoutError("the stream did not end in time")
        producer = self._producer
        if (
            producer is not None
            and producer is not threading.current_thread()
            and self._wait_for_producer()
        ):
            producer.join(PRODUCER_EXIT_TIMEOUT)
        if self._error is not None:
            raise self._error
        if not self._has_result:
            raise StreamEndedError("Stream ended without a result")
        return self._result


def _assistant_complete(event: AssistantMessageEvent) -> bool:
    return isinstance(event, (DoneEvent, ErrorEvent))


def _assistant_result(event: AssistantMessageEvent) -> AssistantMessage:
    if isinstance(event, DoneEvent):
        return event.message
    assert isinstance(event, ErrorEvent)
    return event.error


class AssistantMessageEventStream(EventStream[AssistantMessageEvent, AssistantMessage]):
    """A provider's streamed answer; a ``done`` or ``error`` event completes it."""

    def __init__(self) -> None:
        super().__init__(_assistant_complete, _assistant_result)

    def _wait_for_producer(self) -> bool:
        # An aborted request may leave its thread in a connect() that nothing can interrupt;
        # the abort must not wait for it.
        result = self._result
        return not (isinstance(result, AssistantMessage) and result.stop_reason == "aborted")

    def result(self, timeout: float | None = None) -> AssistantMessage:
        """The final message; raises if the stream ended without ``done`` or ``error``."""
        try:
            return super().result(timeout)
        except StreamEndedError:
            raise StreamEndedError("Stream ended without a done or error event") from None
