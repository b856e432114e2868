"""Human approval as an API: tool calls that wait for someone's decision, from any thread or,
with a session, from any process.

Give an agent an :class:`Approvals` broker (``Agent(approvals=Approvals())``) and mark tools
``requires_approval=True`` (or name them in ``Approvals(tools=...)``). The calls of one batch
that need approval are asked together, on the run's thread, before any of them executes, and
wait until another thread (a web request, a terminal) calls :meth:`Approvals.approve` or
:meth:`Approvals.reject` for each, the broker's ``timeout`` passes (the undecided calls are
rejected), or the run is aborted (the wait ends at once). A rejected call gets an error result
carrying the reason, and the run goes on.

A request may also be *deferred* (:meth:`Approvals.defer`, or every request with
``Approvals(defer=True)``): nobody blocks for the answer, the run ends with stop reason
``"approval"``, and the decision is recorded later in the run's session from any process
(see :mod:`agentkit.deferred` and docs/approvals.md). Peer: pydantic-ai deferred tools.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from .abort import ABORTED_TEXT, AbortSignal
from .policy import PreparedCall, RunPolicy, RunScope
from .transcript import DEFERRED, ApprovalDecision, ApprovalRequest
from .types import ToolCall
from .waits import wait_condition

__all__ = ["DEFERRED", "ApprovalDecision", "ApprovalRequest", "Approvals"]

Policy = Collection[str] | Callable[[ToolCall], bool]
"""Which calls need approval besides the tools marked ``requires_approval``: tool names, or a
predicate on the call."""

Revalidate = Callable[["ApprovalRequest", "ApprovalDecision"], "str | None"]
"""``revalidate(request, decision)``: called when a deferred call that was approved is about to
run (at resume time, possibly days later); return a reason to refuse it after all (the policy or
the world changed), or ``None`` to let it run."""


class Approvals(RunPolicy):
    """A thread-safe broker between runs that need approvals and the people who give them.

    ``timeout`` (seconds) rejects the calls of a batch nobody decided on in time (one timeout
    for the whole batch, however many calls it has); ``on_request(request)`` is called, on the
    run's thread, for each request once the whole batch is waiting (it may decide at once, e.g.
    by asking on a terminal). ``defer=True`` waits for nobody: every request not decided by
    ``on_request`` is deferred, and the run ends waiting for approval (it needs a session to be
    decided later, from anywhere). ``revalidate`` and ``decision_ttl`` (seconds) apply when a
    deferred call resumes: an approval older than ``decision_ttl`` is denied, and
    ``revalidate`` may still refuse. One broker may serve several agents.
    """

    def __init__(
        self,
        *,
        timeout: float | None = None,
        tools: Policy = (),
        on_request: Callable[[ApprovalRequest], Any] | None = None,
        defer: bool = False,
        revalidate: Revalidate | None = None,
        decision_ttl: float | None = None,
    ) -> None:
        for name, value in (("timeout", timeout), ("decision_ttl", decision_ttl)):
            if value is not None and not value > 0:
                raise ValueError(f"the approval {name} must be above zero, got {value!r}")
        self.timeout = timeout
        self.on_request = on_request
        self.defer_all = defer
        """Defer every request nobody decided in ``on_request`` (``Approvals(defer=True)``)."""
        self.revalidate = revalidate
        self.decision_ttl = decision_ttl
        self._policy = tools
        # Guards _waiting, _decisions and _always; notified on every request, decision and abort.
        self._cond = threading.Condition()
        self._waiting: dict[str, ApprovalRequest] = {}
        self._decisions: dict[str, ApprovalDecision] = {}
        self._always: set[str] = set()

    def needs_approval(self, call: ToolCall, marked: bool) -> bool:
        """Whether ``call`` must wait: its tool is ``marked`` or the policy names it, and the
        tool was not approved for good with ``approve(..., always=True)``."""
        with self._cond:
            if call.name in self._always:
                return False
        if marked:
            return True
        policy = self._policy
        return bool(policy(call)) if callable(policy) else call.name in policy

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        """The run-policy hook: ask about the batch's calls that need a decision, all at once,
        and defer, allow or deny each as the decisions come. A broker that fails (its
        ``on_request`` raised) denies the calls it asked about, with the error."""
        asking = []
        for call in calls:
            if call.verdict is not None:
                continue
            if self.needs_approval(call.tool_call, call.tool.requires_approval):
                asking.append(call)
            elif call.needs_review:
                call.allow()  # approved for good earlier (approve(..., always=True))
        if not asking:
            return
        deadline = run.deadline
        until = deadline.ends if deadline is not None else None
        try:
            decisions = self.request_batch([c.tool_call for c in asking], run.signal, until)
        except Exception as exc:
            for call in asking:
                call.deny(str(exc) or type(exc).__name__)
            return
        if deadline is not None and deadline.expire():
            for call in asking:
                call.deny(ABORTED_TEXT)
            return
        for call, decision in zip(asking, decisions, strict=True):
            if decision.deferred:
                call.defer()
            elif decision.approved:
                call.allow(decision.arguments)
            else:
                reason = f": {decision.reason}" if decision.reason else ""
                call.deny(f"Tool call {call.tool_call.name} was rejected{reason}")

    def pending(self) -> list[ApprovalRequest]:
        """The requests waiting for a decision now, oldest first (a batch's calls appear
        together: they are asked at once)."""
        with self._cond:
            return self._undecided()

    def wait_for_request(self, timeout: float | None = None) -> ApprovalRequest | None:
        """Block until a request is waiting for a decision (or ``timeout`` passes); return the
        oldest one. A request already decided is never returned, so a reviewer loop that
        decides what this returns sees each request once; :meth:`pending` then lists the
        rest of its batch."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._undecided()), timeout)
            waiting = self._undecided()
            return waiting[0] if waiting else None

    def _undecided(self) -> list[ApprovalRequest]:
        waiting = [r for r in self._waiting.values() if r.id not in self._decisions]
        return sorted(waiting, key=lambda r: r.requested_at)

    def approve(
        self,
        request_id: str,
        reason: str | None = None,
        *,
        always: bool = False,
        arguments: dict[str, Any] | None = None,
    ) -> bool:
        """Approve a waiting request; ``always`` approves every later call of that tool too
        (and the calls of it waiting now);
        ``arguments`` runs the call with these arguments instead (validated again). Return
        whether the request was waiting (``False`` if it was decided already)."""
        decision = ApprovalDecision(True, reason, dict(arguments) if arguments else None)
        return self._decide(request_id, decision, always)

    def reject(self, request_id: str, reason: str | None = None) -> bool:
        """Reject a waiting request with ``reason`` (the model reads it); return whether it was
        waiting."""
        return self._decide(request_id, ApprovalDecision(False, reason), False)

    def defer(self, request_id: str) -> bool:
        """Stop waiting for a decision on this request here: the call waits in the run's
        session, and the run ends with stop reason ``"approval"``. Return whether it was
        waiting."""
        return self._decide(request_id, DEFERRED, False)

    def _decide(self, request_id: str, decision: ApprovalDecision, always: bool) -> bool:
        with self._cond:
            request = self._waiting.get(request_id)
            if request is None or request_id in self._decisions:
                return False
            if always:  # every later call of the tool, and those of its batch waiting now
                self._always.add(request.tool_name)
                for other in self._undecided():
                    if other.tool_name == request.tool_name:
                        self._decisions[other.id] = decision
            self._decisions[request_id] = decision
            self._cond.notify_all()
            return True

    def request(
        self, call: ToolCall, signal: AbortSignal, until: float | None = None
    ) -> ApprovalDecision:
        """Wait for a decision on one call (see :meth:`request_batch`)."""
        return self.request_batch([call], signal, until)[0]

    def request_batch(
        self, calls: Sequence[ToolCall], signal: AbortSignal, until: float | None = None
    ) -> list[ApprovalDecision]:
        """Ask for every call of a batch at once and wait for all the decisions, in call order:
        called by the loop. Never raises for a timeout or an abort, which both come back as
        rejections saying so. ``until`` (a ``time.monotonic()`` value, the run's deadline) ends
        the wait early too. An ``on_request`` that raises rejects nothing: the exception
        propagates once every request of the batch stopped waiting."""
        requests = [ApprovalRequest(c.id, c.name, dict(c.arguments), signal=signal) for c in calls]
        with self._cond:
            for request in requests:
                self._waiting[request.id] = request
            self._cond.notify_all()
        remove = signal.add_callback(self._wake)
        try:
            if self.on_request is not None:
                for request in requests:
                    with self._cond:
                        decided = request.id in self._decisions
                    if not decided and not signal.aborted:
                        self.on_request(request)
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            with self._cond:
                while True:
                    undecided = [r for r in requests if r.id not in self._decisions]
                    if not undecided:
                        break
                    ended = self._ended(signal, deadline, until)
                    if ended is not None:
                        for request in undecided:
                            self._decisions[request.id] = ended(request)
                        break
                    wait_condition(self._cond, _remaining(deadline, until))
                return [self._decisions[r.id] for r in requests]
        finally:
            remove()
            with self._cond:
                for request in requests:
                    self._waiting.pop(request.id, None)
                    self._decisions.pop(request.id, None)

    def _ended(
        self, signal: AbortSignal, deadline: float | None, until: float | None
    ) -> Callable[[ApprovalRequest], ApprovalDecision] | None:
        """How the batch's undecided requests end now, or ``None`` while they keep waiting."""
        if signal.aborted:
            return lambda request: ApprovalDecision(False, ABORTED_TEXT)
        if self.defer_all:
            return lambda request: DEFERRED
        now = time.monotonic()
        if until is not None and now >= until:
            return lambda request: ApprovalDecision(False, "The run's deadline passed")
        if deadline is not None and now >= deadline:
            return lambda request: ApprovalDecision(
                False, f"Nobody approved {request.tool_name} within {self.timeout:g} s"
            )
        return None

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


def _remaining(deadline: float | None, until: float | None) -> float | None:
    """Seconds to the nearer of two ``time.monotonic()`` points (``None``: no limit)."""
    ends = [t for t in (deadline, until) if t is not None]
    return max(0.0, min(ends) - time.monotonic()) if ends else None
