"""The order a session's messages are read in: every tool result right after its call's message,
and a message another writer stored while a run was mid-turn after that turn.

A session is append-only, so records sit in the order they arrived. Two things arrive out of
place, and loading puts them back (:func:`in_turn_order`, a pure function of the records, so
every reader sees the same transcript):

- **Results of a parallel batch** are stored as each call ends (durable when announced), so in
  completion order; they are read in the order of the calls.
- **A message from another writer** (``agentkit.celery.submit()`` storing a user's second
  message, say) that lands while an agent's run is streaming an answer or running its tool
  batch would otherwise split a turn. The agent's writer notices it at its next append (the
  version moved on), takes it like a steering message, delivered after the turn, and appends a
  :data:`DEFERRED_ROLE` marker before its own record. A marker counts the foreign records just
  before it; they are read after the end of the turn under way (the assistant message and its
  tool results), which is where the run delivered them. A message stored between a tool call
  and its result with no marker (the run crashed before its next append) is read after the
  batch's results too.
"""

from __future__ import annotations

from typing import Any

from ..types import AssistantMessage, ToolCall, now_ms, role_of

DEFERRED_ROLE = "deferred"
"""The role of the marker record an agent's writer stores after messages that another writer
added while its turn was under way (``{"role": "deferred", "count": n}``); never loaded as a
message."""

MOVABLE = frozenset(
    {"assistant", "tool_result", DEFERRED_ROLE, "approval_request", "approval_resume"}
)
"""Roles only a run writes: a record of one of them from another writer is a real conflict (two
runs on one session), never an input to defer. A run that resumes calls decided for approval
claims them with an ``approval_resume`` record, so two resumers at once meet here and the second
runs nothing (see :mod:`agentkit.deferred`); decisions (``approval_decision``) come from anyone
and are inputs."""


def deferral_marker(count: int) -> dict[str, Any]:
    """The marker record for the ``count`` foreign records stored just before it."""
    return {"role": DEFERRED_ROLE, "count": count, "timestamp": now_ms()}


def release_marker() -> dict[str, Any]:
    """The marker record that places every message still waiting for a turn right here: a
    writer that reads the session (an agent attaching, a run ending) stores it when the run
    that deferred them ended before its turn did, so a later run's turn does not take them."""
    return {"role": DEFERRED_ROLE, "count": 0, "release": True, "timestamp": now_ms()}


def _call_ids(message: Any) -> list[str]:
    if not isinstance(message, AssistantMessage) or message.stop_reason in ("error", "aborted"):
        return []  # a failed response's calls never run
    return [block.id for block in message.content if isinstance(block, ToolCall)]


class _Reader:
    """The state of :func:`in_turn_order` as it walks the records once."""

    def __init__(self) -> None:
        self.out: list[Any] = []
        self.calls: list[str] = []  # the open turn's call ids, in call order
        self.results: dict[str, Any] = {}  # their results so far
        self.extra: list[Any] = []  # results for no open call (kept, in arrival order)
        self.held: list[Any] = []  # read after the open turn ends
        self.next_turn: list[Any] = []  # read after the next assistant message's turn ends

    def open(self) -> bool:
        return bool(self.calls)

    def close_turn(self) -> None:
        """The open turn ends: its results in call order, then what waited for it."""
        self.out.extend(self.results.pop(i) for i in self.calls if i in self.results)
        self.out.extend(self.results.values())
        self.out.extend(self.extra)
        self.out.extend(self.held)
        self.calls, self.results, self.extra, self.held = [], {}, [], []

    def assistant(self, message: Any) -> None:
        if self.open():
            self.close_turn()
        self.out.append(message)
        self.calls = _call_ids(message)
        self.held, self.next_turn = self.next_turn, []
        if not self.calls:
            self.close_turn()

    def result(self, message: Any) -> None:
        call_id = getattr(message, "tool_call_id", None)
        if self.open() and call_id in self.calls and call_id not in self.results:
            self.results[call_id] = message
            if len(self.results) == len(self.calls):
                self.close_turn()
        elif self.open():
            self.extra.append(message)
        else:
            self.out.append(message)

    def other(self, message: Any) -> None:
        if self.open():
            self.held.append(message)  # a message inside a batch waits for its results
        else:
            self.out.append(message)

    def marker(self, count: int, before: list[Any]) -> None:
        """``before`` are the records stored before the marker; its ``count`` last ones are
        held for the open turn already, or (placed) are taken back to wait for the next turn."""
        taken: list[Any] = []
        for message in reversed(before[-count:] if count > 0 else []):
            if self.out and self.out[-1] is message:
                taken.insert(0, self.out.pop())
        if self.open():
            self.held.extend(taken)
        else:
            self.next_turn.extend(taken)

    def release(self) -> None:
        if self.open():
            self.held.extend(self.next_turn)
        else:
            self.out.extend(self.next_turn)
        self.next_turn = []

    def end(self) -> tuple[list[Any], bool]:
        waiting = bool(self.next_turn)
        if self.open():
            self.close_turn()
        self.out.extend(self.next_turn)
        return self.out, waiting


def in_turn_order(messages: list[Any]) -> list[Any]:
    """``messages`` as stored (markers included) in the order a run reads them: results right
    after their calls, in call order; deferred messages after the turn they arrived in; no
    markers. A session written by one run at a time comes out unchanged."""
    return read_in_turn_order(messages)[0]


def read_in_turn_order(messages: list[Any]) -> tuple[list[Any], bool]:
    """:func:`in_turn_order`, and whether deferred messages are still waiting for a turn (they
    are read last for now; a :func:`release_marker` keeps them there)."""
    if _in_order(messages):
        return list(messages), False
    reader = _Reader()
    for index, message in enumerate(messages):
        role = role_of(message)
        if role == DEFERRED_ROLE and isinstance(message, dict) and message.get("release"):
            reader.release()
        elif role == DEFERRED_ROLE:
            count = message.get("count") if isinstance(message, dict) else 0
            reader.marker(count if isinstance(count, int) else 0, messages[:index])
        elif role == "assistant":
            reader.assistant(message)
        elif role == "tool_result":
            reader.result(message)
        else:
            reader.other(message)
    return reader.end()


def _in_order(messages: list[Any]) -> bool:
    """Whether there is no marker and every assistant message's results follow it at once, in
    call order (the common case, checked in one pass)."""
    expected: list[str] = []
    for message in messages:
        role = role_of(message)
        if role == DEFERRED_ROLE:
            return False
        if role == "tool_result":
            if expected and getattr(message, "tool_call_id", None) != expected.pop(0):
                return False
            continue
        if expected:
            return False  # something came between a call and its result
        if role == "assistant":
            expected = _call_ids(message)
    return True
