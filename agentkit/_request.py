"""One model request, made as the loop makes every request: the stream function called (on
this thread when nothing needs the waits to wake early), its events read abortably (given up on
``tool_abort_grace`` seconds after an abort, ended at the run's deadline) and folded into the
transcript as they stream; and :func:`request_once`, the same path without events (a summary,
a judge).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

from .abort import ABORTED_TEXT, AbortSignal
from .config import StreamFn
from .event_stream import consuming_here
from .events import (
    AgentEvent,
    DoneEvent,
    ErrorEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StartEvent,
)
from .policy import ModelRequest
from .results import RunResult
from .transcript import failure_message
from .types import AssistantMessage, Context, Model, StreamOptions
from .waits import Deadline, wait_or_give_up


def _open(
    stream_fn: StreamFn, model: Model, context: Context, options: StreamOptions, here: bool
) -> Any:
    """Call the stream function. ``here``: this thread reads the stream at once and to its
    end, so the request may be read on it (an abort shuts the request's socket). A run deadline
    needs its waits to wake on time, so with one the request keeps a thread of its own."""
    if here:
        with consuming_here():
            return stream_fn(model, context, options)
    return stream_fn(model, context, options)


@contextlib.contextmanager
def _reading(
    response: Any, signal: AbortSignal, grace: float, deadline: Deadline | None
) -> Iterator[Iterator[Any]]:
    """The response's events, waited for abortably (see :func:`wait_or_give_up`); the
    response is closed when the reading ends, so a request left early gives back its
    connection."""
    events = wait_or_give_up(response.get, signal, response.wake, grace, deadline)
    try:
        yield events
    finally:
        events.close()
        close = getattr(response, "close", None)
        if close is not None:
            close()


def stream_response(
    request: ModelRequest,
    context_messages: list[Any],
    emit: Callable[[AgentEvent], None],
    result: RunResult,
    grace: float,
    deadline: Deadline | None,
) -> tuple[AssistantMessage, bool]:
    """Make the request; fold its stream into the transcript (``context_messages``), emitting
    the start and update events. Return the final message and whether it started (then it is in
    the transcript already, in its partial's place). A provider's error is kept on ``result``
    (its ``raise_for_error`` raises it)."""
    here = deadline is None or deadline.ends is None
    response = _open(request.stream_fn, request.model, request.context, request.options, here)
    partial: AssistantMessage | None = None
    final: AssistantMessage | None = None
    with _reading(response, request.signal, grace, deadline) as events:
        for event in events:
            if event is None:
                final = response.result()  # raises: the stream ended without done or error
                break
            if isinstance(event, StartEvent):
                partial = event.partial
                context_messages.append(partial)
                emit(MessageStartEvent(snapshot(partial)))
            elif isinstance(event, (DoneEvent, ErrorEvent)):
                final = response.result()
                if isinstance(event, ErrorEvent) and event.provider_error is not None:
                    result.error = event.provider_error  # raise_for_error raises it
                break
            elif partial is not None:
                partial = event.partial
                context_messages[-1] = partial
                emit(MessageUpdateEvent(snapshot(partial), event))
    if final is None:  # the stream ignored the abort for the whole grace period
        final = aborted_message(partial, request.model)
    if partial is not None:
        context_messages[-1] = final
    return final, partial is not None


def side_options(
    options: StreamOptions, api_key: str | None, signal: AbortSignal, max_tokens: int | None
) -> StreamOptions:
    """The options of a request made beside the turns (a summary, a judge): no tools, no
    reasoning, no output schema; the run's key, signal and (when given) ``max_tokens``."""
    update: dict[str, Any] = {
        "api_key": api_key or options.api_key,
        "signal": signal,
        "reasoning": None,
        "tool_choice": None,
        "output_schema": None,
    }
    if max_tokens is not None:
        update["max_tokens"] = max_tokens
    return options.model_copy(update=update)


def side_request(
    model: Model,
    stream_fn: StreamFn,
    options: StreamOptions,
    messages: list[Any],
    signal: AbortSignal,
    *,
    get_api_key: Callable[[str], str | None] | None = None,
    max_tokens: int | None = None,
    purpose: str = "summary",
) -> ModelRequest:
    """A request beside the turns (a summary, a judge) of ``messages``, with
    :func:`side_options` and the key ``get_api_key`` gives for the model's provider."""
    api_key = get_api_key(model.provider) if get_api_key is not None else None
    options = side_options(options, api_key, signal, max_tokens)
    return ModelRequest(model, Context(messages=messages), options, stream_fn, signal, purpose)


def read_quietly(request: ModelRequest, grace: float, deadline: Deadline | None) -> AssistantMessage:
    """Make ``request`` and read its response to the end without events, as the loop reads
    its own (abortable, given up on ``grace`` seconds after an abort, ended at the
    ``deadline``); the final message, an ``aborted`` one when the stream never ended."""
    response = request.stream_fn(request.model, request.context, request.options)
    final: AssistantMessage | None = None
    with _reading(response, request.signal, grace, deadline) as events:
        for event in events:
            if event is None or isinstance(event, (DoneEvent, ErrorEvent)):
                final = response.result()
                break
    return final if final is not None else aborted_message(None, request.model)


def request_once(
    model: Model,
    stream_fn: StreamFn,
    options: StreamOptions,
    messages: list[Any],
    signal: AbortSignal,
    *,
    get_api_key: Callable[[str], str | None] | None = None,
    grace: float = 2.0,
    deadline: Deadline | None = None,
) -> AssistantMessage:
    """One request without tools and without events, outside a run (``agent.compact()``): made
    as the loop makes its own (:func:`read_quietly`). Returns the final message, an ``error``
    or ``aborted`` one when it failed; the caller counts its usage."""
    request = side_request(model, stream_fn, options, messages, signal, get_api_key=get_api_key)
    return read_quietly(request, grace, deadline)


def snapshot(message: AssistantMessage) -> AssistantMessage:
    """A shallow copy of a streaming message with its own content list (SPEC 3.2), so that a
    listener never sees the provider's later appends to the message it was given.

    ``copy.copy`` is pydantic's own shallow copy; it is built here rather than through
    ``model_copy(update=...)``, which costs a third more, once per streamed delta."""
    copied = copy.copy(message)
    copied.__dict__["content"] = list(message.content)
    return copied


def aborted_message(partial: AssistantMessage | None, model: Model) -> AssistantMessage:
    """The message for a stream that did not end after an abort."""
    if partial is not None:
        partial = partial.model_copy()
        partial.content = list(partial.content)
    return failure_message("aborted", ABORTED_TEXT, model, partial=partial)
