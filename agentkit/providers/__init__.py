"""Talking to models: one module per wire API, sharing SSE parsing, HTTP and the model catalog.

``stream(model, context, options)`` returns an ``AssistantMessageEventStream`` at once and never
raises for a request failure (the stream ends with an ``error`` event instead);
``stream_simple`` also maps a thinking level; ``complete``/``complete_simple`` return the final
message.

Where things live:

- ``registry.py``: ``register_api``, dispatch on ``model.api``, ``stream``/``complete``.
- ``openai_completions.py``, ``openai_responses.py``, ``anthropic.py``, ``google.py``: one wire
  API each (request body from our transcript, stream events to our message).
- ``common.py``: the message builder and the background request every API shares.
- ``http.py``: one streaming POST with retries, timeouts, abort and key scrubbing.
- ``sse.py`` and ``json_stream.py``: event-stream parsing, streamed JSON (tool arguments,
  Gemini's JSON array).
- ``transform.py``: making a transcript fit the target API (ids, thinking, orphans, images).
- ``catalog.py`` + ``models.json``: the model catalog and local-server presets.
- ``keys.py``: API keys from the environment.
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
