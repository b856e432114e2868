"""Blocking waits that Ctrl-C always ends on the main thread.

The operating system may deliver a SIGINT to any thread of the process, or to a child that a
tool is just starting (``subprocess`` forks and execs from the tool's thread). Python then only
raises a flag for the main thread, and a main thread blocked on a lock (``Event.wait``,
``Queue.get``) does not look at that flag until its wait ends: ``agent.prompt()`` would then
ignore the Ctrl-C until the run ended by itself. So on the main thread these waits block for at
most :data:`SLICE` seconds at a time, which is when Python raises the ``KeyboardInterrupt``;
other threads never receive ``KeyboardInterrupt`` and wait in one piece.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

class Signal(Protocol):
    """What these waits need of an abort signal (:class:`~agentkit.AbortSignal` is one): named
    by its shape, since the signal's own waits are these."""

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout``; whether it was aborted."""

    def add_callback(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call ``callback`` on abort; return what unregisters it."""


class _Wake:
    """Queue token: a waiting consumer should look up (see :meth:`EventStream.wake`)."""


WAKE = _Wake()
"""What a waker puts on a queue to make its blocked consumer look up: what
:meth:`~agentkit.event_stream.EventStream.get` returns after ``wake()``, and what a tool batch's
inbox carries after an abort."""

SLICE = 0.1
"""Longest single block of a main-thread wait (seconds): how late a Ctrl-C may be noticed."""


def _steps(timeout: float | None) -> Iterator[float]:
    """The lengths of the slices a main-thread wait of ``timeout`` seconds is made of; the last
    is 0 (a final look) when the time runs out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = SLICE if deadline is None else min(SLICE, deadline - time.monotonic())
        yield max(step, 0.0)
        if step <= 0:
            return


def wait_event(event: threading.Event, timeout: float | None = None) -> bool:
    """``event.wait(timeout)``, interruptible by Ctrl-C on the main thread (see the module)."""
    if threading.current_thread() is not threading.main_thread():
        return event.wait(timeout)
    return any(event.wait(step) for step in _steps(timeout))


def wait_condition(condition: threading.Condition, timeout: float | None = None) -> bool:
    """``condition.wait(timeout)`` (its lock held by the caller), interruptible by Ctrl-C on the
    main thread (see the module): returns ``False`` when the time ran out. Callers re-check their
    predicate in a loop, as with any condition."""
    if threading.current_thread() is not threading.main_thread():
        return condition.wait(timeout)
    return any(condition.wait(step) for step in _steps(timeout))


def pause(seconds: float, signal: Signal | None = None) -> bool:
    """Sleep ``seconds`` (a negative time is none), ended early by ``signal``'s abort; return
    whether the signal aborted it. Ctrl-C on the main thread ends it too."""
    seconds = max(seconds, 0.0)
    if signal is not None:
        return signal.wait(seconds)
    wait_event(threading.Event(), seconds)
    return False


def get_item(get: Callable[[float | None], T], timeout: float | None = None) -> T:
    """``get(timeout)`` of a queue (raising ``queue.Empty`` when the time is up),
    interruptible by Ctrl-C on the main thread (see the module)."""
    if threading.current_thread() is not threading.main_thread():
        return get(timeout)
    for step in _steps(timeout):
        try:
            return get(step)
        except queue.Empty:
            pass
    raise queue.Empty


class Deadline(Protocol):
    """What ends a run's waits early: a budget's deadline (:class:`~agentkit.budgets.BudgetTracker`
    is one). The run's waits (for the stream, a tool batch, an approval) end at :attr:`ends` and
    call :meth:`expire`, which aborts the run's signal; no thread watches the clock except while
    the run's own thread works instead of waiting (:meth:`expiring_meanwhile`)."""

    ends: float | None
    """When the run must end, in ``time.monotonic()`` seconds (``None``: no deadline)."""

    def wait_time(self, timeout: float | None) -> float | None:
        """``timeout`` cut to the time left before the deadline."""

    def expire(self) -> bool:
        """If the deadline has passed, abort the run (once); return whether it has."""

    @property
    def timed_out(self) -> bool:
        """Whether the deadline has aborted the run (its waits then take only what is here)."""

    def expiring_meanwhile(self) -> contextlib.AbstractContextManager[None]:
        """A stretch in which the run's thread works instead of waiting: the deadline is
        watched meanwhile."""


def wait_or_give_up(
    get: Callable[[float | None], Any],
    signal: Signal,
    wake: Callable[[], None],
    grace: float,
    deadline: Deadline | None = None,
    start: Callable[[], None] | None = None,
) -> Generator[Any, None, None]:
    """Yield what ``get(timeout)`` returns until the caller stops, or until ``grace`` seconds
    after an abort (then the iteration ends: the caller gives up on what it waited for).

    ``get`` raises ``queue.Empty`` on timeout and returns :data:`WAKE` when ``wake`` was called; ``wake`` runs when the signal
    aborts. The stream wait and the tool batch wait both use it. The wait also ends at the
    run's ``deadline``, which then aborts the signal. ``start()``, if given, runs once the wait
    is set up, right before the first ``get``: the threads it sets going (a batch's calls) then
    find this one about to block, not still busy.
    """
    remove_wake = signal.add_callback(wake)
    give_up_at: float | None = None
    try:
        if start is not None:
            start()
        while True:
            timeout = None if give_up_at is None else max(0.0, give_up_at - time.monotonic())
            if deadline is not None and give_up_at is None:
                timeout = deadline.wait_time(timeout)
            try:
                item = get(timeout)
            except queue.Empty:
                if give_up_at is None and deadline is not None and deadline.expire():
                    continue  # the abort wakes this wait and starts the grace period
                return
            if item is WAKE:
                if give_up_at is None:  # after the run's deadline, only what is already here
                    timed_out = deadline is not None and deadline.timed_out
                    give_up_at = time.monotonic() + (0.0 if timed_out else grace)
                continue
            yield item
    finally:
        remove_wake()
