"""Replayed runs: a case's recorded model replies played back, offline and deterministic.

:class:`Replay` is a stream function for one case's agent. Each model request gets the next
recorded reply, streamed through :class:`~agentkit.testing.ScriptedModel` (the message builder
the HTTP providers use), with the recorded model, usage and cost (whatever model the agent
names). So what a replay tests is everything
but the model: the tools, the hooks, the policies and agentkit itself.

Before answering, it checks that the request is the one the recording answered: the system
prompt, and every message from the case's first prompt on (the prompts, the replayed replies,
the tool results). The first difference is the case's :class:`Divergence`: a tool that now
returns something else, a call that is now refused or fails, a request the recording never saw
(one more turn, a retry, a steering message). By default the replay then stops the run with an
error rather than play a reply that answered something else (``on_divergence="continue"``
plays it anyway, to see where the run goes).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .._serialize import to_jsonable
from ..errors import AbortError
from ..event_stream import AssistantMessageEventStream
from ..testing import Call, Reply, ScriptedModel, Text, Thinking
from ..transcript import get_current_system_prompt
from ..types import (
    AssistantMessage,
    Context,
    Model,
    ModelCost,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    as_stream_options,
    role_of,
)
from .cases import Case
from .recording import Divergence, DivergenceKind, turn_messages

SameResult = Callable[[ToolResultMessage, ToolResultMessage], bool]
"""``same_result(recorded, now)``: whether a tool result counts as the recorded one (the
default compares the tool, the text and ``is_error``; pass your own to ignore a timestamp)."""

PLAYBACK_CHUNK = 1 << 16
"""Characters per streamed delta: a replay streams each block in one piece (it is fast, and
what a listener sees of a delta is not what an evaluation tests)."""


class Replay:
    """The stream function that replays ``case``'s recording (see the module).

    ``same_result`` decides whether a tool result matches the recorded one; with
    ``on_divergence="stop"`` (the default) a divergent request ends with an error, with
    ``"continue"`` it still gets the recorded reply. The first divergence is kept in
    :attr:`divergence`. A request beyond the recording always ends with an error.
    """

    def __init__(
        self,
        case: Case,
        *,
        same_result: SameResult | None = None,
        on_divergence: Literal["stop", "continue"] = "stop",
    ) -> None:
        if case.recording is None:
            raise ValueError(f"case {case.name!r} has no recording to replay")
        if on_divergence not in ("stop", "continue"):
            raise ValueError(f"on_divergence is 'stop' or 'continue', not {on_divergence!r}")
        self.case = case
        self.recording = case.recording
        self.expected: list[Any] = [*turn_messages(case.turns[0]), *case.recording.messages]
        self._replies = [i for i, m in enumerate(self.expected) if isinstance(m, AssistantMessage)]
        self._history = len([m for m in case.history if role_of(m) != "system"])
        self._same_result = same_result or _same_result
        self._stop = on_divergence == "stop"
        self._scripted = ScriptedModel(chunk_size=PLAYBACK_CHUNK)
        # Guards _served and divergence: a run's requests come one at a time, but the
        # stream function may be called from whichever thread runs the loop.
        self._lock = threading.Lock()
        self._served = 0
        self.divergence: Divergence | None = None

    @property
    def served(self) -> int:
        """How many requests were answered so far."""
        with self._lock:
            return self._served

    def __call__(
        self, model: Model, context: Context, options: StreamOptions | dict[str, Any] | None = None
    ) -> AssistantMessageEventStream:
        """The stream function: answer the next request with its recorded reply (or a
        divergence's error)."""
        opts = as_stream_options(options)
        with self._lock:
            number = self._served
            self._served += 1
        script, recorded = self._answer(number, context)
        if recorded is not None:
            model = _recorded_model(recorded)
            _take_permit(opts, model, recorded)
        with self._lock:  # add and play as one step: the script is a queue
            self._scripted.add(script)
            return self._scripted.stream_fn(model, context, opts)

    def _answer(self, number: int, context: Context) -> tuple[Reply, AssistantMessage | None]:
        """The reply for request ``number`` (0-based) and the recorded message it plays."""
        if number >= len(self._replies):
            divergence = Divergence(
                number + 1,
                "unrecorded_request",
                f"the model would be asked request {number + 1}; the recording has "
                f"{len(self._replies)}",
            )
            self._diverge(divergence)
            return Reply(error=f"replay diverged at {divergence}"), None
        position = self._replies[number]
        found = self._check(number, context, position)
        if found is not None:
            self._diverge(found)
            if self._stop:
                return Reply(error=f"replay diverged at {found}"), None
        recorded = self.expected[position]
        return _reply(recorded), recorded

    def _diverge(self, divergence: Divergence) -> None:
        with self._lock:
            if self.divergence is None:
                self.divergence = divergence

    def _check(self, number: int, context: Context, position: int) -> Divergence | None:
        """How request ``number`` differs from the one the recording answered, if it does."""
        recorded_prompt = self.recording.system_prompt
        if recorded_prompt is not None:
            prompt = get_current_system_prompt(context.messages)
            if prompt != recorded_prompt:
                return Divergence(
                    number + 1,
                    "system_prompt",
                    f"the system prompt is {_short(prompt)}; the recording ran with "
                    f"{_short(recorded_prompt)}",
                )
        sent = [m for m in context.messages if role_of(m) != "system"][self._history :]
        found = first_difference(sent, self.expected[:position], self._same_result)
        if found is None:
            return None
        kind, detail = found
        return Divergence(number + 1, kind, detail)


def first_difference(
    sent: Sequence[Any], recorded: Sequence[Any], same_result: SameResult | None = None
) -> tuple[DivergenceKind, str] | None:
    """The first way the messages ``sent`` differ from the ``recorded`` ones, as a kind and a
    sentence, or ``None`` when they are the same conversation."""
    same = same_result or _same_result
    for now, then in zip(sent, recorded, strict=False):
        if isinstance(now, ToolResultMessage) and isinstance(then, ToolResultMessage):
            if now.tool_name == then.tool_name and same(then, now):
                continue
            return _result_difference(now, then)
        if _form(now) != _form(then):
            if role_of(now) == role_of(then) == "user":
                return "prompt", (
                    f"the model would be asked {_short(_text(now))} where the recording has "
                    f"{_short(_text(then))}"
                )
            return "messages", (
                f"a {role_of(now)} message ({_short(_text(now))}) where the recording has a "
                f"{role_of(then)} message ({_short(_text(then))})"
            )
    if len(sent) > len(recorded):
        extra = sent[len(recorded)]
        if role_of(extra) == "user":
            return "prompt", f"the model would be asked {_short(_text(extra))}, which the " \
                "recording never saw"  # fmt: skip
        return "messages", f"an extra {role_of(extra)} message ({_short(_text(extra))}) the " \
            "recording never saw"  # fmt: skip
    if len(sent) < len(recorded):
        missing = recorded[len(sent)]
        return "messages", f"the recording had a {role_of(missing)} message here " \
            f"({_short(_text(missing))}) that this run did not send"  # fmt: skip
    return None


def _result_difference(now: ToolResultMessage, then: ToolResultMessage) -> tuple[
    DivergenceKind, str
]:
    call = f"{now.tool_name} ({now.tool_call_id})"
    if now.is_error and not then.is_error:
        return "refused", (
            f"the call {call} was refused or failed: {_short(_text(now))}; the recording had "
            f"{_short(_text(then))}"
        )
    if now.tool_name != then.tool_name:
        return "messages", f"a result of {now.tool_name} where the recording has one of " \
            f"{then.tool_name}"  # fmt: skip
    return "tool_result", (
        f"{call} now returns {_short(_text(now))}; the recording had {_short(_text(then))}"
    )


def _same_result(recorded: ToolResultMessage, now: ToolResultMessage) -> bool:
    return _form(recorded) == _form(now)


def _form(message: Any) -> Any:
    """What a model reads of a message (no ids, timestamps, usage or durations)."""
    role = role_of(message)
    if isinstance(message, UserMessage):
        return role, _text(message), _images(message.content)
    if isinstance(message, AssistantMessage):
        calls = [(c.name, to_jsonable(c.arguments)) for c in message.content
                 if isinstance(c, ToolCall)]  # fmt: skip
        return role, message.text, calls
    if isinstance(message, ToolResultMessage):
        return role, message.tool_name, _text(message), _images(message.content), message.is_error
    return role, to_jsonable(message)


def _text(message: Any) -> str:
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(message, AssistantMessage):
        calls = [f"{c.name}({to_jsonable(c.arguments)})" for c in message.content
                 if isinstance(c, ToolCall)]  # fmt: skip
        return message.text + (" " if message.text and calls else "") + ", ".join(calls)
    return "".join(c.text for c in content or () if isinstance(c, TextContent))


def _images(content: Any) -> list[str]:
    if isinstance(content, str):
        return []
    return [getattr(c, "data", "") for c in content if getattr(c, "type", None) == "image"]


def _short(text: str, limit: int = 100) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _reply(message: AssistantMessage) -> Reply:
    """A recorded reply as a script entry: its blocks, usage and ending."""
    parts: list[Text | Thinking | Call] = []
    for block in message.content:
        if isinstance(block, TextContent):
            parts.append(Text(block.text))
        elif isinstance(block, ThinkingContent):
            parts.append(Thinking(block.thinking, block.signature))
        elif isinstance(block, ToolCall):
            parts.append(Call(block.name, dict(block.arguments), block.id))
    usage = message.usage.model_copy(deep=True)
    if message.stop_reason == "error":
        return Reply(parts, usage=usage, error=message.error_message or "the model failed")
    return Reply(parts, stop_reason=message.stop_reason, usage=usage)


def _recorded_model(message: AssistantMessage) -> Model:
    """The model that gave ``message``, as far as the recording tells: its API, provider and
    id (a replayed reply carries them, and a rate limiter counts it in that model's bucket),
    priced so that the builder's cost of its usage comes out as recorded (it prices every
    reply from its model's per-million rates)."""
    return Model(
        id=message.model, name=message.model, api=message.api, provider=message.provider,
        base_url="", cost=_prices_of(message),
    )  # fmt: skip


def _prices_of(message: AssistantMessage) -> ModelCost:
    """Per-million prices that turn ``message``'s tokens into its recorded cost."""
    usage, cost = message.usage, message.usage.cost

    def rate(spent: float, tokens: int) -> float:
        return spent * 1_000_000 / tokens if tokens else 0.0

    return ModelCost(
        input=rate(cost.input, usage.input),
        output=rate(cost.output, usage.output),
        cache_read=rate(cost.cache_read, usage.cache_read),
        cache_write=rate(cost.cache_write, usage.cache_write),
    )


def _take_permit(options: StreamOptions, model: Model, recorded: AssistantMessage) -> None:
    """A replayed request counts against the run's rate limiter, as a real one would: it waits
    for a permit (abortably) and settles it with the recorded usage."""
    limiter = options.rate_limiter
    if limiter is None:
        return
    usage = recorded.usage
    try:
        permit = limiter.acquire(model, usage.total_tokens or usage.input + usage.output,
                                 options.signal)  # fmt: skip
    except AbortError:
        return  # the playback sees the abort at its first step and ends as aborted
    permit.settle(usage)
