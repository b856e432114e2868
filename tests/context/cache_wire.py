"""The four wire APIs' recorded streams (``tests/policies/guardrails/wire.py``) with the usage a
cache test needs put in place of the recorded one, as each vendor spells it: Chat Completions'
``prompt_tokens_details`` (``cached_tokens``; OpenRouter's ``cache_write_tokens``),
Responses' ``input_tokens_details``, Anthropic's ``cache_read_input_tokens`` and
``cache_creation_input_tokens``, Gemini's ``cachedContentTokenCount``."""

from __future__ import annotations

import json
from typing import Any

from tests.policies.guardrails.wire import APIS, text_stream, tool_stream

__all__ = ["APIS", "WRITES", "answer", "call"]

WRITES = {"openai-completions", "anthropic-messages"}
"""The APIs whose usage reports cache writes (OpenAI and Gemini bill none)."""

OUTPUT = 5
"""The output tokens every stream reports."""


def answer(api: str, text: str, usage: Any) -> bytes:
    """A stream of ``api`` answering ``text`` with ``usage`` (see :func:`with_usage`)."""
    return with_usage(api, text_stream(api, [text]), usage)


def call(api: str, name: str, arguments: dict[str, Any], usage: Any) -> bytes:
    """A stream of ``api`` calling ``name`` with ``usage`` (see :func:`with_usage`)."""
    return with_usage(api, tool_stream(api, name, arguments), usage)


def with_usage(api: str, body: bytes, usage: Any) -> bytes:
    """``body`` with its usage replaced: ``usage`` is ``(input, cache_read, cache_write)``
    (agentkit's meaning: ``input`` leaves the cached tokens out), ``"no-cache"`` (usage without
    any cache field), ``"missing"`` (no usage at all), ``"negative"`` (negative counts) or ``"odd"`` (cache
    fields of the wrong type)."""
    text = body.decode()
    separator = "\r\n\r\n" if "\r\n\r\n" in text else "\n\n"
    out = []
    for chunk in text.split(separator):
        if not chunk.strip():
            continue
        lines = chunk.splitlines()
        for index, line in enumerate(lines):
            if line.startswith("data:"):
                try:
                    data = json.loads(line[5:].strip())
                except ValueError:
                    continue
                lines[index] = "data: " + json.dumps(_replace(api, data, usage))
        out.append("\n".join(lines))
    return (separator.join(out) + separator).encode()


def _replace(api: str, value: Any, usage: Any) -> Any:
    if isinstance(value, list):
        return [_replace(api, v, usage) for v in value]
    if not isinstance(value, dict):
        return value
    changed = {}
    for key, item in value.items():
        if key in ("usage", "usageMetadata") and isinstance(item, dict):
            if usage == "missing":
                continue
            changed[key] = _wire_usage(api, usage)
        else:
            changed[key] = _replace(api, item, usage)
    return changed


def _wire_usage(api: str, usage: Any) -> dict[str, Any]:
    if usage == "odd":  # cache fields of the wrong type: a list, a string, null
        return {
            "openai-completions": {"prompt_tokens": 40, "completion_tokens": OUTPUT,
                                   "prompt_tokens_details": [7]},
            "openai-responses": {"input_tokens": 40, "output_tokens": OUTPUT,
                                 "input_tokens_details": "7"},
            "anthropic-messages": {"input_tokens": 40, "output_tokens": OUTPUT,
                                   "cache_read_input_tokens": [7],
                                   "cache_creation_input_tokens": None},
            "google-generative-ai": {"promptTokenCount": 40, "candidatesTokenCount": OUTPUT,
                                     "cachedContentTokenCount": {"n": 7}},
        }[api]  # fmt: skip
    if usage == "negative":
        given, read, write = -7, -3, -2
    elif usage == "no-cache":
        given, read, write = 40, None, None
    else:
        given, read, write = usage
    r, w = read or 0, write or 0
    if api == "openai-completions":
        wire: dict[str, Any] = {"prompt_tokens": given + r + w, "completion_tokens": OUTPUT,
                                "total_tokens": given + r + w + OUTPUT}  # fmt: skip
        if read is not None:
            wire["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": write}
        return wire
    if api == "openai-responses":
        wire = {"input_tokens": given + r, "output_tokens": OUTPUT,
                "total_tokens": given + r + OUTPUT}  # fmt: skip
        if read is not None:
            wire["input_tokens_details"] = {"cached_tokens": read}
        return wire
    if api == "anthropic-messages":
        wire = {"input_tokens": given, "output_tokens": OUTPUT}
        if read is not None:
            wire["cache_read_input_tokens"] = read
            wire["cache_creation_input_tokens"] = write
        return wire
    wire = {"promptTokenCount": given + r, "candidatesTokenCount": OUTPUT,
            "totalTokenCount": given + r + OUTPUT}  # fmt: skip
    if read is not None:
        wire["cachedContentTokenCount"] = read
    return wire
