"""Which stream function serves which wire API, and the ``stream``/``complete`` entry points.

The four built-in APIs are registered from the start, each module imported when a request first
asks for its API (a run on one API loads no other's code); ``register_api`` adds or replaces one.
``stream`` dispatches on ``model.api`` and, like every stream function, never raises for a failure:
an unknown API ends the stream with an error event. ``stream_simple`` maps a thinking level
(``options.reasoning``) to each API's own options first.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from ..event_stream import AssistantMessageEventStream
from ..events import ErrorEvent
from ..transcript import failure_message
from ..types import (
    AnthropicOptions,
    AssistantMessage,
    Context,
    GoogleOptions,
    Model,
    OpenAIOptions,
    StreamOptions,
    as_stream_options,
)

StreamFunction = Callable[..., AssistantMessageEventStream]
"""``(model, context, options=None) -> AssistantMessageEventStream``."""

ReasoningMapper = Callable[[Model, str | None, dict[str, int] | None], dict[str, Any]]
"""``(model, level, thinking_budgets) -> {group: fields}`` for ``stream_simple``: the fields to
set in the per-API option groups of :class:`StreamOptions` (``"anthropic"``, ``"openai"``,
``"google"``)."""

_OPTION_GROUPS: dict[str, type[AnthropicOptions | OpenAIOptions | GoogleOptions]] = {
    "anthropic": AnthropicOptions,
    "openai": OpenAIOptions,
    "google": GoogleOptions,
}
"""The per-API option groups of :class:`StreamOptions` a reasoning mapper may fill."""

# Guards _apis, _mappers and _builtin (a built-in's module is imported under it, once).
_lock = threading.Lock()
_apis: dict[str, StreamFunction] = {}
_mappers: dict[str, ReasoningMapper] = {}
_builtin: dict[str, tuple[str, str]] = {
    "openai-completions": ("openai_completions", "stream_openai_completions"),
    "openai-responses": ("openai_responses", "stream_openai_responses"),
    "anthropic-messages": ("anthropic", "stream_anthropic"),
    "google-generative-ai": ("google", "stream_google"),
}
"""Built-in APIs not loaded yet: their module and its stream function (each module's
``reasoning_options`` is the mapper); registering or unregistering one drops it from here."""


def _load_builtin(api: str) -> None:
    """Import the built-in module of ``api`` and register it (call with ``_lock`` held)."""
    module_name, function = _builtin.pop(api)
    module = importlib.import_module(f".{module_name}", __package__)
    _apis[api] = getattr(module, function)
    _mappers[api] = module.reasoning_options


def register_api(
    api: str, stream_fn: StreamFunction, reasoning_mapper: ReasoningMapper | None = None
) -> None:
    """Serve ``api`` with ``stream_fn``; ``reasoning_mapper`` tells ``stream_simple`` how to
    turn a thinking level into that function's options (none: the level is ignored)."""
    with _lock:
        _builtin.pop(api, None)
        _apis[api] = stream_fn
        if reasoning_mapper is not None:
            _mappers[api] = reasoning_mapper
        else:
            _mappers.pop(api, None)


def unregister_api(api: str) -> None:
    """Stop serving ``api`` (mostly for tests)."""
    with _lock:
        _builtin.pop(api, None)
        _apis.pop(api, None)
        _mappers.pop(api, None)


def get_api(api: str) -> StreamFunction | None:
    """The stream function registered for ``api``, or ``None``."""
    with _lock:
        if api in _builtin:
            _load_builtin(api)
        return _apis.get(api)


def registered_apis() -> list[str]:
    """The APIs that have a stream function, sorted."""
    with _lock:
        return sorted({*_apis, *_builtin})


def _failed(model: Model, message: str) -> AssistantMessageEventStream:
    stream = AssistantMessageEventStream()
    stream.push(ErrorEvent(reason="error", error=failure_message("error", message, model)))
    return stream


def stream(
    model: Model | dict[str, Any],
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Stream one response from ``model`` with the function registered for ``model.api``."""
    if isinstance(model, dict):
        model = Model.model_validate(model)
    fn = get_api(model.api)
    if fn is None:
        known = ", ".join(registered_apis())
        return _failed(model, f"No stream function registered for API '{model.api}' ({known})")
    return fn(model, context, options)


def complete(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessage:
    """The final message of :func:`stream` (blocks until the response has ended)."""
    return stream(model, context, options).result()


def simple_options(
    model: Model, options: StreamOptions | dict[str, Any] | None
) -> StreamOptions | dict[str, Any] | None:
    """``options`` with ``reasoning`` turned into ``model.api``'s own options."""
    try:
        opts = as_stream_options(options)
    except ValueError:
        return options  # the stream function reports bad options as an error event
    with _lock:
        if model.api in _builtin:
            _load_builtin(model.api)
        mapper = _mappers.get(model.api)
    if mapper is None:
        return opts
    extra = mapper(model, opts.reasoning, opts.thinking_budgets)
    if not extra:
        return opts
    # The mapped level wins over the same option set by hand; other hand-set options stay.
    update: dict[str, Any] = {}
    for name, value in extra.items():
        if name in _OPTION_GROUPS:
            current = getattr(opts, name)
            values = current.model_dump(exclude_unset=True) if current is not None else {}
            values.update(value)
            update[name] = _OPTION_GROUPS[name].model_validate(values)
        elif name in type(opts).model_fields:  # e.g. an API's own StreamOptions subclass
            update[name] = value
        else:
            raise ValueError(
                f"the reasoning mapper of {model.api!r} set {name!r}, which "
                f"{type(opts).__name__} does not have"
            )
    return opts.model_copy(update=update)


def stream_simple(
    model: Model | dict[str, Any],
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Like :func:`stream`, with ``options.reasoning`` (a thinking level) mapped per API."""
    if isinstance(model, dict):
        model = Model.model_validate(model)
    return stream(model, context, simple_options(model, options))


def complete_simple(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessage:
    """The final message of :func:`stream_simple`."""
    return stream_simple(model, context, options).result()
