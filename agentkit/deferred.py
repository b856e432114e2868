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
from typing import TYPE_CHECKING

from .approvals import Approvals
from .events import TurnEndEvent, TurnStartEvent
from .policy import PreparedCall, RunPolicy, RunScope
from .sessions.decisions import (
    WaitingBatch,
    decide,
    may_wait,
    pending_approvals,
    refuse_while_waiting,
    waiting_batch,
    waiting_call_ids,
)
from .sessions.decisions import _when as _when
from .transcript import (
    APPROVAL_ROLES,
    ApprovalDecision,
    ApprovalDecisionEntry,
    ApprovalRequest,
    ApprovalRequestEntry,
    ApprovalResumeEntry,
    decode_entry,
    request_entry,
)
from .types import ToolCall

if TYPE_CHECKING:
    from .abort import AbortSignal

__all__ = [
    "APPROVAL_ROLES",
    "ApprovalsPolicy",
    "ApprovalDecisionEntry",
    "ApprovalRequestEntry",
    "ApprovalResumeEntry",
    "RecordedDecisions",
    "WaitingBatch",
    "decide",
    "decode_entry",
    "may_wait",
    "pending_approvals",
    "refuse_while_waiting",
    "request_entry",
    "waiting_batch",
    "waiting_call_ids",
]


EXPIRED_TEXT = "the approval given at {when} expired before the call could run; ask again"


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


_NOTHING = RunPolicy()
"""A policy with no hook of its own."""


class ApprovalsPolicy(RunPolicy):
    """The built-in approvals policy (``Agent(approvals=...)``): it asks the broker about a
    batch's calls that need a decision, all at once, and defers, allows or denies each as the
    broker answers; at a run's start it resumes the batch a run before it left waiting, once
    every call has a decision (claiming it first, so that of two resumers one runs it).

    With no broker (``broker=None``) it still resumes, with the decisions recorded in the
    session alone; a call that needs approval and has none is refused by the batch."""

    name = "approvals"

    def __init__(self, broker: Approvals | None) -> None:
        self.broker = broker
        self._resuming: RecordedDecisions | None = None  # the batch start() resumes

    def for_run(self, run: RunScope) -> RunPolicy:
        messages = run.context.messages
        if self.broker is None and (not may_wait(messages) or waiting_batch(messages) is None):
            return _NOTHING  # no broker and nothing to resume: this run costs nothing here
        return ApprovalsPolicy(self.broker)

    def start(self, run: RunScope) -> None:
        messages = run.context.messages
        batch = waiting_batch(messages) if may_wait(messages) else None
        if batch is None:
            return
        if batch.undecided:  # still waiting: the run ends at once, as it began
            run.end("approval", pending_approvals=batch.pending())
            run.emit(TurnEndEvent(batch.message, []))
            return
        messages = run.context.messages
        inputs = [messages.pop(i) for i in reversed(batch.inputs)][::-1]
        run.append([batch.claim()])
        self._resuming = RecordedDecisions(batch, self.broker)
        try:
            outcome = run.run_tools(batch.message, batch.runnable_calls())
        finally:
            self._resuming = None
            messages.extend(inputs)  # stored behind the batch: heard after its results
        run.emit(TurnEndEvent(batch.message, outcome.messages))
        if run.ending is None and (outcome.terminate or run.signal.aborted):
            run.end("stop")
        elif run.ending is None:
            run.emit(TurnStartEvent())

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        broker = self._resuming or self.broker
        if broker is not None:  # else a call that needs approval stays undecided: refused
            broker.review_calls(run, calls)
