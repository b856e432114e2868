"""Cancellation: one :class:`AbortController` per run, whose :class:`AbortSignal` every tool,
hook and provider receives. Built on ``threading.Event`` so any wait can be woken by an abort.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .errors import AbortError
from .waits import wait_event

ABORTED_TEXT = "Operation aborted"
"""The text an abort leaves: the ``error_message`` of an aborted run, the error result of a tool
call it stopped, the reason of an approval it refused, and the :class:`AbortError` of a signal
aborted without a reason. Code that must know whether something was aborted reads the stop
reason or the signal, never this text."""


class AbortSignal:
    """Tells its holders that a run was aborted, and wakes those waiting for it.

    Tools block on :meth:`wait` instead of ``time.sleep``; providers register a callback with
    :meth:`add_callback` that closes their HTTP response from the aborting thread.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: Any = None
        # Guards _callbacks and the hand-over between abort() and add_callback().
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    @property
    def aborted(self) -> bool:
        """Whether the run has been aborted."""
        return self._event.is_set()

    @property
    def reason(self) -> Any:
        """What was passed to ``abort()``, or ``"aborted"`` when nothing was; ``None`` until then."""
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` seconds pass; return whether it was aborted."""
        return wait_event(self._event, timeout)

    def throw_if_aborted(self) -> None:
        """Raise :class:`AbortError` if the run has been aborted."""
        if self._event.is_set():
            raise AbortError(self._reason_text())

    def add_callback(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Run ``fn()`` once on abort (at once if already aborted); return a function removing it.

        Callbacks run on the aborting thread; an exception in one does not stop the others.
        """
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)

                def remove() -> None:
                    with self._lock:
                        if fn in self._callbacks:
                            self._callbacks.remove(fn)

                return remove
        _call_quietly(fn)
        return _noop

    def _abort(self, reason: Any) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self._reason = "aborted" if reason is None else reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            _call_quietly(fn)

    def _reason_text(self) -> str:
        reason = self._reason
        if isinstance(reason, BaseException):
            return str(reason) or type(reason).__name__
        return ABORTED_TEXT if reason in (None, "aborted") else str(reason)

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted})"


class AbortController:
    """Owns an :class:`AbortSignal` and is the one place that can trigger it."""

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        """Abort the signal (idempotent, safe from any thread, never raises)."""
        self.signal._abort(reason)


@contextlib.contextmanager
def readable_on_abort(signal: AbortSignal | None) -> Iterator[int]:
    """A file descriptor that becomes readable when ``signal`` aborts (at once if it already
    has; never for ``None``), so that a ``select`` on files can wait for an abort too.

    It is the read end of a pipe, closed when the block ends; the aborting thread writes to it
    only while it is open."""
    read_fd, write_fd = os.pipe()
    lock = threading.Lock()
    is_open = [True]

    def wake() -> None:
        with lock:
            if is_open[0]:
                os.write(write_fd, b"!")

    remove = _noop if signal is None else signal.add_callback(wake)
    try:
        yield read_fd
    finally:
        remove()
        with lock:
            is_open[0] = False
            os.close(read_fd)
            os.close(write_fd)


def _call_quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # a broken callback must not stop an abort
        pass


def _noop() -> None:
    return None
