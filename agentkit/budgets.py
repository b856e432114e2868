"""Budgets that end a run gracefully: :class:`Budgets` (the limits) and the per-run tracker.

A budget that is reached ends the run with ``stop_reason="budget"`` and the limit's name in
``RunResult.budget``; the transcript stays valid (every tool call has a result). By default a
run makes at most :data:`DEFAULT_MAX_TURNS` model requests; ``Budgets(max_turns=None)`` lifts
that cap. Peers: openai-agents ``max_turns``, pydantic-ai ``UsageLimits``, smolagents
``max_steps``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from .abort import AbortController, AbortSignal
from .errors import BudgetReached, EndRun
from .policy import (
    BatchHandler,
    BatchOutcome,
    ModelRequest,
    RequestHandler,
    RunPolicy,
    RunScope,
    ToolBatchRun,
)
from .results import RunResult, RunUsage
from .transcript import user_message
from .types import AssistantMessage, UserMessage

DEFAULT_MAX_TURNS = 100
"""The model requests a run may make unless its budgets say otherwise."""

SUMMARY_PROMPT = (
    "The run has reached its budget ({limit}). Do not call any tool. Sum up for the user what "
    "was done so far and what is left to do."
)
REFUSED_TEXT = (
    'Tool call "{name}" was not executed: the run\'s budget {limit} is used up.'
)


class Budgets(BaseModel):
    """The limits of one run; ``None`` means no limit. Each given limit must be above zero.

    ``max_turns`` counts model requests, ``max_tool_calls`` executed tool calls,
    ``max_input_tokens``/``max_output_tokens`` the run's token totals, ``max_cost`` its cost in
    US dollars (from the catalog's prices). ``timeout`` is seconds from the run's start and
    ``deadline`` a point in time (an aware ``datetime``, or epoch seconds); when either passes
    the run is aborted (tools get the abort) and ends with the budget ``"timeout"``. With
    ``summarize``, a run ended by a limit other than time gets one last request without tools
    to sum up.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    max_turns: int | None = DEFAULT_MAX_TURNS
    max_tool_calls: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost: float | None = None
    timeout: float | None = None
    deadline: datetime | float | None = None
    summarize: bool = False

    @field_validator(
        "max_turns", "max_tool_calls", "max_input_tokens", "max_output_tokens", "max_cost",
        "timeout",
    )
    @classmethod
    def _positive(cls, value: Any) -> Any:
        if value is not None and not value > 0:
            raise ValueError(f"a budget must be above zero (or None for no limit), got {value!r}")
        return value

    @classmethod
    def of(cls, value: Budgets | dict[str, Any] | None) -> Budgets:
        """Accept :class:`Budgets`, a dict of its fields, or ``None`` (the default cap)."""
        if value is None:
            return cls()
        if isinstance(value, Budgets):
            return value
        return cls.model_validate(value)

    def deadline_at(self, started: float) -> float | None:
        """The run's end as ``time.time()`` seconds, from ``timeout`` and ``deadline``."""
        ends = []
        if self.timeout is not None:
            ends.append(started + self.timeout)
        if isinstance(self.deadline, datetime):
            ends.append(self.deadline.timestamp())
        elif self.deadline is not None:
            ends.append(float(self.deadline))
        return min(ends) if ends else None


class BudgetPolicy(RunPolicy):
    """The built-in budgets policy (``Agent(budgets=...)``): each run gets a
    :class:`BudgetTracker` of ``budgets``."""

    name = "budgets"

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets

    def for_run(self, run: RunScope) -> RunPolicy:
        child = _adopting.get() is not None  # a sub-agent's run: it draws from its parent's
        tracker = ChildBudgetTracker if child else BudgetTracker
        return tracker(self.budgets, run.signal, run.result.usage, run)


class BudgetTracker(RunPolicy):
    """One run's spending against its :class:`Budgets`, and the policy that enforces them:
    before each turn (a reached limit ends the run, or once turns it into a summary turn),
    around each batch (calls past ``max_tool_calls`` are refused) and at the deadline (its
    waits end there and the run is aborted). Used on the loop's thread only.

    With a deadline it owns the run's signal: a child of the caller's, which :meth:`expire`
    aborts with a :class:`BudgetReached` reason. The loop's own waits (for the stream, a tool
    batch, an approval) end at :attr:`ends` and call :meth:`expire`, so tools and the provider
    get the abort on time; only while the loop's thread works instead of waiting (an inline
    tool call) does a timer watch the clock (:meth:`expiring_meanwhile`).
    """

    name = "budgets"

    def __init__(
        self,
        budgets: Budgets,
        parent: AbortSignal,
        usage: RunUsage,
        run: RunScope | None = None,
    ) -> None:
        self.budgets = budgets
        self.run = run
        self._parent: BudgetTracker | None = None  # the run this one is a sub-agent's run of
        self._drawn = {"max_turns": 0, "max_tool_calls": 0}  # by running sub-agents (lock)
        self.drawn = {"max_turns": 0, "max_tool_calls": 0}  # from the parent, by this run
        self._scope: Token[BudgetTracker | None] | None = None  # undone by end()
        self.usage = usage
        self.limit: str | None = None
        self.summarizing = False
        self.signal: AbortSignal = parent
        """The signal the run uses: the caller's, or with a deadline a child of it that the
        deadline aborts too."""
        self.ends: float | None = None
        """When the run must end, in ``time.monotonic()`` seconds (``None``: no deadline)."""
        self._unlink: Callable[[], None] = lambda: None
        self._closed = False  # the run ended: a sub-agent given up on no longer counts
        self._children: list[BudgetTracker] = []  # sub-agent runs under way (_children_lock)
        self._controller: AbortController | None = None
        now = time.time()
        ends = budgets.deadline_at(now)
        if ends is not None:
            controller = self._controller = AbortController()
            self.signal = controller.signal
            self._unlink = parent.add_callback(lambda: controller.abort(parent.reason))
            self.ends = time.monotonic() + (ends - now)

    def wait_time(self, timeout: float | None) -> float | None:
        """``timeout`` cut to the time left before the deadline."""
        if self.ends is None:
            return timeout
        left = max(0.0, self.ends - time.monotonic())
        return left if timeout is None else min(timeout, left)

    def expire(self) -> bool:
        """If the deadline has passed, abort the run's signal (once); return whether it has."""
        if self.ends is None or time.monotonic() < self.ends:
            return False
        if self._controller is not None and not self._controller.signal.aborted:
            self.limit = self.limit or "timeout"
            if self.run is not None:
                self.run.end("budget", budget=self.limit)
            self._controller.abort(BudgetReached("timeout"))
        return True

    @contextlib.contextmanager
    def expiring_meanwhile(self) -> Iterator[None]:
        """For a stretch in which the loop's thread runs work instead of waiting (an inline
        tool call): a timer thread calls :meth:`expire` at the deadline meanwhile, and is
        cancelled and joined when the stretch ends. Nothing when there is no deadline, or it
        has already aborted the run."""
        if self.ends is None or self.timed_out:
            yield
            return
        timer = threading.Timer(max(0.0, self.ends - time.monotonic()), self.expire)
        timer.daemon, timer.name = True, "agentkit-tool-deadline"
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            timer.join()

    @property
    def timed_out(self) -> bool:
        """Whether the deadline has aborted the run: its result is decided (``"timeout"``), so
        the run's waits take what has already arrived and no longer wait out an abort grace."""
        return self.limit == "timeout"

    def reached(self) -> str | None:
        """The first limit the run has reached (by its counts so far), or ``None``."""
        b, u = self.budgets, self.usage
        self.expire()
        if self.limit is not None:
            return self.limit
        if b.max_turns is not None and u.requests >= b.max_turns:
            return "max_turns"
        if b.max_input_tokens is not None and u.input + u.cache_read >= b.max_input_tokens:
            return "max_input_tokens"
        if b.max_output_tokens is not None and u.output >= b.max_output_tokens:
            return "max_output_tokens"
        if b.max_cost is not None and u.cost.total >= b.max_cost:
            return "max_cost"
        return None

    def allowed_tool_calls(self, wanted: int) -> int:
        """How many of ``wanted`` calls may still run; the rest are refused (and end the run)."""
        if self.summarizing:
            allowed = 0
        elif self.budgets.max_tool_calls is None:
            return wanted
        else:
            allowed = max(0, self.budgets.max_tool_calls - self.usage.tool_calls)
        if allowed < wanted:
            self.limit = self.limit or "max_tool_calls"
        return min(allowed, wanted)

    def start_summary(self) -> UserMessage | None:
        """If the budgets ask for it and it has not happened, the prompt of the summary turn."""
        if not self.budgets.summarize or self.summarizing or self.limit == "timeout":
            return None
        self.summarizing = True
        limit = self.limit or "budget"
        return user_message(SUMMARY_PROMPT.format(limit=limit))

    # --- the run-policy hooks ------------------------------------------------------------------

    def start(self, run: RunScope) -> None:
        """The run's signal is this tracker's (its deadline aborts it); sub-agents started by
        the run's tools draw from its budgets, and a sub-agent's run is its parent's child."""
        if self.ends is not None:
            run.set_signal(self.signal, self)
        self._parent = adopt_into_parent(self)
        self._scope = self.enter()

    def before_turn(self, run: RunScope, pending: list[Any]) -> None:
        """A reached limit ends the run (keeping ``pending`` in the transcript) or, once,
        turns the next turn into a summary without tools."""
        limit = self.reached()
        if limit is None:
            return
        self.limit = limit
        summary = None if self.summarizing else self.start_summary()
        if summary is None:
            run.end("budget", budget=limit)
            return
        pending.append(summary)
        update = {"tool_choice": "none", "output_schema": None}  # an answer in plain words
        run.options = run.options.model_copy(update=update)
        run.wrapping_up = True
        run.end("budget", budget=limit, at_once=False)

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        """Calls past the ``max_tool_calls`` budget are refused with an error result."""
        calls = batch.calls
        allowed = self.allowed_tool_calls(len(calls))
        if allowed == len(calls):
            return call_next(batch)
        batch.calls, refused = calls[:allowed], calls[allowed:]
        outcome = call_next(batch) if batch.calls else BatchOutcome([])
        limit = self.limit or "max_tool_calls"
        for call in refused:
            text = REFUSED_TEXT.format(name=call.name, limit=limit)
            outcome.messages.append(run.refuse_call(call, text))
        run.end("budget", budget=limit, at_once=False)
        return outcome

    def end(self, run: RunScope, result: RunResult) -> None:
        """Count the sub-agents given up on, and let go of the caller's signal."""
        self.count_unfinished_children()  # sub-agents given up on: their spend so far
        self.close()
        if self._scope is not None:
            self.leave(self._scope)
            self._scope = None
        if self._parent is not None:
            self._parent.release(self)
        self.run = None  # the run refers to this tracker: no cycle outlives it

    def close(self) -> None:
        """Unlink from the caller's signal; sub-agents that end later add nothing."""
        self._unlink()
        with _children_lock:
            self._closed = True

    # --- sub-agents (agentkit.subagents) draw from the run's budgets ---------------------------

    def enter(self) -> Token[BudgetTracker | None]:
        """Make this the current run's tracker in this context (the loop's thread, and so every
        tool call's copy of its contextvars); return the token :meth:`leave` takes."""
        return _current.set(self)

    @staticmethod
    def leave(token: Token[BudgetTracker | None]) -> None:
        """Undo :meth:`enter`."""
        _current.reset(token)

    def remaining(self, own: Budgets) -> Budgets | str:
        """``own`` (a sub-agent's budgets) cut to what this run has left, its deadline
        included; or the name of a limit this run has used up. Read on a tool thread: the counts
        are those of the batch's start plus what earlier sub-agents added."""
        b, u = self.budgets, self.usage
        left: dict[str, Any] = {}
        with _children_lock:
            drawn = dict(self._drawn)
        for name, spent in (
            ("max_turns", u.requests + drawn["max_turns"]),
            ("max_tool_calls", u.tool_calls + drawn["max_tool_calls"]),
            ("max_input_tokens", u.input + u.cache_read),
            ("max_output_tokens", u.output),
            ("max_cost", u.cost.total),
        ):
            limit = getattr(b, name)
            if limit is None:
                continue
            rest = limit - spent
            if rest <= 0:
                return name
            mine = getattr(own, name)
            left[name] = rest if mine is None else min(mine, rest)
        now = time.time()
        ends = own.deadline_at(now)
        if self.ends is not None:
            parent_ends = now + (self.ends - time.monotonic())
            if parent_ends <= now:
                return "timeout"
            ends = parent_ends if ends is None else min(ends, parent_ends)
        if ends is not None:
            left.update(timeout=None, deadline=ends)
        return own.model_copy(update=left)

    def adopt(self, child: BudgetTracker) -> None:
        """A sub-agent's run starts under this run: if it is still going when this run ends
        (given up on at the deadline, or after an abort's grace), its spend so far counts here
        (:meth:`count_unfinished_children`), since its tool result never comes back."""
        with _children_lock:
            if not self._closed:
                self._children.append(child)

    def release(self, child: BudgetTracker) -> None:
        """A sub-agent's run ended: its requests and tool calls count in this run's now, in
        place of what it drew (its tokens and cost come back as its tool result's usage, which
        the batch adds)."""
        with _children_lock:
            self._children = [c for c in self._children if c is not child]
            for limit, count in child.drawn.items():
                self._drawn[limit] -= count
            if not self._closed:
                self.usage.requests += child.usage.requests
                self.usage.tool_calls += child.usage.tool_calls

    def draw(self, limit: str, wanted: int) -> int:
        """A sub-agent's run takes ``wanted`` requests (``limit="max_turns"``) or tool calls
        (``"max_tool_calls"``) from this run's allowance, and so from its parent's: how many
        it got. Siblings running at once share what is left, so together they never make more
        than this run may (each takes one request at a time, as it goes)."""
        with _children_lock:
            cap = getattr(self.budgets, limit)
            spent = self.usage.requests if limit == "max_turns" else self.usage.tool_calls
            left = wanted if cap is None else cap - spent - self._drawn[limit]
            granted = max(0, min(wanted, left))
            self._drawn[limit] += granted
        parent = self._parent
        if granted and parent is not None:
            more = parent.draw(limit, granted)
            if more < granted:
                with _children_lock:
                    self._drawn[limit] -= granted - more
                granted = more
        return granted

    def count_unfinished_children(self) -> None:
        """As this run ends: add the spend so far (requests, tool calls, tokens and cost) of
        the sub-agent runs still going, and from now on ignore what sub-agents report."""
        with _children_lock:
            children, self._children = self._children, []
            self._closed = True
        for child in children:
            spent = child.usage.model_copy(deep=True)  # it may still be counting on its thread
            self.usage.requests += spent.requests
            self.usage.tool_calls += spent.tool_calls
            self.usage.add(spent)


class ChildBudgetTracker(BudgetTracker):
    """A sub-agent's run's tracker: its own budgets (cut to what the parent had left when it
    started), and each request and tool call drawn from the parent's allowance as it goes, so
    that sub-agents of one parallel batch share the parent's turns and tool calls instead of
    each getting all that was left."""

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        parent = self._parent
        if parent is not None:
            if not parent.draw("max_turns", 1):
                self.limit = self.limit or "max_turns"
                raise EndRun("budget", budget=self.limit)
            with _children_lock:
                self.drawn["max_turns"] += 1
        return call_next(request)

    def allowed_tool_calls(self, wanted: int) -> int:
        allowed = super().allowed_tool_calls(wanted)
        parent = self._parent
        if parent is None or not allowed:
            return allowed
        granted = parent.draw("max_tool_calls", allowed)
        with _children_lock:
            self.drawn["max_tool_calls"] += granted
        if granted < allowed:
            self.limit = self.limit or "max_tool_calls"
        return granted


_current: ContextVar[BudgetTracker | None] = ContextVar("agentkit_run_budget", default=None)
"""The tracker of the run whose loop or tool call runs in this context."""

_adopting: ContextVar[BudgetTracker | None] = ContextVar("agentkit_adopting", default=None)
"""The run a sub-agent's run starting in this context belongs to (:func:`adopting_runs`)."""

_children_lock = threading.Lock()
"""Guards the counts sub-agents running at once on tool threads add to their parent's usage."""


@contextlib.contextmanager
def adopting_runs(parent: BudgetTracker) -> Iterator[None]:
    """Inside the block, a run that starts (a sub-agent's) is ``parent``'s child: see
    :meth:`BudgetTracker.adopt`."""
    token = _adopting.set(parent)
    try:
        yield
    finally:
        _adopting.reset(token)


def adopt_into_parent(tracker: BudgetTracker) -> BudgetTracker | None:
    """Called as a run starts, in its own context: make it the child of the run that adopts
    runs starting here, if any (a run it starts in turn is not that run's child); return that
    parent."""
    parent = _adopting.get()
    if parent is not None:
        _adopting.set(None)
        parent.adopt(tracker)
    return parent


def current_budget() -> BudgetTracker | None:
    """The budget tracker of the run a tool call running here belongs to (``None`` outside a
    run): how a sub-agent draws from its parent run's budgets and deadline."""
    return _current.get()
