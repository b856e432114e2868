"""Talking to models: one module per wire API, sharing SSE parsing, HTTP and the model catalog.

``stream(model, context, options)`` returns an :class:`~agentkit.event_stream.AssistantMessageEventStream`
at once and never raises for a request failure (the stream ends with an ``error`` event instead);
``stream_simple`` also maps a thinking level; ``complete``/``complete_simple`` return the final
message.
"""

from __future__ import annotations

from .catalog import (
    LOCAL_SERVERS,
    UnknownModelError,
    get_model,
    get_models,
    get_providers,
    local_model,
    register_model,
)
from .json_stream import parse_streaming_json
from .keys import get_env_api_key
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

__all__ = [
    "LOCAL_SERVERS",
    "UnknownModelError",
    "complete",
    "complete_simple",
    "get_api",
    "get_env_api_key",
    "get_model",
    "get_models",
    "get_providers",
    "local_model",
    "parse_streaming_json",
    "register_api",
    "register_model",
    "registered_apis",
    "stream",
    "stream_simple",
    "unregister_api",
]
