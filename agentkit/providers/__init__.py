"""Talking to models: one module per wire API, sharing SSE parsing, HTTP and the model catalog.

``stream(model, context, options)`` returns an ``AssistantMessageEventStream`` at once and never
raises for a request failure (the stream ends with an ``error`` event instead);
``stream_simple`` also maps a thinking level; ``complete``/``complete_simple`` return the final
message.

Where things live:

- ``registry.py``: ``register_api``, dispatch on ``model.api``, ``stream``/``complete``.
- ``openai_completions.py``, ``openai_responses.py``, ``anthropic.py``, ``google.py``: one wire
  API each (request body from our transcript, the request's tool choice and output schema in
  the API's own spelling, stream events to our message).
- ``wire.py``: what those modules spell alike (the portable tool choice, a closed schema,
  llama.cpp's ``json_schema``).
- ``builder.py``: :class:`MessageBuilder`, the streamed message every API (and
  ``agentkit.testing``) builds.
- ``runner.py``: one request on a background thread, and the one retry policy (which statuses
  retry, ``Retry-After``, backoff with jitter, the longest wait).
- ``http.py`` and ``chunked.py``: one streaming POST on a pooled, kept-alive connection, its
  chunked body read as it arrives; abort; key scrubbing.
- ``sse.py`` and ``json_stream.py``: event-stream parsing, streamed JSON (tool arguments,
  Gemini's JSON array).
- ``transform.py``: making a transcript fit the target API (ids, thinking, orphans, images).
- ``table.py``: the provider table (labels, key variables and API keys from the environment,
  keyless providers, default models, server quirks).
- ``catalog.py`` + ``models.json``: the model catalog and local-server presets.

The names below are imported on first use, so ``import agentkit`` does not load the HTTP stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .catalog import (
        LOCAL_SERVERS,
        UnknownModelError,
        get_model,
        get_models,
        get_providers,
        local_model,
        model_from_spec,
        register_model,
    )
    from .json_stream import parse_streaming_json
    from .registry import (
        complete,
        complete_simple,
        get_api,
        register_api,
        registered_apis,
        stream,
        stream_simple,
        unregister_api,
    )
    from .table import configured_provider, get_env_api_key, provider_label

_LAZY: dict[str, str] = {
    "LOCAL_SERVERS": "catalog",
    "UnknownModelError": "catalog",
    "get_model": "catalog",
    "get_models": "catalog",
    "get_providers": "catalog",
    "local_model": "catalog",
    "model_from_spec": "catalog",
    "register_model": "catalog",
    "parse_streaming_json": "json_stream",
    "complete": "registry",
    "complete_simple": "registry",
    "get_api": "registry",
    "register_api": "registry",
    "registered_apis": "registry",
    "stream": "registry",
    "stream_simple": "registry",
    "unregister_api": "registry",
    "configured_provider": "table",
    "get_env_api_key": "table",
    "provider_label": "table",
}

__all__ = [
    "LOCAL_SERVERS",
    "UnknownModelError",
    "complete",
    "complete_simple",
    "configured_provider",
    "get_api",
    "get_env_api_key",
    "get_model",
    "get_models",
    "get_providers",
    "local_model",
    "model_from_spec",
    "parse_streaming_json",
    "provider_label",
    "register_api",
    "register_model",
    "registered_apis",
    "stream",
    "stream_simple",
    "unregister_api",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
