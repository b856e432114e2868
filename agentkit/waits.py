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

import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

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
