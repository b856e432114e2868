"""The streamed assistant message every provider (and the scripted test model) builds.

:class:`MessageBuilder` fills the live ``partial`` :class:`AssistantMessage` and pushes the
matching provider events. Its contract with the consumer: exactly one terminal event (``done``
or ``error``) per stream, whatever raises and wherever. :meth:`MessageBuilder.finish` builds the
final message before it claims the end, and :meth:`MessageBuilder.fail` claims the end first and
then pushes its ``error`` event even if the salvage work before it raises.

Tool-call argument deltas are coalesced: :meth:`MessageBuilder.add_tool_args` only buffers the
text, and :meth:`MessageBuilder.flush` (called by the request runner after each network read,
which takes everything that has arrived, and before any other event) pushes one
``toolcall_delta`` carrying everything buffered since, with the
partial arguments re-parsed on :class:`ToolArgsBuffer`'s schedule. So listeners see partial
arguments as fresh as the last network read, at a cost that does not grow with the number of
deltas the vendor splits them into.

Text entering the message is made serialisable here, where it enters: an emoji streamed as two
JSON-escaped UTF-16 halves in separate deltas is joined, and any other lone surrogate becomes
U+FFFD, so a later request body can always be encoded.
"""

from __future__ import annotations

import math
import threading
from typing import Any, Literal

