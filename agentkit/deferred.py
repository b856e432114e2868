"""Approvals that outlive the process: tool calls that wait in a session for a decision
recorded later, from any process, and a resume that runs each approved call once.

A run whose broker defers a request (``Approvals(defer=True)``, or :meth:`Approvals.defer`)
ends with stop reason ``"approval"``. What happened is kept as *entries* of the transcript:
custom messages (SPEC 2.3) whose roles the model never sees (the provider conversion drops
them), so the session stays an append-only audit record:

- :class:`ApprovalRequestEntry`: a call of the run's last batch waits for a decision (or,
  ``held``, a call of a sequential batch that waits for the decided calls before it);
- :class:`ApprovalDecisionEntry`: the decision, recorded once (:func:`decide`);
- :class:`ApprovalResumeEntry`: a resumer's claim on the batch, stored before any of its
  calls runs. It is appended at the session version the resumer read, so when two resumers
  start at once only one claim is stored (the other's append conflicts and its run fails):
  an approved call runs exactly once.

The batch's finished results stay right after its assistant message; the waiting calls get
theirs when the batch resumes. A call that is waiting is never settled as interrupted on load
(:func:`waiting_call_ids`); one that was claimed but has no result was interrupted by a crash
and settles as any other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .approvals import ApprovalDecision, ApprovalRequest, Approvals
from .errors import ApprovalError, SessionConflictError, SessionError
from .types import AssistantMessage, ToolCall, ToolResultMessage, now_ms, role_of

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .sessions import Session
    from .tool_calls import ToolRunner
    from .types import AgentContext

__all__ = [
    "APPROVAL_ROLES",
    "ApprovalDecisionEntry",
    "ApprovalRequestEntry",
    "ApprovalResumeEntry",
    "WaitingBatch",
    "decide",
    "pending_approvals",
    "waiting_batch",
    "waiting_call_ids",
]

APPROVAL_ROLES = frozenset({"approval_request", "approval_decision", "approval_resume"})
"""The roles of the approval entries: never sent to the model."""

EXPIRED_TEXT = "the approval given at {when} expired before the call could run; ask again"
DECIDE_ATTEMPTS = 20
"""How often :func:`decide` reloads and retries when other writers keep appending."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class ApprovalRequestEntry(_Entry):
    """A call that waits: its id, tool and arguments (as validated, the ones it would run
    with), when it was asked (seconds since the epoch); ``held`` for a call that needs no
    decision but waits for the calls before it (a sequential batch)."""

    role: Literal["approval_request"] = "approval_request"
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    requested_at: float = Field(default_factory=time.time)
    held: bool = False
    timestamp: int = Field(default_factory=now_ms)

    def request(self) -> ApprovalRequest:
        """The request as the broker's API shows it."""
        return ApprovalRequest(
            self.tool_call_id, self.tool_name, dict(self.arguments), self.requested_at
        )


class ApprovalDecisionEntry(_Entry):
    """A recorded decision: approved or denied with a ``reason``; an approval may carry
    edited ``arguments`` and an ``expires_at`` (seconds since the epoch)."""

    role: Literal["approval_decision"] = "approval_decision"
    tool_call_id: str
    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    decided_at: float = Field(default_factory=time.time)
    expires_at: float | None = None
    timestamp: int = Field(default_factory=now_ms)

    def decision(self) -> ApprovalDecision:
        """The decision as the broker's API shows it."""
        return ApprovalDecision(
            self.approved,
            self.reason,
            None if self.arguments is None else dict(self.arguments),
            decided_at=self.decided_at,
            expires_at=self.expires_at,
        )


class ApprovalResumeEntry(_Entry):
    """A resumer's claim on the waiting calls it is about to run or deny."""

    role: Literal["approval_resume"] = "approval_resume"
    tool_call_ids: list[str]
    timestamp: int = Field(default_factory=now_ms)


_ENTRIES: dict[str, type[_Entry]] = {
    "approval_request": ApprovalRequestEntry,
    "approval_decision": ApprovalDecisionEntry,
    "approval_resume": ApprovalResumeEntry,
}


def decode_entry(data: dict[str, Any]) -> Any:
    """A stored approval entry as its model (a record of another role stays a dict)."""
    model = _ENTRIES.get(data.get("role", ""))
    return model.model_validate(data) if model is not None else data


