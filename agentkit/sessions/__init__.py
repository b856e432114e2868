"""Durable runs: sessions, their stores, resuming after a crash.

A :class:`Session` is a named, append-only transcript in a :class:`SessionStore` (SQLite by
default; Redis and PostgreSQL as extras). ``Agent(session=Session("chat"))`` loads it and
appends each message as it ends, before listeners hear of it. See docs/sessions.md.
"""

from .base import (
    SessionConflictError,
    SessionCorruptError,
    SessionError,
    SessionImportError,
    SessionInfo,
    SessionStore,
    SessionStoreError,
    decode_message,
    encode_message,
)
from .jsonl import read_jsonl
from .session import (
    CRASHED_TEXT,
    INTERRUPTED_TEXT,
    Session,
    SessionWriter,
    import_jsonl,
    interrupted_tool_calls,
    open_store,
    settle_aborted,
    settle_plainly,
)
from .sqlite import SqliteStore

__all__ = [
    "INTERRUPTED_TEXT",
    "Session",
    "SessionConflictError",
    "SessionCorruptError",
    "SessionError",
    "SessionImportError",
    "SessionInfo",
    "SessionStore",
    "SessionStoreError",
    "SessionWriter",
    "SqliteStore",
    "decode_message",
    "encode_message",
    "import_jsonl",
    "interrupted_tool_calls",
    "open_store",
    "read_jsonl",
    "settle_aborted",
    "settle_plainly",
    "CRASHED_TEXT",
]
