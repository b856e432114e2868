"""The gate between a model's stream and the loop: events reach the loop (so the transcript,
the listeners and ``stream()``) only once the input check said the request may stand, and the
answer's text only once it passed the output guardrails at a checkpoint.

It is a stream-function wrapper, as failover is: :class:`GatedRequest` wraps the request's
``stream_fn``; each stream it makes is a :class:`GatedStream` around the provider's, with the
same ``get``/``wake``/``result``/``close`` the loop reads (``agentkit._request``).

Output gating (:class:`OutputGate`): text deltas are held per block and checked at a
checkpoint: a sentence's end, ``chunk`` characters without one, or the end of the block; each
guardrail's :meth:`~agentkit.guardrails.Guardrail.hold` may keep back the tail of a chunk (the
start of a token that may still grow). What passed is released as one delta, in a partial
message of the gate's own that holds only released text; a redaction is released in place of
what it replaced; a trip releases nothing more, ends the stream as ``aborted`` (the partial as
released) and aborts the request. Other blocks (thinking, tool calls) are not checked here
(tool calls are, at the tool-call point); they are released in order, after the text held
before them.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..abort import ABORTED_TEXT
from ..errors import AbortError
from ..event_stream import consuming_here
from ..events import (
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
)
from ..transcript import failure_message
from ..types import AssistantMessage, TextContent
from ..waits import WAKE
from ._apply import Redaction, Stop, apply
from .base import Check, Guardrail

if TYPE_CHECKING:
    from ._input import InputCheck

CheckFor = Callable[[Guardrail, str, bool], Check]
"""``check_for(guardrail, before, final)``: the :class:`Check` of one output chunk."""

_MARKS = (". ", "! ", "? ", ".\t")
_HOLD_ROUNDS = 8
"""How often the guardrails are asked in turn where to cut before the gate holds it all."""


class _Block:
    """One text block of the answer: what is pending (unchecked) and what was released."""

    __slots__ = ("boundary", "content", "open", "pieces", "released", "retry_at", "size", "tail")

    def __init__(self, content: TextContent) -> None:
        self.content = content  # the gate's own block, holding the released text
        self.pieces: list[str] = []  # pending text, unjoined
        self.size = 0  # characters pending
        self.boundary = 0  # where the pending text's last sentence ends (0: none)
        self.tail = ""  # the last character seen (a sentence end may span two deltas)
        self.released = ""
        self.retry_at = 0  # a checkpoint that released nothing is tried again at this size
        self.open = True

    def note(self, delta: str) -> None:
        """Add ``delta`` to the pending text; move the boundary past a sentence end in it."""
        self.pieces.append(delta)
        self.size += len(delta)
        window = self.tail + delta
        end = window.rfind("\n") + 1
        for mark in _MARKS:
            at = window.rfind(mark)
            if at >= 0 and at + 2 > end:
                end = at + 2
        if end > 0:
            self.boundary = max(self.boundary, self.size - len(window) + end)
        self.tail = delta[-1:] or self.tail

    def text(self) -> str:
        """The pending text, joined (and kept joined)."""
        if len(self.pieces) > 1:
            self.pieces = ["".join(self.pieces)]
        return self.pieces[0] if self.pieces else ""


class OutputGate:
    """One streamed answer's events, released as they pass the output guardrails (see the
    module). :meth:`take` turns each provider event into the events to release now."""

    def __init__(
        self, guardrails: Sequence[Guardrail], check_for: CheckFor, chunk: int, max_held: int
    ) -> None:
        self.guardrails = list(guardrails)
        self.check_for = check_for
        self.chunk = chunk
        self.max_held = max_held
        self.message: AssistantMessage | None = None  # the released partial
        self.blocks: dict[int, _Block] = {}
        self.stop: Stop | None = None
        self.aborted = False  # a check's wait was aborted (the run was)
        self.redactions: dict[str, Redaction] = {}
        self.ended = False

    # --- events in, events out ---

    def take(self, event: Any) -> list[Any]:
        """The events to release for the provider's ``event``."""
        if self.ended:
            return []
        kind = type(event)
        if kind is TextDeltaEvent:
            block = self._block(event.content_index, event.partial)
            block.note(event.delta)
            ready = block.boundary > 0 or block.size >= self.chunk
            if ready and block.size >= block.retry_at:
                return self._checkpoint(event.content_index, final=False)
            return []
        if kind is StartEvent:
            self.message = event.partial.model_copy(update={"content": []})
            return [StartEvent(partial=self.message)]
        if kind is DoneEvent:
            return self._done(event)
        if kind is ErrorEvent:
            self.ended = True
            failed = event.error.model_copy(update={"content": self._released()})
            return [ErrorEvent(event.reason, failed, event.provider_error)]
        out = self._flush()
        if self.ended:
            return out
        index = event.content_index
        if kind is TextStartEvent:
            self._block(index, event.partial)
            return [*out, TextStartEvent(content_index=index, partial=self._partial(event))]
        if kind is TextEndEvent:
            block = self._block(index, event.partial)
            block.open = False
            out += self._checkpoint(index, final=True)
            if self.ended:
                return out
            source = event.partial.content[index]
            block.content.text_signature = getattr(source, "text_signature", None)
            end = TextEndEvent(
                content_index=index, content=block.released, partial=self._partial(event)
            )
            return [*out, end]
        self._mirror(index + 1, event.partial)  # a thinking or tool-call block: not gated here
        return [*out, dataclasses.replace(event, partial=self._partial(event))]

    def _partial(self, event: Any) -> AssistantMessage:
        if self.message is None:  # an event before ``start``: adopt the provider's message
            self.message = event.partial.model_copy(update={"content": []})
        return self.message

    def _mirror(self, length: int, partial: AssistantMessage) -> None:
        """Grow the released content to ``length`` blocks with the provider's own (non-text)
        blocks, so indexes stay the provider's."""
        content = self._partial_of(partial).content
        for index in range(len(content), min(length, len(partial.content))):
            block = partial.content[index]
            if isinstance(block, TextContent):
                gated = TextContent(text="", text_signature=block.text_signature)
                self.blocks[index] = _Block(gated)
                content.append(gated)
            else:
                content.append(block)

    def _partial_of(self, partial: AssistantMessage) -> AssistantMessage:
        if self.message is None:
            self.message = partial.model_copy(update={"content": []})
        return self.message

    def _block(self, index: int, partial: AssistantMessage) -> _Block:
        block = self.blocks.get(index)
        if block is None:
            self._mirror(index + 1, partial)
            block = self.blocks.get(index)
            if block is None:  # the provider's block is not text: gate what arrives anyway
                block = self.blocks[index] = _Block(TextContent(text=""))
        return block

    # --- checkpoints ---

    def _checkpoint(self, index: int, final: bool) -> list[Any]:
        """Check the pending text of block ``index`` up to a checkpoint; release what passed."""
        block = self.blocks[index]
        text = block.text()
        if not text:
            return []
        cut = len(text) if final else self._cut(block, text)
        if cut <= 0:
            block.retry_at = block.size + max(16, min(block.size // 4, self.chunk))
            return []
        released = self._checked(text[:cut], block.released, final and cut == len(text))
        if released is None:
            return [self._terminal()]
        rest = text[cut:]
        block.pieces = [rest] if rest else []
        block.size = len(rest)
        block.boundary = max(block.boundary - cut, 0)
        block.retry_at = 0
        if not released:
            return []
        block.released += released
        block.content.text = block.released
        partial = self.message
        assert partial is not None  # the block's start made it
        return [TextDeltaEvent(content_index=index, delta=released, partial=partial)]

    def _cut(self, block: _Block, text: str) -> int:
        """Where to cut the pending text now: at its last sentence end, or at its last space
        once ``chunk`` characters wait; then back by what each guardrail holds. Text held
        past ``max_held`` is checked as it stands."""
        cut = block.boundary
        if cut <= 0 and len(text) >= self.chunk:
            cut = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t")) + 1 or len(text)
        cut = self._held_back(text, cut)
        if cut <= 0 and len(text) > self.max_held:
            return len(text)
        return cut

    def _held_back(self, text: str, cut: int) -> int:
        """``cut`` moved back until no guardrail holds any of ``text[:cut]``: a guardrail is
        asked again when another moved the cut after it answered (one's hold may end inside a
        token another needs whole), never about its own answer (a rule such as "the last 64
        characters" would hold it all). A cut that does not settle in a few rounds holds
        everything for now."""
        answered: dict[int, int] = {}  # id(guardrail) -> the cut it last left standing
        for _ in range(_HOLD_ROUNDS):
            moved = False
            for guardrail in self.guardrails:
                if cut <= 0:
                    return 0
                if answered.get(id(guardrail)) == cut:
                    continue
                held = min(max(guardrail.hold(text[:cut]), 0), cut)
                cut, moved = cut - held, moved or held > 0
                answered[id(guardrail)] = cut
            if not moved:
                return cut
        return 0

    def _checked(self, chunk: str, before: str, final: bool) -> str | None:
        """``chunk`` after the guardrails (redacted, perhaps), or ``None`` when one stopped."""
        try:
            applied = apply(self.guardrails, chunk, lambda g: self.check_for(g, before, final))
        except AbortError:
            self.aborted = True
            return None
        for redaction in applied.redactions:
            known = self.redactions.get(redaction.guardrail)
            if known is None:
                self.redactions[redaction.guardrail] = redaction
            else:
                known.count += 1
        if applied.stop is not None:
            self.stop = applied.stop
            return None
        return applied.text

    def _flush(self) -> list[Any]:
        """Check the pending text of every open block whole (before an event of another
        block, or the end)."""
        out: list[Any] = []
        for index, block in list(self.blocks.items()):
            if block.size and not self.ended:
                out += self._checkpoint(index, final=True)
        return out

    def _done(self, event: DoneEvent) -> list[Any]:
        out = self._flush()
        if self.ended:
            return out
        content = self._released()
        for index in range(len(content), len(event.message.content)):
            block = event.message.content[index]  # never streamed: checked whole here
            if isinstance(block, TextContent):
                released = self._checked(block.text, "", True)
                if released is None:
                    return [*out, self._terminal()]
                block = TextContent(text=released, text_signature=block.text_signature)
            content.append(block)
        self.ended = True
        final = event.message.model_copy(update={"content": content})
        return [*out, DoneEvent(reason=event.reason, message=final)]

    def _released(self) -> list[Any]:
        return list(self.message.content) if self.message is not None else []

    def _terminal(self) -> ErrorEvent:
        """The end of a stream a guardrail stopped (or whose check was aborted): the message
        as released, ``aborted``."""
        self.ended = True
        text = self.stop.message if self.stop is not None else ABORTED_TEXT
        partial = self.message or AssistantMessage()
        message = failure_message("aborted", text, partial=partial.model_copy())
        message.content = self._released()
        return ErrorEvent("aborted", message)


class GatedStream:
    """A provider's stream as the loop reads it, gated (see the module): events wait for the
    input check (``check``) and pass the output gate (``gate``); ``stop_request`` aborts the
    provider's request when a guardrail stops it. Read by one consumer, the loop's thread;
    :meth:`wake` may come from any thread (an abort's callback)."""

    def __init__(
        self,
        inner: Any,
        gate: OutputGate | None,
        check: InputCheck | None,
        stop_request: Callable[[], None],
    ) -> None:
        self._inner = inner
        self._gate = gate
        self._check = check  # None once its verdict is in and acted on
        self._stop_request = stop_request
        self._ready: deque[Any] = deque()  # events released, not yet read
        self._held: list[Any] = []  # provider events waiting for the input check's verdict
        self._final: AssistantMessage | None = None  # the terminal event's message, released
        self._woken = False  # the consumer's own wake is due (set from any thread)
        if check is not None:
            check.add_waker(inner.wake)  # the verdict wakes a read blocked on the provider

    def get(self, timeout: float | None = None) -> Any:
        """The next released event, ``WAKE`` after :meth:`wake`, ``None`` once the stream
        ended; raises ``queue.Empty`` after ``timeout`` seconds with nothing to return."""
        ends = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready:
                return self._ready.popleft()
            if self._final is not None:
                return None
            if self._woken:
                self._woken = False
                return WAKE
            if self._check is not None and self._check.done.is_set():
                self._settle()
                continue
            wait = None if ends is None else max(0.0, ends - time.monotonic())
            item = self._inner.get(wait)  # queue.Empty goes up: the caller's time is out
            if item is WAKE:
                continue
            if item is None:  # ended without a terminal event: result() says why
                self._final = self._final or _ENDED
                continue
            self._take(item)

    def _take(self, event: Any) -> None:
        if self._check is not None:
            if self._check.done.is_set():
                self._settle()
            elif isinstance(event, ErrorEvent) and event.reason == "aborted":
                self._held = [e for e in self._held if isinstance(e, StartEvent)]
                self._check = None  # the request was aborted (the run was): no verdict waited for
                self._emit_aborted(ABORTED_TEXT)
                return
            else:
                self._held.append(event)
                return
        if self._final is not None:
            return  # stopped: what the provider still sends is dropped
        self._release(event)

    def _settle(self) -> None:
        """The input check's verdict is in: release what was held, or end the stream."""
        check, self._check = self._check, None
        held, self._held = self._held, []
        if check is not None and check.passed:
            for event in held:
                self._release(event)
            return
        self._held = held
        self._emit_aborted(check.message if check is not None else ABORTED_TEXT)

    def _emit_aborted(self, text: str) -> None:
        """End the stream as aborted with nothing of what was held (only its message's
        metadata, from a held ``start``)."""
        message = AssistantMessage()
        if self._held and isinstance(self._held[0], StartEvent):
            message = self._held[0].partial.model_copy(update={"content": []})
        self._held = []
        self._emit(ErrorEvent("aborted", failure_message("aborted", text, partial=message)))

    def _release(self, event: Any) -> None:
        gate = self._gate
        if gate is None:
            self._emit(event)
            return
        for out in gate.take(event):
            self._emit(out)
        if gate.ended and (gate.stop is not None or gate.aborted):
            self._stop_request()

    def _emit(self, event: Any) -> None:
        self._ready.append(event)
        if isinstance(event, DoneEvent):
            self._final = event.message
        elif isinstance(event, ErrorEvent):
            self._final = event.error

    def wake(self) -> None:
        """Make the consumer's :meth:`get` return ``WAKE`` (from any thread)."""
        self._woken = True
        self._inner.wake()

    def result(self, timeout: float | None = None) -> AssistantMessage:
        """The final message as released (the provider's own says why when it ended
        without one)."""
        if self._final is not None and self._final is not _ENDED:
            return self._final
        return self._inner.result(timeout)

    def close(self) -> None:
        """The loop is done with the stream: close the provider's."""
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


_ENDED = AssistantMessage(stop_reason="error", error_message="the stream ended without a result")
"""Marks a provider stream that ended without a terminal event (never released)."""


class GatedRequest:
    """The stream function of one gated request: each stream it makes (an inner policy may
    retry) is gated alike; :attr:`gates` are their output gates, in order."""

    def __init__(
        self,
        stream_fn: Callable[..., Any],
        make_gate: Callable[[], OutputGate] | None,
        check: InputCheck | None,
        stop_request: Callable[[], None],
    ) -> None:
        self.stream_fn = stream_fn
        self.make_gate = make_gate
        self.check = check
        self.stop_request = stop_request
        self.gates: list[OutputGate] = []

    def __call__(self, model: Any, context: Any, options: Any) -> GatedStream:
        gate = self.make_gate() if self.make_gate is not None else None
        if gate is not None:
            self.gates.append(gate)
        check = self.check if self.check is not None and not self.check.passed else None
        if check is not None:  # the verdict must wake the reader: the provider keeps a thread
            with consuming_here(False):
                inner = self.stream_fn(model, context, options)
        else:
            inner = self.stream_fn(model, context, options)
        return GatedStream(inner, gate, check, self.stop_request)

    @property
    def stop(self) -> Stop | None:
        """The first stop of an output gate, if one stopped."""
        return next((g.stop for g in self.gates if g.stop is not None), None)

    @property
    def redactions(self) -> list[Redaction]:
        """The output gates' redactions."""
        return [r for g in self.gates for r in g.redactions.values()]