def _entry(message: Any) -> Any:
    return decode_entry(message) if isinstance(message, dict) else message


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
    by tool results and approval entries, and some of its calls wait (asked, never claimed,
    without a result)."""
    index = len(messages) - 1
    while index >= 0 and role_of(messages[index]) in APPROVAL_ROLES | {"tool_result"}:
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
    return WaitingBatch(message, calls, requests, decisions)


def waiting_call_ids(messages: Sequence[Any]) -> set[str]:
    """The ids of the calls that wait for approval: settling on load leaves them alone."""
    batch = waiting_batch(messages)
    return {c.id for c in batch.calls} if batch is not None else set()


def may_wait(messages: Sequence[Any]) -> bool:
    """A cheap test, without decoding: whether the transcript's tail could hold a waiting
    batch (it ends in an approval entry or a tool result)."""
    return bool(messages) and role_of(messages[-1]) in APPROVAL_ROLES | {"tool_result"}


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


def pending_approvals(session: Session) -> list[ApprovalRequest]:
    """The calls of ``session`` that wait for a decision, read from the store."""
    batch = waiting_batch(session.load())
    return batch.pending() if batch is not None else []


def decide(
    session: Session,
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


# --- resuming ----------------------------------------------------------------------------------


class RecordedDecisions(Approvals):
    """The broker a resumed batch runs with: the decisions recorded in the session, checked
    at resume time against their expiry (``expires_at``, the ``policy`` broker's
    ``decision_ttl``) and the policy's ``revalidate`` hook. Held calls need no decision."""

    def __init__(self, batch: WaitingBatch, policy: Approvals | None) -> None:
        super().__init__()
        self.batch = batch
        self.policy = policy

    def needs_approval(self, call: ToolCall, marked: bool) -> bool:
        if call.id in self.batch.decisions:
            return True
        # A held call was never asked: the agent's own broker decides whether it must be.
        return marked if self.policy is None else self.policy.needs_approval(call, marked)

    def request_batch(
        self, calls: Sequence[ToolCall], signal: AbortSignal, until: float | None = None
    ) -> list[ApprovalDecision]:
        unasked = [call for call in calls if call.id not in self.batch.decisions]
        asked: list[ApprovalDecision] = []
        if unasked and self.policy is not None:  # held calls: asked now, perhaps deferred again
            asked = self.policy.request_batch(unasked, signal, until)
        elif unasked:
            asked = [ApprovalDecision(False, "the agent has no approvals broker")] * len(unasked)
        verdicts = iter(asked)
        return [
            self._verdict(call) if call.id in self.batch.decisions else next(verdicts)
            for call in calls
        ]

    def _verdict(self, call: ToolCall) -> ApprovalDecision:
        entry = self.batch.decisions[call.id]
        if not entry.approved:
            return ApprovalDecision(False, entry.reason)
        now = time.time()
        ttl = self.policy.decision_ttl if self.policy is not None else None
        if (entry.expires_at is not None and now >= entry.expires_at) or (
            ttl is not None and now - entry.decided_at >= ttl
        ):
            return ApprovalDecision(False, EXPIRED_TEXT.format(when=_when(entry.decided_at)))
        revalidate = self.policy.revalidate if self.policy is not None else None
        if revalidate is not None:
            asked = self.batch.requests[call.id].requested_at
            request = ApprovalRequest(call.id, call.name, dict(call.arguments), asked)
            refusal = revalidate(request, entry.decision())
            if refusal is not None and refusal is not True:
                text = refusal if isinstance(refusal, str) and refusal else "refused at resume"
                return ApprovalDecision(False, text)
        return ApprovalDecision(True, entry.reason)  # edited arguments are in the call already


def run_decided(
    runner: ToolRunner, context: AgentContext, batch: WaitingBatch
) -> tuple[list[ToolResultMessage], bool]:
    """Run a decided batch's waiting calls as a tool batch of ``runner`` (events, hooks,
    executor, budgets), with the recorded decisions as its broker."""
    policy = runner.approvals
    runner.approvals = RecordedDecisions(batch, policy)
    try:
        return runner.run_batch(context, batch.message, batch.runnable_calls())
    finally:
        runner.approvals = policy


def request_entry(call: ToolCall, held: bool = False) -> ApprovalRequestEntry:
    """The entry of a call that starts waiting."""
    return ApprovalRequestEntry(
        tool_call_id=call.id, tool_name=call.name, arguments=dict(call.arguments), held=held
    )
