"""Human approval as an API: tool calls that wait for someone's decision, from any thread.

Give an agent an :class:`Approvals` broker (``Agent(approvals=Approvals())``) and mark tools
``requires_approval=True`` (or name them in ``Approvals(tools=...)``). Such a call pauses, on
the run's thread, before it executes, until another thread (a web request, a terminal)
calls :meth:`Approvals.approve` or :meth:`Approvals.reject`, the broker's ``timeout`` passes
(the call is rejected), or the run is aborted (the wait ends at once). A rejected call gets an
error result carrying the reason, and the run goes on. Peer: pydantic-ai deferred tools.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from .abort import ABORTED_TEXT, AbortSignal
from .types import ToolCall

Policy = Collection[str] | Callable[[ToolCall], bool]
"""Which calls need approval besides the tools marked ``requires_approval``: tool names, or a
predicate on the call."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a decision: ``id`` is the tool call's id, ``arguments`` the
    validated arguments it would run with, ``signal`` the run's abort signal (an ``on_request``
    that asks someone can stop asking when it fires)."""

    id: str
    tool_name: str
    arguments: dict[str, Any]
    requested_at: float = field(default_factory=time.time)
    signal: AbortSignal | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ApprovalDecision:
    """The outcome of a request: ``approved`` or not, with the decider's ``reason``."""

    approved: bool
    reason: str | None = None


class Approvals:
    """A thread-safe broker between runs that need approvals and the people who give them.

    ``timeout`` (seconds) rejects a request nobody decided on in time; ``on_request(request)``
    is called, on the run's thread, whenever a request starts waiting (it may decide at once,
    e.g. by asking on a terminal). One broker may serve several agents.
    """

    def __init__(
        self,
        *,
        timeout: float | None = None,
        tools: Policy = (),
        on_request: Callable[[ApprovalRequest], Any] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"the approval timeout must be above zero, got {timeout!r}")
        self.timeout = timeout
        self.on_request = on_request
        self._policy = tools
        # Guards _waiting, _decisions and _always; notified on every decision and abort.
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

    def pending(self) -> list[ApprovalRequest]:
        """The requests waiting now, oldest first."""
        with self._cond:
            return sorted(self._waiting.values(), key=lambda r: r.requested_at)

    def wait_for_request(self, timeout: float | None = None) -> ApprovalRequest | None:
        """Block until a request is waiting (or ``timeout`` passes); return the oldest one."""
        with self._cond:
            self._cond.wait_for(lambda: bool(self._waiting), timeout)
            waiting = sorted(self._waiting.values(), key=lambda r: r.requested_at)
            return waiting[0] if waiting else None

    def approve(self, request_id: str, reason: str | None = None, *, always: bool = False) -> bool:
        """Approve a waiting request; ``always`` approves every later call of that tool too.
        Return whether the request was waiting."""
        return self._decide(request_id, ApprovalDecision(True, reason), always)

    def reject(self, request_id: str, reason: str | None = None) -> bool:
        """Reject a waiting request with ``reason`` (the model reads it); return whether it was
        waiting."""
        return self._decide(request_id, ApprovalDecision(False, reason), False)

    def _decide(self, request_id: str, decision: ApprovalDecision, always: bool) -> bool:
        with self._cond:
            request = self._waiting.get(request_id)
            if request is None or request_id in self._decisions:
                return False
            if always:
                self._always.add(request.tool_name)
            self._decisions[request_id] = decision
            self._cond.notify_all()
            return True

    def request(
        self, call: ToolCall, signal: AbortSignal, until: float | None = None
    ) -> ApprovalDecision:
        """Wait for a decision on ``call``: called by the loop; never raises for a timeout or
        an abort, which both come back as a rejection saying so. ``until`` (a
        ``time.monotonic()`` value, the run's deadline) ends the wait early too."""
        request = ApprovalRequest(call.id, call.name, dict(call.arguments), signal=signal)
        with self._cond:
            self._waiting[call.id] = request
            self._cond.notify_all()
        remove = signal.add_callback(self._wake)
        try:
            if self.on_request is not None:
                self.on_request(request)
            deadline = None if self.timeout is None else time.monotonic() + self.timeout
            with self._cond:
                while call.id not in self._decisions:
                    if signal.aborted:
                        return ApprovalDecision(False, ABORTED_TEXT)
                    now = time.monotonic()
                    if until is not None and now >= until:
                        return ApprovalDecision(False, "The run's deadline passed")
                    remaining = None if deadline is None else deadline - now
                    if remaining is not None and remaining <= 0:
                        return ApprovalDecision(
                            False, f"Nobody approved {call.name} within {self.timeout:g} s"
                        )
                    if until is not None:
                        remaining = until - now if remaining is None else min(remaining, until - now)
                    self._cond.wait(remaining)
                return self._decisions[call.id]
        finally:
            remove()
            with self._cond:
                self._waiting.pop(call.id, None)
                self._decisions.pop(call.id, None)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()
