"""What every session store is: the :class:`SessionStore` contract, its errors, and the codec.

A store keeps, per session name, an append-only list of JSON records (one per message) and a
version, the number of records. Appends are *optimistic*: the writer says which version it
appended to, and a store whose session has moved on raises :class:`SessionConflictError` without
writing anything. Every append of several records is atomic: all of them or none.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .._pg import safe_url
from .._serialize import LLM_ROLES, dumps, to_jsonable
from ..errors import (  # noqa: F401 - the session errors stay importable from here
    SessionConflictError,
    SessionCorruptError,
    SessionError,
    SessionImportError,
    SessionStoreError,
)
from ..types import Message, role_of
from .runlog_base import RunLogStore

_MESSAGE = TypeAdapter(Message)

_run_logs_lock = threading.Lock()  # guards each store's _run_log while it is first opened


@dataclass(frozen=True)
class SessionInfo:
    """One session as :meth:`SessionStore.list` reports it."""

    name: str
    messages: int
    """How many messages it holds (what :meth:`Session.load` reads; its marker records are
    not messages)."""
    updated_ms: int


class SessionStore(ABC):
    """A place sessions live: SQLite (the default), Redis or PostgreSQL.

    Records are opaque JSON text to a store; :func:`encode_message` and :func:`decode_message`
    turn messages into records and back. Methods may be called from any thread.
    """

    url: str = ""

    @property
    def display_url(self) -> str:
        """The store's URL without a password (nor a query, which may hold one), for
        messages and logs."""
        return safe_url(self.url)

    @abstractmethod
    def load(self, name: str) -> tuple[list[str], int]:
        """The session's records and its version (``([], 0)`` for a session never written)."""

    @abstractmethod
    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        """Append ``records`` atomically if the session is at ``expected_version``; return the
        new version. Raises :class:`SessionConflictError` (nothing written) otherwise."""

    def awaiting_approval(self) -> list[SessionInfo]:
        """The sessions that may have tool calls waiting for a decision, by name: every one
        that has, and perhaps a few that no longer do (read each to know; see
        :mod:`agentkit.sessions.waiting`). The stores of agentkit answer from an index they keep
        as records are appended; a store without one names every session."""
        return self.list()

    @abstractmethod
    def list(self) -> list[SessionInfo]:
        """Every session with at least one message, by name."""

    @abstractmethod
    def delete(self, name: str) -> bool:
        """Remove the session; return whether it existed."""

    def close(self) -> None:  # noqa: B027 - a store without resources needs no close
        """Release the store's connections."""

    run_logs: bool = True
    """Whether runs of agents with sessions in this store keep a run log (:mod:`agentkit.runlog`);
    set it to ``False`` on a store object, before its agents run, for runs nobody follows."""

    def run_log(self) -> RunLogStore:
        """The store's run logs (:mod:`agentkit.runlog`): opened at the first call, on
        connections of their own, and closed with the store. Raises
        :class:`~agentkit.errors.RunLogError` for a store that keeps none, or whose
        :attr:`run_logs` is off."""
        if not self.run_logs:
            from ..errors import RunLogError

            raise RunLogError(f"run logs are off for the session store {self.display_url}")
        with _run_logs_lock:
            log: RunLogStore | None = self.__dict__.get("_run_log")
            if log is None:
                log = self._open_run_log()
                self.__dict__["_run_log"] = log
            return log

    def _open_run_log(self) -> RunLogStore:
        """A new run log in this store (what a store that keeps them overrides)."""
        from ..errors import RunLogError

        raise RunLogError(f"the session store {self.display_url} keeps no run log")

    def _close_run_log(self) -> None:
        """Close the run log if one was opened (a store's ``close()`` calls this first)."""
        with _run_logs_lock:
            log: RunLogStore | None = self.__dict__.pop("_run_log", None)
        if log is not None:
            log.close()

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_complete(
    store: SessionStore, name: str, positions: Sequence[int], version: int
) -> None:
    """Raise :class:`SessionCorruptError` unless the loaded records' ``positions`` are exactly
    ``0 .. version - 1``: a record deleted (or added) outside agentkit is named, not loaded."""
    for expected, position in enumerate(positions):
        if position != expected:
            raise SessionCorruptError(store.display_url, name, expected, "is missing")
    if len(positions) < version:
        reason = f"is missing (the store holds {len(positions)} of its {version} messages)"
        raise SessionCorruptError(store.display_url, name, len(positions), reason)
    if len(positions) > version:
        raise SessionCorruptError(
            store.display_url, name, version, "is past the session's version (stored outside it)"
        )


def check_name(name: str) -> str:
    """A session name: 1 to 200 printable characters without whitespace at either end."""
    if not isinstance(name, str) or not name or len(name) > 200 or name != name.strip():
        raise ValueError(f"invalid session name {name!r}: use 1-200 characters, no outer spaces")
    if not name.isprintable():
        raise ValueError(f"invalid session name {name!r}: only printable characters")
    return name


def encode_message(message: Any) -> str:
    """A message as one line of JSON. Pydantic messages keep every field, so they load back
    equal; an application's own message objects are stored as their public attributes and load
    back as dicts."""
    if isinstance(message, BaseModel):
        data = message.model_dump(mode="json")
    elif role_of(message) is not None:  # a dict, or an application's own message object
        data = to_jsonable(message)
    else:
        raise TypeError(f"cannot store a {type(message).__name__} without a 'role'")
    return dumps(data)


def decode_message(record: str | dict[str, Any]) -> Any:
    """A stored record as a message: a pydantic message for the standard roles, else a dict."""
    data = json.loads(record) if isinstance(record, str) else record
    if not isinstance(data, dict) or role_of(data) is None:
        raise ValueError("a message must be a JSON object with a string 'role'")
    if data["role"] in LLM_ROLES:
        return _MESSAGE.validate_python(data)
    if data["role"].startswith("approval_") or data["role"] == "run_end":  # a transcript entry
        from ..transcript import decode_entry

        return decode_entry(data)
    return data
