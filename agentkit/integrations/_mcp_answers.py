"""Answers for JSON-RPC lines the MCP SDK cannot read, so that no request with an id waits for
ever: the SDK validates each line as a JSON-RPC message and drops, unanswered, one that is not
(a request with an id but no method, a numeric method, array params, a null id...). Both of
agentkit's stdio transports look at a line first: ``agentkit mcp serve`` answers every such
request (:mod:`._mcp_stdio_server`), the client of a server's subprocess the requests its
server sends it (:mod:`._mcp_stdio`)."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    jsonrpc_message_adapter,
)

SKIP = "skip"
"""What :func:`answer_for` says of a line nobody answers and the SDK need not see (blank)."""


def answer_for(line: str) -> JSONRPCError | str | None:
    """How the server treats ``line``: ``None`` to pass it on to the SDK (it reads it), a
    JSON-RPC error to answer it with instead, or :data:`SKIP` (a blank line, or a malformed
    notification or response: these are never answered)."""
    if not line.strip():
        return SKIP
    try:
        data = json.loads(line)
    except ValueError:
        return _error(None, PARSE_ERROR, "Parse error: the line is not JSON")
    if not isinstance(data, dict):
        return _error(None, INVALID_REQUEST, "Invalid Request: send one JSON-RPC object a line")
    if "method" not in data and ("result" in data or "error" in data):
        return None if _reads(line) else SKIP  # a client's response is never answered
    if "id" not in data:
        if "method" in data:
            return None if _reads(line) else SKIP  # a notification is never answered
        return _error(None, INVALID_REQUEST, "Invalid Request: no method")
    request_id = data["id"]
    if not _is_request_id(request_id):
        # The SDK would read this as a notification and answer nothing.
        return _error(None, INVALID_REQUEST, "Invalid Request: an id is a string or an integer")
    if _reads(line):
        return None
    if data.get("jsonrpc") != "2.0":
        return _error(request_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if "method" not in data:
        return _error(request_id, INVALID_REQUEST, 'Invalid Request: no "method"')
    if not isinstance(data.get("method"), str):
        return _error(request_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string')
    return _error(request_id, INVALID_PARAMS, 'Invalid params: "params" must be an object')


def _reads(line: str) -> bool:
    """Whether the SDK's stdio reader reads ``line`` as a message (it validates it so)."""
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return False
    return True


def _is_request_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _error(request_id: str | int | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=message))


def answer_to_request(line: str) -> JSONRPCError | None:
    """The error to answer ``line`` with when it is a request the SDK cannot read (a JSON
    object with a ``method`` and an ``id``), else ``None``: what a client answers of what its
    server sends, where anything else unreadable (a stray print) is only skipped."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or "method" not in data or "id" not in data:
        return None
    answer = answer_for(line)
    return answer if isinstance(answer, JSONRPCError) else None
