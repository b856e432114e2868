"""Approval records over a transcript: the batch whose calls wait for a decision
(:func:`waiting_batch`), and a decision recorded in a session from any process (:func:`decide`).

The records themselves are data (:mod:`agentkit.transcript`); the run policy that asks, defers
and resumes is :mod:`agentkit.deferred`. Recording a decision is storing: it appends one
:class:`~agentkit.transcript.ApprovalDecisionEntry`, versioned, so it is recorded once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from ..errors import ApprovalError, SessionConflictError, SessionError
from ..transcript import (
    APPROVAL_ROLES,
    ApprovalDecisionEntry,
    ApprovalRequest,
    ApprovalRequestEntry,
    ApprovalResumeEntry,
)
from ..transcript import as_entry as _entry
from ..types import AssistantMessage, ToolCall, ToolResultMessage, role_of


class Recorded(Protocol):
    """What a decision is recorded in: a session (:class:`~agentkit.sessions.Session`), named by
    its shape here, since the session's own ``approve``/``deny`` call into this module."""

    @property
    def name(self) -> str:
        """The session's name."""

    def load(self) -> list[Any]:
        """Its transcript, as stored."""

    def append(self, *messages: Any) -> int:
        """Append ``messages`` at the version last read (a conflict raises)."""

_AFTER_A_BATCH = APPROVAL_ROLES | {"tool_result", "user"}
"""The roles that may follow a batch whose calls wait."""

DECIDE_ATTEMPTS = 20
"""How often :func:`decide` reloads and retries when other writers keep appending."""


# --- the waiting batch of a transcript ---------------------------------------------------------


@dataclass
class WaitingBatch:
    """The last batch of a transcript, where calls wait for approval: its assistant
    ``message``, the waiting ``calls`` (call order), their ``requests`` and the ``decisions``
    recorded so far (by tool call id)."""

    message: AssistantMessage
    calls: list[ToolCall]
    requests: dict[str, ApprovalRequestEntry]
    decisions: dict[str, ApprovalDecisionEntry]
    inputs: list[int] = field(default_factory=list)
    """Where the user messages stored after the batch while it waited are (ascending)."""

    @property
    def undecided(self) -> list[ApprovalRequestEntry]:
        """The requests that still need a decision, oldest first."""
        return [
            self.requests[c.id]
            for c in self.calls
            if not self.requests[c.id].held and c.id not in self.decisions
        ]

    def pending(self) -> list[ApprovalRequest]:
        """The undecided requests as :class:`~agentkit.ApprovalRequest` objects."""
        return [entry.request() for entry in self.undecided]

    def runnable_calls(self) -> list[ToolCall]:
        """The waiting calls as they run: with the approver's edited arguments, if any."""
        calls = []
        for call in self.calls:
            decision = self.decisions.get(call.id)
            if decision is not None and decision.approved and decision.arguments is not None:
                call = call.model_copy(update={"arguments": dict(decision.arguments)})
            calls.append(call)
        return calls

    def claim(self) -> ApprovalResumeEntry:
        """The resume entry that claims every waiting call."""
        return ApprovalResumeEntry(tool_call_ids=[c.id for c in self.calls])


def waiting_batch(messages: Sequence[Any]) -> WaitingBatch | None:
    """The transcript's waiting batch, or ``None``: its last assistant message is followed only
    by tool results, approval entries and user messages (stored into the session directly, not
    by a run, while the batch waited: they wait with it, to be heard after it), and some of its
    calls wait (asked, never claimed, without a result)."""
    index = len(messages) - 1
    inputs: list[int] = []
    while index >= 0 and (role := role_of(messages[index])) in _AFTER_A_BATCH:
        if role == "user":
            inputs.append(index)
        index -= 1
    if index < 0 or not isinstance(messages[index], AssistantMessage):
        return None
    # In order: a request opens a call's wait, a claim or a result closes it, and a call held
    # in a sequential batch may be asked again after its batch resumed (a request re-opens it).
    requests: dict[str, ApprovalRequestEntry] = {}
    decisions: dict[str, ApprovalDecisionEntry] = {}
    for entry in (_entry(m) for m in messages[index + 1 :]):
        closed: list[str] = []
        if isinstance(entry, ApprovalRequestEntry):
            requests[entry.tool_call_id] = entry
        elif isinstance(entry, ApprovalDecisionEntry):
            if entry.tool_call_id in requests:  # the first is the decision; see decide()
                decisions.setdefault(entry.tool_call_id, entry)
        elif isinstance(entry, ApprovalResumeEntry):
            closed = entry.tool_call_ids
        elif isinstance(entry, ToolResultMessage):
            closed = [entry.tool_call_id]
        for call_id in closed:
            requests.pop(call_id, None)
            decisions.pop(call_id, None)
    message = messages[index]
    calls = [c for c in message.content if isinstance(c, ToolCall) and c.id in requests]
    if not calls:
        return None
    return WaitingBatch(message, calls, requests, decisions, inputs[::-1])


def waiting_call_ids(messages: Sequence[Any]) -> set[str]:
    """The ids of the calls that wait for approval: settling on load leaves them alone."""
    batch = waiting_batch(messages)
    return {c.id for c in batch.calls} if batch is not None else set()


