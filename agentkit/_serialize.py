"""Strict JSON: the one place where agentkit makes data that every encoder accepts, and writes it.

Strict JSON has no ``NaN`` or ``Infinity`` and no lone UTF-16 surrogate (which no UTF-8 encoder
accepts). Values are cleaned where they enter a transcript, an event or a store, so that one
odd value a tool returned or a user typed cannot poison every later request, log line or stored
session. The events, the session stores, tracing, Celery, the command line and the providers'
request body all go through the functions here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import fields, is_dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

from .errors import ProviderError

LLM_ROLES = frozenset({"system", "user", "assistant", "tool_result"})
"""The message roles a model understands; messages of other roles are the application's own."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone UTF-16 surrogate replaced by U+FFFD; a high-low pair written as
    two code points becomes the character it encodes. The same object when clean."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _clean_scalar(value: Any) -> bool:
    """Whether ``value`` is a scalar :func:`clean_message` would leave as it is."""
    if isinstance(value, str):
        return clean_text(value) is value
    return value is None or isinstance(value, (bool, int, float))


def clean_json(value: Any, floats: bool = True) -> Any:
    """``value`` (plain JSON data) with lone surrogates and, if ``floats``, non-finite floats
    (as ``None``) replaced; the very same object when nothing needed replacing."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return value if not floats or math.isfinite(value) else None
    if isinstance(value, dict):
        items = [(clean_json(k, floats), clean_json(v, floats)) for k, v in value.items()]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list):
        cleaned = [clean_json(v, floats) for v in value]
        if all(a is b for a, b in zip(cleaned, value, strict=True)):
            return value
        return cleaned
    return value


def to_serialisable(value: Any) -> Any:
    """``value`` as plain JSON data that every encoder accepts: the form data enters in.

    Objects JSON cannot hold become their ``repr``; non-finite floats (``1e400`` is ``inf``)
    become ``None``; lone surrogates become U+FFFD. Used where tool results and prompts enter
    the transcript, so one bad value cannot poison every later request.
    """
    return clean_json(to_jsonable_python(value, fallback=repr, serialize_unknown=True))


def clean_message(message: Any) -> Any:
    """``message`` with lone surrogates in its strings replaced by U+FFFD (a copy only when one
    was found), so that its text encodes as UTF-8 in every later request.

    Application messages (any object with a ``role`` that is not a pydantic model) pass through.
    """
    if not isinstance(message, BaseModel):
        return message
    if not message.__pydantic_extra__ and all(map(_clean_scalar, message.__dict__.values())):
        return message  # the common case (plain text, an image), without dumping it
    dumped = message.model_dump(mode="python")
    cleaned = clean_json(dumped, floats=False)
    return message if cleaned is dumped else type(message).model_validate(cleaned)


def to_jsonable(value: Any) -> Any:
    """Turn events, pydantic models and containers of them into JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, ProviderError):
        return {"message": str(value), "status": value.status, "retry_after": value.retry_after}
    role = getattr(value, "role", None)
    if isinstance(role, str):  # an application's own message object
        data = {k: v for k, v in vars(value).items() if not k.startswith("_")}
        return to_jsonable(data)
    return repr(value)


def event_data(event: Any) -> dict[str, Any]:
    """An event as strict JSON-ready data, its ``type`` first."""
    data = to_serialisable(to_jsonable(event))
    assert isinstance(data, dict)
    return {"type": data.pop("type"), **data}


def dumps(data: Any) -> str:
    """``data`` as compact strict JSON text (UTF-8 characters as they are, no NaN).

    Raises ``ValueError`` for a non-finite float and ``TypeError`` for what JSON cannot hold:
    pass data through :func:`to_serialisable` first where either may occur.
    """
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode_body(payload: Any) -> bytes:
    """``payload`` as a request's UTF-8 JSON body.

    pydantic-core's encoder writes the same JSON as ``json.dumps(ensure_ascii=False)`` (compact)
    about three times faster, which a run pays on its whole transcript every turn. What enters a
    message is made serialisable where it enters (builder, json_stream); the standard encoder
    is only the fallback for what pydantic-core refuses: a lone surrogate an application put in
    the transcript (sent as "?", like any unencodable character) or an object an ``on_payload``
    hook added (which then raises ``json.dumps``'s own ``TypeError``).
    """
    try:
        return to_json(payload)
    except PydanticSerializationError:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8", "replace")
