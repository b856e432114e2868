"""A scripted model for tests: a ``stream_fn`` that plays back replies and records requests.

Use it to test your own agents without a network or an API key::

    from agentkit import Agent, tool
    from agentkit.testing import ScriptedModel, reply, text, tool_call

    model = ScriptedModel([
        reply(tool_call("add", {"a": 1, "b": 2})),
        "The sum is 3.",
    ])
    agent = Agent(model=model.model, stream_fn=model, tools=[add])
    agent.prompt("What is 1 + 2?")
    assert model.requests[1].messages[-1].role == "tool_result"

Each reply streams as realistic deltas (``start``, ``text_delta``..., ``toolcall_delta``...,
``done``) from a producer thread, built by the same message builder the HTTP providers use (so a
``toolcall_delta`` carries the partial arguments parsed so far), optionally with a delay between deltas; it may end with an
error, or hang until the run is aborted. Every delay honours the run's abort signal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .abort import ABORTED_TEXT, AbortSignal
from .errors import AbortError
from .event_stream import AssistantMessageEventStream
from .providers.builder import MessageBuilder
from .types import (
    Context,
    Model,
    StopReason,
    StreamOptions,
    Usage,
    as_stream_options,
)

SCRIPTED_MODEL = Model(
    id="scripted", name="Scripted model", api="scripted", provider="scripted", base_url=""
)


@dataclass
class Text:
    """A text block of a scripted reply."""

    text: str


@dataclass
class Thinking:
    """A thinking block of a scripted reply."""

    thinking: str
    signature: str | None = None


@dataclass
class Call:
    """A tool call of a scripted reply."""

    name: str
    arguments: dict[str, Any]
    id: str | None = None


Part = Text | Thinking | Call


def text(value: str) -> Text:
    """A text part."""
    return Text(value)


def thinking(value: str, signature: str | None = None) -> Thinking:
    """A thinking part, optionally with a signature."""
    return Thinking(value, signature)


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> Call:
    """A tool-call part; the id defaults to ``call_<n>`` numbered across the script."""
    return Call(name, dict(arguments or {}), id)


@dataclass
class Reply:
    """One scripted answer.

    ``stop_reason`` defaults to ``"tool_use"`` when there are calls, else ``"stop"``.
    ``delay`` is seconds before each event; ``error`` ends the stream with that error message;
    ``hang`` streams the parts, then waits until the run is aborted and ends as aborted;
    ``raise_error`` makes the stream function itself raise (breaking its contract).
    """

    parts: list[Part] = field(default_factory=list)
    stop_reason: StopReason | None = None
    usage: Usage | None = None
    delay: float = 0.0
    error: str | None = None
    hang: bool = False
    raise_error: BaseException | None = None
    end_without_done: bool = False


def reply(
    *parts: Part | str,
    stop_reason: StopReason | None = None,
    usage: Usage | None = None,
    delay: float = 0.0,
    error: str | None = None,
    hang: bool = False,
    raise_error: BaseException | None = None,
    end_without_done: bool = False,
) -> Reply:
    """Build a :class:`Reply`; a ``str`` part is text."""
    return Reply(
        [Text(p) if isinstance(p, str) else p for p in parts],
        stop_reason,
        usage,
        delay,
        error,
        hang,
        raise_error,
        end_without_done,
    )


Script = Reply | str | Callable[[Context, StreamOptions], "Reply | str"]


@dataclass
class ScriptedRequest:
    """What the scripted model was asked: the model, the context and the options."""

    model: Model
    context: Context
    options: StreamOptions

    @property
    def messages(self) -> list[Any]:
        """The messages of the request."""
        return self.context.messages


class ScriptedModel:
    """A ``stream_fn`` that answers each request with the next scripted reply.

    A script entry is a :class:`Reply`, a string (a text reply), or a function
    ``(context, options) -> Reply | str`` for answers that depend on the request. When the
    script runs out, the stream ends with an error message saying so.
    """

    def __init__(
        self,
        replies: Iterable[Script] = (),
        *,
        model: Model | None = None,
        chunk_size: int = 8,
        delay: float = 0.0,
    ) -> None:
        self.model = model or SCRIPTED_MODEL
        self.chunk_size = max(1, chunk_size)
        self.delay = delay
        # Guards _script, _calls and requests: runs may call the model from several threads.
        self._lock = threading.Lock()
        self._script: list[Script] = list(replies)
        self._calls = 0
        self.requests: list[ScriptedRequest] = []

    def add(self, *replies: Script) -> None:
        """Append replies to the script."""
        with self._lock:
            self._script.extend(replies)

    @property
    def remaining(self) -> int:
        """How many scripted replies are left."""
        with self._lock:
            return len(self._script)

    def __call__(
        self, model: Model, context: Context, options: StreamOptions | dict[str, Any] | None = None
    ) -> AssistantMessageEventStream:
        return self.stream_fn(model, context, options)

    def stream_fn(
        self, model: Model, context: Context, options: StreamOptions | dict[str, Any] | None = None
    ) -> AssistantMessageEventStream:
        """Record the request and stream the next reply."""
        opts = as_stream_options(options)
        with self._lock:
            self.requests.append(ScriptedRequest(model, context, opts))
            entry = self._script.pop(0) if self._script else None
        if entry is not None and callable(entry) and not isinstance(entry, Reply):
            entry = entry(context, opts)
        script = reply(entry) if isinstance(entry, str) else entry
        if script is not None and script.raise_error is not None:
            raise script.raise_error
        stream = AssistantMessageEventStream()
        thread = threading.Thread(
            target=self._play,
            args=(stream, model, script, opts.signal),
            name="agentkit-scripted",
            daemon=True,
        )
        stream.set_producer(thread)
        thread.start()
        return stream

    def _next_id(self) -> str:
        with self._lock:
            self._calls += 1
            return f"call_{self._calls}"

    def _play(
        self,
        stream: AssistantMessageEventStream,
        model: Model,
        script: Reply | None,
        signal: AbortSignal | None,
    ) -> None:
        builder = MessageBuilder(model, stream)
        try:
            if script is None:
                builder.fail("error", "ScriptedModel: no scripted reply left")
                return
            _Player(self, builder, script, signal).play()
        except Exception as exc:  # keep the stream contract even if the script is broken
            builder.fail("error", f"ScriptedModel failed: {exc}")
        finally:
            if not builder.ended and not stream.done():
                builder.fail("error", "ScriptedModel: the reply ended without a result")


class _Player:
    """Streams one reply through the same :class:`MessageBuilder` the HTTP providers use, so
    partial tool arguments show on ``toolcall_delta`` as they do over HTTP. Each scripted
    chunk counts as one network read (the builder is flushed after it)."""

    def __init__(
        self,
        owner: ScriptedModel,
        builder: MessageBuilder,
        script: Reply,
        signal: AbortSignal | None,
    ) -> None:
        self.owner, self.builder = owner, builder
        self.script, self.signal = script, signal
        self.delay = script.delay or owner.delay

    def pause(self) -> None:
        if self.signal is not None and self.signal.aborted:
            raise AbortError(ABORTED_TEXT)
        if self.delay > 0:
            if self.signal is not None:
                if self.signal.wait(self.delay):
                    raise AbortError(ABORTED_TEXT)
            else:
                threading.Event().wait(self.delay)

    def chunks(self, value: str) -> Sequence[str]:
        size = self.owner.chunk_size
        return [value[i : i + size] for i in range(0, len(value), size)] or [""]

    def play(self) -> None:
        """Stream the reply; an abort at any pause, the last one before the end included, ends
        it as aborted (never as an error)."""
        try:
            self.pause()
            self.builder.start()
            for part in self.script.parts:
                if isinstance(part, Text):
                    self.play_text(part)
                elif isinstance(part, Thinking):
                    self.play_thinking(part)
                else:
                    self.play_call(part)
            if self.script.hang:
                if self.signal is None:
                    raise RuntimeError("a hanging reply needs the run's signal")
                self.signal.wait()
                raise AbortError(ABORTED_TEXT)
            self.end()
        except AbortError:
            self.builder.fail("aborted", ABORTED_TEXT)

    def end(self) -> None:
        """End the streamed reply as scripted: with its usage, then its error or stop reason."""
        builder, script = self.builder, self.script
        message = builder.message
        chars = sum(len(getattr(p, "text", "") or getattr(p, "thinking", "")) for p in script.parts)
        message.usage = script.usage or Usage(
            input=10, output=max(1, chars // 4), total_tokens=10 + max(1, chars // 4)
        )
        if script.error is not None:
            builder.fail("error", script.error)
            return
        if script.end_without_done:
            builder.stream.end()
            return
        has_calls = any(isinstance(p, Call) for p in script.parts)
        stop = script.stop_reason or ("tool_use" if has_calls else "stop")
        if stop in ("error", "aborted"):
            builder.fail(stop, message.error_message or stop)
            return
        self.pause()  # the last pause: an abort here ends the reply as aborted too
        builder.finish(stop)

    def play_text(self, part: Text) -> None:
        self.pause()
        index = self.builder.begin_text()
        for chunk in self.chunks(part.text):
            self.pause()
            self.builder.add_text(index, chunk)
        self.pause()
        self.builder.end_text(index)

    def play_thinking(self, part: Thinking) -> None:
        self.pause()
        index = self.builder.begin_thinking()
        for chunk in self.chunks(part.thinking):
            self.pause()
            self.builder.add_thinking(index, chunk)
        if part.signature is not None:
            self.builder.set_thinking_signature(index, part.signature)
        self.pause()
        self.builder.end_thinking(index)

    def play_call(self, part: Call) -> None:
        self.pause()
        index = self.builder.begin_tool_call(part.id or self.owner._next_id(), part.name)
        for chunk in self.chunks(json.dumps(part.arguments)):
            self.pause()
            self.builder.add_tool_args(index, chunk)
            self.builder.flush()
        self.pause()
        self.builder.end_tool_call(index, dict(part.arguments))