def may_wait(messages: Sequence[Any]) -> bool:
    """A cheap test, without decoding: whether the transcript's tail could hold a waiting
    batch (it ends in an approval entry, a tool result or a user message)."""
    return bool(messages) and role_of(messages[-1]) in _AFTER_A_BATCH


def refuse_while_waiting(messages: Sequence[Any]) -> None:
    """Raise :class:`ApprovalError` when calls of the transcript wait for approval: a new
    prompt would land between those calls and their results."""
    batch = waiting_batch(messages) if may_wait(messages) else None
    if batch is not None:
        ids = ", ".join(f"{c.name} ({c.id})" for c in batch.calls)
        raise ApprovalError(
            f"tool calls wait for approval: {ids}; record a decision for each "
            "(Session.approve / Session.deny, or 'agentkit sessions approve|deny') and resume "
            "with continue_() before prompting again"
        )


# --- the decisions, from any process -----------------------------------------------------------


def pending_approvals(session: Recorded) -> list[ApprovalRequest]:
    """The calls of ``session`` that wait for a decision, read from the store."""
    batch = waiting_batch(session.load())
    return batch.pending() if batch is not None else []


def decide(
    session: Recorded,
    tool_call_id: str,
    *,
    approved: bool,
    reason: str | None = None,
    arguments: dict[str, Any] | None = None,
    expires_in: float | None = None,
) -> ApprovalDecisionEntry:
    """Record the decision on a waiting call in ``session``; durable when this returns.

    A call is decided once: deciding it again (here, in another process, or after it was
    resumed) raises :class:`ApprovalError` and writes nothing. The append is versioned: when
    another writer appended first, the session is read again and the checks made again.
    """
    if arguments is not None and not isinstance(arguments, dict):
        raise ApprovalError(f"edited arguments must be a JSON object, got {type(arguments).__name__}")
    if arguments is not None and not approved:
        raise ApprovalError("edited arguments go with an approval, not a denial")
    if expires_in is not None and not expires_in > 0:
        raise ApprovalError(f"expires_in must be above zero, got {expires_in!r}")
    for _ in range(DECIDE_ATTEMPTS):
        _check_decidable(session.name, session.load(), tool_call_id)
        now = time.time()
        entry = ApprovalDecisionEntry(
            tool_call_id=tool_call_id,
            approved=approved,
            reason=reason,
            arguments=arguments,
            decided_at=now,
            expires_at=None if expires_in is None else now + expires_in,
        )
        try:
            session.append(entry)
        except SessionConflictError:
            continue  # another writer went first: read again, check again
        return entry
    raise SessionError(
        f"session {session.name!r} kept changing while a decision on {tool_call_id} was "
        f"recorded ({DECIDE_ATTEMPTS} attempts); nothing was written"
    )


def _check_decidable(name: str, messages: Sequence[Any], tool_call_id: str) -> None:
    """Raise :class:`ApprovalError` unless ``tool_call_id`` waits for a decision."""
    batch = waiting_batch(messages)
    if batch is not None and tool_call_id in {c.id for c in batch.calls}:
        if batch.requests[tool_call_id].held:
            raise ApprovalError(
                f"tool call {tool_call_id} in session {name!r} needs no decision: it waits "
                "for the calls before it in its sequential batch"
            )
        earlier = batch.decisions.get(tool_call_id)
        if earlier is None:
            return
        raise ApprovalError(
            f"tool call {tool_call_id} in session {name!r} was decided already "
            f"({_describe(earlier)}); a decision is recorded once"
        )
    entries = [_entry(m) for m in messages]
    earlier = next(
        (e for e in entries
         if isinstance(e, ApprovalDecisionEntry) and e.tool_call_id == tool_call_id),
        None,
    )  # fmt: skip
    if earlier is not None:
        raise ApprovalError(
            f"tool call {tool_call_id} in session {name!r} was decided already "
            f"({_describe(earlier)}) and has been resumed; a decision is recorded once"
        )
    if any(isinstance(e, ApprovalRequestEntry) and e.tool_call_id == tool_call_id for e in entries):
        raise ApprovalError(
            f"tool call {tool_call_id} in session {name!r} no longer waits for approval "
            "(its run resumed without it: aborted or settled)"
        )
    raise ApprovalError(f"no tool call {tool_call_id} waits for approval in session {name!r}")


def _describe(entry: ApprovalDecisionEntry) -> str:
    verdict = "approved" if entry.approved else "denied"
    return f"{verdict} at {_when(entry.decided_at)}"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def recorded_decisions(
    messages: Sequence[Any], assistant: AssistantMessage, call_ids: Sequence[str]
) -> tuple[dict[str, ApprovalRequestEntry], dict[str, ApprovalDecisionEntry]]:
    """The approval requests and first decisions recorded after ``assistant`` for
    ``call_ids``, whether or not a resumer claimed them since (a resumer that died after its
    claim left decided calls without results)."""
    wanted = set(call_ids)
    requests: dict[str, ApprovalRequestEntry] = {}
    decisions: dict[str, ApprovalDecisionEntry] = {}
    after = False
    for message in messages:
        if message is assistant:
            after = True
            continue
        entry = _entry(message) if after else None
        if isinstance(entry, ApprovalRequestEntry) and entry.tool_call_id in wanted:
            requests[entry.tool_call_id] = entry
        elif isinstance(entry, ApprovalDecisionEntry) and entry.tool_call_id in requests:
            decisions.setdefault(entry.tool_call_id, entry)
    return requests, decisions
