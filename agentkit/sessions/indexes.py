"""What a store keeps besides the records, so that a question about many sessions reads none of
them: which sessions have tool calls waiting for a decision (the approval index), and how many
of each session's records are markers rather than messages. A store works both out from the
records it appends, in the append's own transaction.

A store reads only the roles of the records (and a call's id):

- an ``approval_request`` that is not ``held`` opens a call's wait; its ``approval_decision``,
  an ``approval_resume`` claiming it, or its ``tool_result`` closes it; an ``assistant`` message
  starts a new batch and closes whatever the last one left open. The index may name a session
  whose calls no longer wait (a run that moved on some other way); it never misses one that has
  a waiting call, so a reader reads the sessions it names and keeps those that really wait
  (:meth:`agentkit.sessions.Session.pending_approvals`);
- a ``deferred`` record (:data:`agentkit.sessions.order.DEFERRED_ROLE`) is a marker, never
  loaded as a message: :attr:`SessionInfo.messages <agentkit.sessions.SessionInfo.messages>`
  counts the records that are not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .order import DEFERRED_ROLE


@dataclass
class IndexChange:
    """How one append changes its session's entries in the approval index: drop them all first
    (``clear``), else drop ``removed``; then add ``added`` (tool call ids). ``markers`` counts
    the appended records that are markers, not messages."""

    clear: bool = False
    removed: set[str] = field(default_factory=set)
    added: set[str] = field(default_factory=set)
    markers: int = 0

    @property
    def approvals(self) -> bool:
        """Whether the append changes the approval index."""
        return self.clear or bool(self.removed) or bool(self.added)

    def open(self, call_id: str) -> None:
        self.removed.discard(call_id)
        self.added.add(call_id)

    def close(self, call_ids: Iterable[str]) -> None:
        for call_id in call_ids:
            self.added.discard(call_id)
            if not self.clear:
                self.removed.add(call_id)

    def new_batch(self) -> None:
        self.clear, self.removed, self.added = True, set(), set()


def index_change(records: Iterable[str]) -> IndexChange:
    """What appending ``records`` (in order) does to the indexes; for a whole session's records,
    its entries (the calls that wait, the markers)."""
    change = IndexChange()
    for record in records:
        data = _data(record)
        role = data.get("role")
        if role == DEFERRED_ROLE:
            change.markers += 1
        elif role == "assistant":
            change.new_batch()
        elif role == "approval_request":
            call_id = _text(data.get("tool_call_id"))
            if call_id and not data.get("held"):
                change.open(call_id)
            elif call_id:  # a held call waits for the others, not for a person
                change.close([call_id])
        elif role in ("approval_decision", "tool_result"):
            change.close(filter(None, [_text(data.get("tool_call_id"))]))
        elif role == "approval_resume":
            ids = data.get("tool_call_ids")
            change.close(filter(None, map(_text, ids if isinstance(ids, list) else [])))
    return change


def _data(record: str) -> dict[str, Any]:
    """A record's JSON object; anything else (a corrupt record) is none of the index's
    business: loading the session names it."""
    try:
        data = json.loads(record)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
