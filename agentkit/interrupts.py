"""The interrupt lane: stop what a run is doing now and hear the user's message next.

``agent.interrupt(message)`` sits between ``steer()`` (heard after the tool batch, which may take
minutes) and ``abort()`` (the run ends). It aborts only the run's *turn signal*: the signal of
the model request or tool batch going on, a child of the run's own signal that the loop opens
for each (:meth:`InterruptLane.turn`). The request ends as an aborted response, kept in the
transcript as every aborted response is (its partial tool calls never run; providers leave an
aborted turn out of later requests); each tool call that had not ended gets an error result
saying it was interrupted, with the user's message (a tool that ignores the abort is given up on
after ``tool_abort_grace``, as for an abort). The run then goes on, with the message as the next
user turn: the lane is polled with the steering queue, and first.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .abort import AbortController, AbortSignal
from .policy import BatchHandler, BatchOutcome, RequestHandler, RunPolicy, RunScope, ToolBatchRun
from .types import AgentToolResult, TextContent

if TYPE_CHECKING:
    from .policy import ModelRequest
    from .types import AssistantMessage

__all__ = ["INTERRUPTED_TEXT", "Interrupt", "InterruptLane", "interrupted_result"]

INTERRUPTED_TEXT = "Interrupted by the user"
"""The ``error_message`` of a response cut off by an interrupt (its stop reason is
``"aborted"``), and the text of an :class:`~agentkit.AbortError` a tool raises on one."""

TOOL_INTERRUPTED_TEXT = (
    "Tool call {name} was interrupted by the user before it finished, and may or may not have "
    "taken effect. The user said: {message}"
)
"""The error result of a tool call an interrupt stopped."""


@dataclass(frozen=True)
class Interrupt:
    """The reason a turn signal was aborted by :meth:`InterruptLane.interrupt`: the user's
    message (a user message or any message object)."""

    message: Any

    keeps_run = True
    """The loop's test: an abort for this reason cuts the response short, not the run."""

    def tool_result(self, tool_name: str) -> AgentToolResult:
        """The result a call this interrupt stopped gets instead of its own."""
        text = TOOL_INTERRUPTED_TEXT.format(name=tool_name, message=self.text)
        return AgentToolResult(content=[TextContent(text=text)], details={}, is_error=True)

    @property
    def text(self) -> str:
        """The message's text (its text blocks joined)."""
        content = getattr(self.message, "content", self.message)
        if isinstance(content, str):
            return content
        parts = [block.text for block in content if isinstance(block, TextContent)]
        return "\n".join(parts)

    def __str__(self) -> str:
        return INTERRUPTED_TEXT


def interrupted_result(signal: AbortSignal, tool_name: str) -> AgentToolResult | None:
    """The result a call that ended after ``signal`` aborted gets instead of its own, when an
    interrupt aborted it (``None`` for a plain abort: the call keeps its result)."""
    reason = signal.reason
    if not signal.aborted or not isinstance(reason, Interrupt):
        return None
    return reason.tool_result(tool_name)


class InterruptLane(RunPolicy):
    """One agent's interrupts, and the built-in policy that hears them. :meth:`interrupt` is
    called from any thread; as a run policy it opens a :meth:`turn` around each model request
    and tool batch, and the agent takes the messages with :meth:`take` when it polls for
    steering."""

    name = "interrupts"

    def __init__(self) -> None:
        # Guards _messages and _controller: interrupt() comes from any thread, the loop opens
        # and closes turns and takes messages on its own.
        self._lock = threading.Lock()
        self._messages: list[Any] = []
        self._controller: AbortController | None = None

    def interrupt(self, message: Any) -> None:
        """Queue ``message`` and abort the open turn, if one is open."""
        with self._lock:
            self._messages.append(message)
            controller = self._controller
        if controller is not None:
            controller.abort(Interrupt(message))

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """Each request of a turn runs under a turn signal an interrupt can abort (a child of
        the request's signal, so an outer policy's abort of the request still reaches it)."""
        if request.purpose != "turn":
            return call_next(request)
        with self.turn(request.signal) as signal:
            return call_next(request.with_signal(signal))

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        """Each tool batch runs under a turn signal an interrupt can abort (a child of the
        batch's signal)."""
        with self.turn(batch.signal) as signal:
            batch.signal = signal
            return call_next(batch)

    def take(self) -> list[Any]:
        """Every waiting message, oldest first; the lane is then empty."""
        with self._lock:
            taken, self._messages = self._messages, []
        return taken

    def __len__(self) -> int:
        with self._lock:
            return len(self._messages)

    @contextlib.contextmanager
    def turn(self, outer: AbortSignal) -> Iterator[AbortSignal]:
        """The signal of one request or tool batch: aborted with ``outer`` (the run's signal,
        or an outer policy's child of it; same reason), or by an interrupt. A message already
        waiting aborts it at once: it came after the last poll, while nothing was open, and is
        to be heard now."""
        controller = AbortController()
        unlink = outer.add_callback(lambda: controller.abort(outer.reason))
        with self._lock:
            self._controller = controller
            waiting = self._messages[0] if self._messages else None
        if waiting is not None:
            controller.abort(Interrupt(waiting))
        try:
            yield controller.signal
        finally:
            with self._lock:
                self._controller = None
            unlink()