from .._serialize import clean_text
from ..errors import ProviderError
from ..event_stream import AssistantMessageEventStream
from ..events import (
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..transcript import failure_message
from ..types import (
    AssistantMessage,
    Model,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
)
from .json_stream import ToolArgsBuffer

ABORTED_MESSAGE = "Request was aborted"
"""The ``error_message`` of a message whose request was aborted."""

MAX_TOKEN_COUNT = 2**53
"""Token counts are clamped to this (a vendor's absurd number must not break cost or JSON)."""

_HIGH_SURROGATE = ("\ud800", "\udbff")


def compute_cost(model: Model, usage: Usage) -> None:
    """Fill ``usage.cost`` from the token counts and ``model.cost`` (USD per million tokens)."""
    prices = model.cost
    cost = usage.cost
    cost.input = _price(usage.input, prices.input)
    cost.output = _price(usage.output, prices.output)
    cost.cache_read = _price(usage.cache_read, prices.cache_read)
    cost.cache_write = _price(usage.cache_write, prices.cache_write)
    cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write


def _price(tokens: int, per_million: float) -> float:
    value = min(tokens, MAX_TOKEN_COUNT) * per_million / 1_000_000
    return value if math.isfinite(value) else 0.0


def tokens(value: Any) -> int:
    """A vendor's token count as an int in ``0..MAX_TOKEN_COUNT``; anything that is not a
    finite number (``None``, ``1e400`` parsed as infinity, a string) counts as 0."""
    if value.__class__ is int:
        return min(max(value, 0), MAX_TOKEN_COUNT)
    if isinstance(value, float) and math.isfinite(value):
        return min(max(int(value), 0), MAX_TOKEN_COUNT)
    if isinstance(value, str) and value.strip().isdigit():
        return min(int(value), MAX_TOKEN_COUNT)
    return 0


_count = tokens


def set_usage(
    usage: Usage,
    *,
    input: int | None = None,
    output: int | None = None,
    cache_read: int | None = None,
    cache_write: int | None = None,
    total: int | None = None,
) -> None:
    """Update token counts (``None`` keeps a field); the total defaults to the sum.

    Counts are clamped to ``0..MAX_TOKEN_COUNT`` as they enter.
    """
    if input is not None:
        usage.input = _count(input)
    if output is not None:
        usage.output = _count(output)
    if cache_read is not None:
        usage.cache_read = _count(cache_read)
    if cache_write is not None:
        usage.cache_write = _count(cache_write)
    summed = usage.input + usage.output + usage.cache_read + usage.cache_write
    usage.total_tokens = min(max(_count(total), summed) if total is not None else summed, 2**63)


class MessageBuilder:
    """Fills the live partial message of one response and pushes the matching events.

    Block indexes are positions in ``message.content``. Text and thinking grow by string
    concatenation; tool-call arguments go through :class:`ToolArgsBuffer` and are coalesced
    until :meth:`flush` (see the module docstring).
    """

    def __init__(self, model: Model, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.stream = stream
        self.message = AssistantMessage(
            content=[], api=model.api, provider=model.provider, model=model.id
        )
        self.started = False
        # Guards _ended. Agentkit's runner ends the stream from the one thread producing it;
        # the lock keeps "exactly one terminal event" true for a provider that also ends it
        # from another thread (an abort callback, say).
        self._end_lock = threading.Lock()
        self._ended = False
        self._args: dict[int, ToolArgsBuffer] = {}
        self._open: dict[int, str] = {}  # index -> "text" | "thinking" | "tool_call"
        self._held: dict[int, str] = {}  # index -> a high surrogate waiting for its low half
        self._unsent: dict[int, list[str]] = {}  # index -> argument deltas not yet pushed
        self._cut_off_calls = False  # a call's arguments ended before their JSON did

    @property
    def ended(self) -> bool:
        """Whether the terminal event has been pushed (or claimed)."""
        return self._ended

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Push the ``start`` event (once)."""
        if not self.started:
            self.started = True
            self.stream.push(StartEvent(partial=self.message))

    def is_open(self, index: int) -> bool:
        """Whether the block at ``index`` has started and not yet ended."""
        return index in self._open

    def _open_block(self, block: Any, kind: str) -> int:
        """Append ``block`` as an open block of ``kind`` (after the ``start`` event and any
        buffered argument deltas); return its index."""
        self.flush()
        self.start()
        index = len(self.message.content)
        self.message.content.append(block)
        self._open[index] = kind
        return index

    def _ready(self, index: int, delta: str) -> str:
        """The part of a text or thinking ``delta`` to append now (cleaned; may be empty), with
        buffered argument deltas pushed first so events stay in order."""
        if not delta:
            return ""
        delta = self._clean_delta(index, delta)
        if delta:
            self.flush()
        return delta

    def _clean_delta(self, index: int, delta: str) -> str:
        """``delta`` made serialisable, holding back a trailing high surrogate for the next."""
        held = self._held.pop(index, "")
        if held:
            delta = held + delta
        elif delta.isascii():
            return delta
        last = delta[-1:]
        if last and _HIGH_SURROGATE[0] <= last <= _HIGH_SURROGATE[1]:
            self._held[index] = last
            delta = delta[:-1]
        return clean_text(delta)

    def _close(self, index: int) -> Any:
        """Mark the text or thinking block at ``index`` closed, after a half surrogate it held
        back (as U+FFFD) and any buffered deltas; the block, or ``None`` if it was not open."""
        kind = self._open.get(index)
        if kind is None:
            return None
        if self._held.pop(index, ""):
            if kind == "text":
                self.add_text(index, "\ufffd")
            else:
                self.add_thinking(index, "\ufffd")
        self.flush()
        self._open.pop(index, None)
        return self.message.content[index]

    # --- text -------------------------------------------------------------------------------

    def begin_text(self, text: str = "", signature: str | None = None) -> int:
        """Open a text block; return its index."""
        index = self._open_block(TextContent(text="", text_signature=signature), "text")
        self.stream.push(TextStartEvent(content_index=index, partial=self.message))
        if text:
            self.add_text(index, text)
        return index

    def add_text(self, index: int, delta: str) -> None:
        """Append to the text block at ``index``."""
        delta = self._ready(index, delta)
        if not delta:
            return
        block = self.message.content[index]
        assert isinstance(block, TextContent)
        block.text = block.text + delta
        self.stream.push(TextDeltaEvent(content_index=index, delta=delta, partial=self.message))

    def end_text(self, index: int) -> None:
        """Close the text block at ``index``."""
        block = self._close(index)
        if block is None:
            return
        assert isinstance(block, TextContent)
        self.stream.push(
            TextEndEvent(content_index=index, content=block.text, partial=self.message)
        )

    # --- thinking ---------------------------------------------------------------------------

    def begin_thinking(
        self, thinking: str = "", signature: str | None = None, redacted: bool = False
    ) -> int:
        """Open a thinking block; return its index."""
        block = ThinkingContent(thinking="", signature=signature, redacted=redacted)
        index = self._open_block(block, "thinking")
        self.stream.push(ThinkingStartEvent(content_index=index, partial=self.message))
        if thinking:
            self.add_thinking(index, thinking)
        return index

    def add_thinking(self, index: int, delta: str) -> None:
        """Append to the thinking block at ``index``."""
        delta = self._ready(index, delta)
        if not delta:
            return
        block = self.message.content[index]
        assert isinstance(block, ThinkingContent)
        block.thinking = block.thinking + delta
        self.stream.push(ThinkingDeltaEvent(content_index=index, delta=delta, partial=self.message))

    def set_thinking_signature(self, index: int, signature: str, append: bool = False) -> None:
        """Set (or extend) the signature of the thinking block at ``index``."""
        block = self.message.content[index]
        assert isinstance(block, ThinkingContent)
        signature = clean_text(signature)
        block.signature = (block.signature or "") + signature if append else signature

    def end_thinking(self, index: int) -> None:
        """Close the thinking block at ``index``."""
        block = self._close(index)
        if block is None:
            return
        assert isinstance(block, ThinkingContent)
        self.stream.push(
            ThinkingEndEvent(content_index=index, content=block.thinking, partial=self.message)
        )

    # --- tool calls -------------------------------------------------------------------------

    def begin_tool_call(self, call_id: str, name: str, thought_signature: str | None = None) -> int:
        """Open a tool call; return its index. Arguments follow via :meth:`add_tool_args`."""
        call = ToolCall(
            id=clean_text(call_id),
            name=clean_text(name),
            arguments={},
            thought_signature=thought_signature,
        )
        index = self._open_block(call, "tool_call")
        self._args[index] = ToolArgsBuffer()
        self.stream.push(ToolCallStartEvent(content_index=index, partial=self.message))
        return index

    def add_tool_args(self, index: int, delta: str) -> None:
        """Append raw JSON text to the arguments of the tool call at ``index``.

        Nothing is pushed until :meth:`flush`, which sends one ``toolcall_delta`` for all the
        text buffered since the last one.
        """
        if not delta:
            return
        unsent = self._unsent.get(index)
        if unsent is None:
            self._unsent[index] = [delta]
        else:
            unsent.append(delta)

    def flush(self) -> None:
        """Push the coalesced ``toolcall_delta`` of every call with buffered argument text."""
        if not self._unsent:
            return
        unsent, self._unsent = self._unsent, {}
        for index, pieces in unsent.items():
            buffer = self._args.get(index)
            if buffer is None:
                continue
            delta = "".join(pieces)
            buffer.append(delta)
            partial = buffer.partial()
            block = self.message.content[index]
            assert isinstance(block, ToolCall)
            if partial is not None:
                block.arguments = partial
            delta = clean_text(delta)
            self.stream.push(
                ToolCallDeltaEvent(content_index=index, delta=delta, partial=self.message)
            )

    def tool_args_text(self, index: int) -> str:
        """The raw arguments text received so far for the call at ``index``."""
        buffer = self._args.get(index)
        text = buffer.text if buffer is not None else ""
        return text + "".join(self._unsent.get(index, ()))

    def end_tool_call(
        self, index: int, arguments: dict[str, Any] | None = None, cut_off: bool = False
    ) -> None:
        """Close the tool call at ``index``; ``arguments`` (if given) replace the streamed text,
        ``cut_off`` saying they were completed from a truncated text.

        Arguments whose text ended before its JSON did (``{"path": "/srv/da``) keep the
        partial parse for display, and the message ends as truncated (see :meth:`finish`)."""
        if index not in self._open:
            return
        self.flush()
        self._open.pop(index, None)
        block = self.message.content[index]
        assert isinstance(block, ToolCall)
        buffer = self._args.pop(index, None)
        if arguments is not None:
            block.arguments = arguments
        elif buffer is not None:
            block.arguments = buffer.final()
            cut_off = buffer.cut_off
        if cut_off:
            self._cut_off_calls = True
        self.stream.push(
            ToolCallEndEvent(content_index=index, tool_call=block, partial=self.message)
        )

    # --- the end ----------------------------------------------------------------------------

    def end_open_blocks(self) -> None:
        """Close every block still open, in index order, with its end event."""
        for index in sorted(self._open):
            kind = self._open.get(index)
            if kind == "text":
                self.end_text(index)
            elif kind == "thinking":
                self.end_thinking(index)
            elif kind == "tool_call":
                self.end_tool_call(index)

    def has_tool_calls(self) -> bool:
        """Whether the message asks for a tool call."""
        return any(isinstance(block, ToolCall) for block in self.message.content)

    def finish(self, stop_reason: StopReason) -> None:
        """End the stream successfully (or with ``error`` if the vendor reported one).

        Everything that can raise runs before the end is claimed, so a failure here leaves the
        stream open for the runner's :meth:`fail`.

        A message with a tool call whose arguments were cut off ends with ``length`` whatever
        the vendor's reason (``tool_calls`` included): the response is truncated, and the loop
        runs no call of a truncated response, it sends each one back as an error result.
        """
        if stop_reason == "error" or stop_reason == "aborted":
            self.end_open_blocks()
            self.fail(stop_reason, self.message.error_message or "The model reported an error")
            return
        if self._ended:
            return
        self.end_open_blocks()
        if self._cut_off_calls:
            stop_reason = "length"
        compute_cost(self.model, self.message.usage)
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        self.message.stop_reason = stop_reason
        if self.message.response_id:
            self.message.response_id = clean_text(self.message.response_id)
        self.stream.push(DoneEvent(reason=stop_reason, message=self.message))

    def finish_from(
        self, raw: str, reasons: dict[str, StopReason], label: str, default: StopReason
    ) -> None:
        """End with the vendor's finish reason ``raw`` mapped through ``reasons``: a ``stop``
        that carries tool calls is ``tool_use``; an unmapped error names the raw reason."""
        reason = reasons.get(raw, default)
        if reason == "stop" and self.has_tool_calls():
            reason = "tool_use"
        if reason == "error":
            self.message.error_message = f"{label} stopped the response: {raw}"
        self.finish(reason)

    def fail(
        self,
        reason: Literal["error", "aborted"],
        error_message: str,
        provider_error: ProviderError | None = None,
    ) -> None:
        """End the stream with an ``error`` event, keeping what arrived so far (first end wins);
        ``provider_error`` rides on the event (its ``status`` and ``retry_after``).

        The end is claimed first and the event is pushed whatever the salvage work raises.
        """
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        try:
            unsent, self._unsent = self._unsent, {}
            for index, pieces in unsent.items():  # kept in the salvaged arguments, not pushed
                if index in self._args:
                    self._args[index].append("".join(pieces))
            self._held.clear()
            for index in list(self._open):
                if self._open.get(index) == "tool_call":
                    block = self.message.content[index]
                    buffer = self._args.pop(index, None)
                    if isinstance(block, ToolCall) and buffer is not None:
                        block.arguments = buffer.final()
            self._open.clear()
            compute_cost(self.model, self.message.usage)
        except Exception:  # salvage is best effort; the terminal event is not
            pass
        finally:
            failure_message(reason, error_message, partial=self.message)
            self.stream.push(
                ErrorEvent(reason=reason, error=self.message, provider_error=provider_error)
            )
