"""The input check beside a request: the input guardrails that run ``beside`` check the new
user input on a thread of their own while the request goes out. The request's answer is held
(:class:`~agentkit.guardrails._gate.GatedStream`) until the verdict; a trip, a failure or a
redaction aborts the request at once (a redaction then re-sends it with the redacted input).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..abort import ABORTED_TEXT, AbortController, AbortSignal
from ..errors import AbortError, GuardrailError
from ..waits import wait_event
from ._apply import Redaction, Stop, apply
from .base import Check, Guardrail

JOIN_GRACE = 2.0
"""Seconds a run waits for an input check that was told to stop (aborted); a check that
ignores its signal longer is left behind, as a tool that ignores its abort is."""


@dataclass
class InputText:
    """One text block of a user message the check reads: the message, the block's index in
    its content (``None``: the content is a string) and the text (redacted as it goes)."""

    message: Any
    block: int | None
    text: str
    changed: bool = False


class InputCheck:
    """One run of the ``beside`` input guardrails over ``texts``, on a thread named
    ``agentkit-guardrail-input``, under a child of ``parent`` (the run's signal). When it ends
    otherwise than passing, ``stop_request`` aborts the request beside it. :attr:`done` is set
    once the verdict is in; the gate's wakers are called then."""

    def __init__(
        self,
        guardrails: Sequence[Guardrail],
        texts: list[InputText],
        check_for: Callable[[Guardrail, AbortSignal], Check],
        parent: AbortSignal,
        stop_request: Callable[[], None],
    ) -> None:
        self.guardrails = list(guardrails)
        self.texts = texts
        self.check_for = check_for
        self.stop_request = stop_request
        self.controller = AbortController()
        self._unlink = parent.add_callback(lambda: self.controller.abort(parent.reason))
        self.done = threading.Event()
        self._ended_or_aborted = threading.Event()  # what finish() waits for
        self._unwake = self.controller.signal.add_callback(self._ended_or_aborted.set)
        self.stop: Stop | None = None
        self.stopped_at = 0  # the index in ``texts`` of the text that stopped the check
        self.aborted = False
        self.redactions: list[Redaction] = []
        # Guards _wakers and the hand-over between add_waker() and the verdict.
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []
        self._thread = threading.Thread(
            target=self._run, name="agentkit-guardrail-input", daemon=True
        )

    @property
    def passed(self) -> bool:
        """The verdict is in, and the request may stand as it was sent."""
        return self.done.is_set() and not (self.stop or self.aborted or self.redactions)

    @property
    def message(self) -> str:
        """Why the request beside the check was stopped."""
        if self.stop is not None:
            return self.stop.message
        if self.redactions:
            return "The input was redacted by a guardrail: the request is sent again"
        return ABORTED_TEXT

    def start(self) -> None:
        """Start checking (right before the request goes out)."""
        self._thread.start()

    def add_waker(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` once the verdict is in (at once if it is)."""
        with self._lock:
            if not self.done.is_set():
                self._wakers.append(wake)
                return
        wake()

    def _run(self) -> None:
        try:
            self._check_all()
        except AbortError:
            self.aborted = True
        except BaseException as exc:  # noqa: BLE001 - recorded, never lost on this thread
            self.stop = Stop("input check", "input", "error", f"{type(exc).__name__}: {exc}")
            self.stop.error = GuardrailError(self.stop.message)
        finally:
            with self._lock:
                self.done.set()
                wakers, self._wakers = self._wakers, []
            self._ended_or_aborted.set()
            for wake in wakers:
                wake()
            if not self.passed:
                self.stop_request()

    def _check_all(self) -> None:
        signal = self.controller.signal
        for index, item in enumerate(self.texts):
            applied = apply(self.guardrails, item.text, lambda g: self.check_for(g, signal))
            if applied.redactions:
                item.text, item.changed = applied.text, True
                self.redactions += applied.redactions
            if applied.stop is not None:
                self.stop, self.stopped_at = applied.stop, index
                return

    def finish(self, stop: bool) -> None:
        """The request is over. ``stop``: it failed, and the check is moot: abort it if it
        still runs. Otherwise wait for the verdict (a run's abort ends the wait: it aborts the
        check too). A check told to stop has :data:`JOIN_GRACE` seconds to end; its thread is
        then waited for as long."""
        if stop and not self.done.is_set():
            self.controller.abort(AbortError("the request the input check ran beside ended"))
        wait_event(self._ended_or_aborted)
        ends = time.monotonic() + JOIN_GRACE
        wait_event(self.done, JOIN_GRACE)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(max(ends - time.monotonic(), 0.0))
        self._unlink()
        self._unwake()
