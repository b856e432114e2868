"""Running tool calls: preflight, execution on an executor's threads, finalisation and events.

One path runs every call. Its preflight (lookup, arguments, ``before_tool_call``, approval) runs
on the loop's thread inside the call's own contextvars; it executes on a thread of the run's
``concurrent.futures.Executor`` (agentkit's daemon threads unless the run was given one); its
``after_tool_call`` hook and end event run back on the loop's thread as the call ends, while
results are recorded in source order. A batch in parallel mode is one group, in sequential mode
a group of one per call; :func:`run_tool_call` runs a group of one without events.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._serialize import clean_message, to_serialisable
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .budgets import REFUSED_TEXT, BudgetTracker
from .config import DEFAULT_TOOL_ABORT_GRACE
from .errors import ToolRetry
from .event_stream import WAKE
from .events import (
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
)
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    ToolCallOutcome,
    coerce_hook_result,
)
from .interrupts import interrupted_result
from .results import RunUsage
from .tools import (
    RunContext,
    enter_run_context,
    error_result,
    leave_run_context,
    validate_tool_arguments,
)
from .types import (
    AgentContext,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    FieldsEqRepr,
    TextContent,
    ToolCall,
    ToolResultMessage,
)

if TYPE_CHECKING:  # see _tool_threads: concurrent.futures is imported when a batch needs it
    from concurrent.futures import Executor, Future

    from .approvals import ApprovalDecision, ApprovalRequest, Approvals

__all__ = ["ToolControls", "ToolRunner", "run_tool_call"]

TRUNCATED_TEXT = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)
RETRY_TEXT = "{message}\n\nFix the problem and call {name} again."
RETRIES_SPENT_TEXT = (
    "{message}\n\n{name} asked for a retry more than its budget ({budget}) allows in this run; "
    "do not call it again."
)
TIMEOUT_TEXT = "Tool {name} timed out after {timeout:g} s"
class ToolControls:
    """One run's tool state: its ``deps`` and each tool's retry count (guarded by a lock, since
    calls of one batch run on tool threads at once)."""

    def __init__(self, deps: Any = None) -> None:
        self.deps = deps
        self._lock = threading.Lock()
        self._retries: dict[str, int] = {}

    def retries(self, tool_name: str) -> int:
        """How many retries ``tool_name`` asked for so far."""
        with self._lock:
            return self._retries.get(tool_name, 0)

    def enter(self, tool_call_id: str, tool_name: str, signal: AbortSignal) -> Any:
        """Make the call's :class:`RunContext` current on this thread; return the reset token."""
        context = RunContext(self.deps, tool_call_id, tool_name, self.retries(tool_name), signal)
        return enter_run_context(context)

    @staticmethod
    def leave(token: Any) -> None:
        """Undo :meth:`enter`."""
        leave_run_context(token)

    def retry_result(self, tool_name: str, budget: int, message: str) -> AgentToolResult:
        """The error result of a ``ToolRetry``: try again, or (past ``budget``) stop trying."""
        with self._lock:
            count = self._retries.get(tool_name, 0) + 1
            self._retries[tool_name] = count
        template = RETRY_TEXT if count <= budget else RETRIES_SPENT_TEXT
        text = template.format(message=message or "Retry", name=tool_name, budget=budget)
        return AgentToolResult(content=[TextContent(text=text)], details={}, is_error=True)


def wait_or_give_up(
    get: Callable[[float | None], Any],
    signal: AbortSignal,
    wake: Callable[[], None],
    grace: float,
    budget: BudgetTracker | None = None,
    start: Callable[[], None] | None = None,
) -> Generator[Any, None, None]:
    """Yield what ``get(timeout)`` returns until the caller stops, or until ``grace`` seconds
    after an abort (then the iteration ends: the caller gives up on what it waited for).

    ``get`` raises ``queue.Empty`` on timeout and returns ``WAKE`` when ``wake`` was called;
    ``wake`` runs when the signal aborts. The stream wait and the tool batch wait both use it.
    The wait also ends at the run's ``budget`` deadline, which then aborts the signal.
    ``start()``, if given, runs once the wait is set up, right before the first ``get``: the
    threads it sets going (a batch's calls) then find this one about to block, not still busy.
    """
    remove_wake = signal.add_callback(wake)
    deadline: float | None = None
    try:
        if start is not None:
            start()
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if budget is not None and deadline is None:
                timeout = budget.wait_time(timeout)
            try:
                item = get(timeout)
            except queue.Empty:
                if deadline is None and budget is not None and budget.expire():
                    continue  # the abort wakes this wait and starts the grace period
                return
            if item is WAKE:
                if deadline is None:  # after the run's deadline, only what is already here
                    timed_out = budget is not None and budget.timed_out
                    deadline = time.monotonic() + (0.0 if timed_out else grace)
                continue
            yield item
    finally:
        remove_wake()


# --- what the tool threads tell the loop's thread ----------------------------------------------


class _Update:
    __slots__ = ("index", "partial")

    def __init__(self, index: int, partial: Any) -> None:
        self.index, self.partial = index, partial


class _Finished:
    __slots__ = ("index", "result", "is_error", "duration_ms", "late")

    def __init__(
        self,
        index: int,
        result: AgentToolResult,
        is_error: bool,
        duration: float | None,
        late: bool = False,
    ) -> None:
        self.index, self.result, self.is_error, self.duration_ms = index, result, is_error, duration
        self.late = late
        """The batch's signal was aborted when the call ended: it ended because of it, or after
        it (an interrupt then replaces its result)."""


def _if_interrupted(outcome: ToolCallOutcome, signal: AbortSignal) -> ToolCallOutcome:
    """``outcome``, or, when an interrupt aborted ``signal``, the interrupted result (keeping
    the usage and details the call reported: what it spent was spent)."""
    call = outcome.tool_call
    replaced = interrupted_result(signal, call.name)
    if replaced is None:
        return outcome
    replaced.usage, replaced.details = outcome.result.usage, outcome.result.details
    return ToolCallOutcome(call, replaced, True, outcome.duration_ms)


class _CallTimers:
    """The ``timeout`` timers of one batch's calls (a tool without one costs nothing).

    A timer that fires aborts its call's own signal and puts the call's timed-out result on the
    batch's inbox; :meth:`close` cancels the rest, so no timer thread outlives the batch.
    """

    def __init__(self, inbox: queue.SimpleQueue[Any]) -> None:
        self._inbox = inbox
        # Guards _timers, _unlinks and _running: calls start and finish on tool threads.
        self._lock = threading.Lock()
        self._timers: dict[int, threading.Timer] = {}
        self._unlinks: dict[int, Callable[[], None]] = {}
        self._running: set[int] = set()

    def start(self, index: int, tool: AgentTool, signal: AbortSignal) -> AbortSignal:
        """The signal call ``index`` runs with: ``signal``, or a child its timer aborts."""
        with self._lock:
            self._running.add(index)
        if tool.timeout is None:
            return signal
        controller = AbortController()
        unlink = signal.add_callback(lambda: controller.abort(signal.reason))
        timeout = tool.timeout

        def expire() -> None:
            unlink()
            text = TIMEOUT_TEXT.format(name=tool.name, timeout=timeout)
            # The timed-out result goes first: the call's own end, which the abort may bring
            # at once (a cancelled coroutine's CancelledError), must find it recorded.
            self._inbox.put(_Finished(index, error_result(text), True, timeout * 1000))
            controller.abort(TimeoutError(text))

        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.name = "agentkit-tool-timeout"
        with self._lock:
            self._timers[index] = timer
            self._unlinks[index] = unlink
        timer.start()
        return controller.signal

    def finished(self, index: int) -> None:
        """Call ``index`` returned: its timer is no longer needed."""
        with self._lock:
            self._running.discard(index)
            timer = self._timers.pop(index, None)
            unlink = self._unlinks.pop(index, None)
        if timer is not None:
            timer.cancel()
        if unlink is not None:
            unlink()  # the run's signal no longer needs to reach this call

    def still_running(self) -> bool:
        """Whether a call (one that timed out, say) has not returned yet."""
        with self._lock:
            return bool(self._running)

    def close(self) -> None:
        """Cancel and join every timer left."""
        with self._lock:
            timers, self._timers = list(self._timers.values()), {}
        for timer in timers:
            timer.cancel()
            timer.join()


# --- one call: preflight, execution, finalisation ----------------------------------------------


@dataclass(eq=False, repr=False)
class _Prepared(FieldsEqRepr):
    tool_call: ToolCall
    tool: AgentTool
    args: Any
    scope: contextvars.Context  # the contextvars it executes in, as its preflight left them
    asks: bool = False  # it waits for an approval, asked with the rest of its batch


def _start_call(emit: Callable[[AgentEvent], None], call: ToolCall) -> contextvars.Context:
    """Give ``call`` its own copy of this thread's contextvars, emit its start event inside it
    and return it, for the call's preflight (and so its execution) to run in.

    So what a listener sets while handling the start event (the tracer makes the call's
    ``execute_tool`` span current) reaches this call only: never the loop's thread, later
    turns or the batch's other calls, whose start events all come before any of them executes.
    """
    scope = contextvars.copy_context()
    scope.run(emit, ToolExecutionStartEvent(call.id, call.name, call.arguments))
    return scope


def find_tool(tools: Sequence[AgentTool], name: str) -> AgentTool | None:
    """The tool named ``name``, if there is one."""
    for candidate in tools:
        if candidate.name == name:
            return candidate
    return None


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    if not isinstance(exc, Exception):  # SystemExit(2) says "2": name what stopped the tool
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if text else type(exc).__name__


def _refused(tool_call: ToolCall, text: str, terminate: bool = False) -> ToolCallOutcome:
    """The outcome of a call that does not execute."""
    return ToolCallOutcome(tool_call, error_result(text, terminate=terminate), True, None)


def _prepare_tool_call(
    tool_call: ToolCall,
    tools: Sequence[AgentTool],
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    before_tool_call: Any,
    approvals: Approvals | None = None,
) -> _Prepared | ToolCallOutcome:
    """Preflight one call: lookup, argument preparation and validation, ``before_tool_call``,
    and whether it needs an approval (asked with its batch's others by ``ToolBatch.approve``).
    Runs inside the call's own contextvars (``_start_call``); the prepared call executes in a
    copy of them."""
    if signal.aborted:
        return _refused(tool_call, ABORTED_TEXT)
    tool = find_tool(tools, tool_call.name)
    if tool is None:
        return _refused(tool_call, f"Tool {tool_call.name} not found")
    try:
        args = _arguments(tool, tool_call)
        if before_tool_call is not None:
            ctx = BeforeToolCallContext(assistant_message, tool_call, args, context)
            decision = coerce_hook_result(before_tool_call(ctx, signal), BeforeToolCallResult)
            args = ctx.args
            if signal.aborted:
                return _refused(tool_call, ABORTED_TEXT)
            if decision is not None and decision.block:
                reason = decision.reason or "Tool execution was blocked"
                return _refused(tool_call, reason, decision.terminate)
        asks = _needs_approval(tool_call, tool, approvals)
    except Exception as exc:
        return _refused(tool_call, _error_text(exc))
    if isinstance(asks, ToolCallOutcome):
        return asks
    if signal.aborted:
        return _refused(tool_call, ABORTED_TEXT)
    return _Prepared(tool_call, tool, args, contextvars.copy_context(), asks)


def _arguments(tool: AgentTool, tool_call: ToolCall) -> Any:
    """The call's arguments, through the tool's ``prepare_arguments`` and validated."""
    call = tool_call
    if tool.prepare_arguments is not None:
        prepared_args = tool.prepare_arguments(tool_call.arguments)
        if prepared_args is not tool_call.arguments:
            call = tool_call.model_copy(update={"arguments": prepared_args})
    return validate_tool_arguments(tool, call)


def _needs_approval(
    tool_call: ToolCall, tool: AgentTool, approvals: Approvals | None
) -> bool | ToolCallOutcome:
    """Whether the call waits for an approval; the refusal of a call that needs one from an
    agent without a broker."""
    if approvals is None:
        if tool.requires_approval:
            text = f"Tool {tool.name} needs approval, but the agent has no approvals broker"
            return _refused(tool_call, text)
        return False
    return approvals.needs_approval(tool_call, tool.requires_approval)


def _ask_approvals(
    asking: list[_Prepared], runner: ToolRunner
) -> list[ApprovalDecision | ToolCallOutcome]:
    """Ask for the approvals of a batch's calls at once; per call its decision, or its refusal
    when the asking failed or the run's deadline passed meanwhile."""
    asked = []
    for prepared in asking:
        call, args = prepared.tool_call, prepared.args
        if isinstance(args, dict) and args is not call.arguments:
            call = call.model_copy(update={"arguments": args})  # what would run
        asked.append(call)
    approvals, budget = runner.approvals, runner.budget
    assert approvals is not None  # only a call with a broker asks
    try:
        until = None if budget is None else budget.ends
        decisions = approvals.request_batch(asked, runner.signal, until)
    except Exception as exc:
        return [_refused(p.tool_call, _error_text(exc)) for p in asking]
    if budget is not None and budget.expire():
        return [_refused(p.tool_call, ABORTED_TEXT) for p in asking]
    verdicts: list[ApprovalDecision | ToolCallOutcome] = [*decisions]
    return verdicts


def _approved(prepared: _Prepared, verdict: ApprovalDecision) -> _Prepared | ToolCallOutcome:
    """The call as it runs after ``verdict``: as prepared, with the approver's edited
    arguments (validated again), or refused."""
    call = prepared.tool_call
    if not verdict.approved:
        reason = f": {verdict.reason}" if verdict.reason else ""
        return _refused(call, f"Tool call {call.name} was rejected{reason}")
    if verdict.arguments is None:
        return prepared
    try:
        edited = call.model_copy(update={"arguments": dict(verdict.arguments)})
        args = prepared.scope.run(_arguments, prepared.tool, edited)
    except Exception as exc:
        text = f"The edited arguments of {call.name} are invalid: {_error_text(exc)}"
        return _refused(call, text)
    return _Prepared(edited, prepared.tool, args, prepared.scope)


def _execute(
    prepared: _Prepared,
    signal: AbortSignal,
    on_update: Callable[[Any], None],
    controls: ToolControls,
) -> tuple[AgentToolResult, bool, float]:
    """Run a prepared call; whatever it raises, or a non-result, becomes an error result.

    ``BaseException`` is caught too: a ``SystemExit`` from argparse, a ``GeneratorExit`` or an
    async tool's ``CancelledError`` ends this call, never its tool thread. Only Ctrl-C on the
    main thread (an inline call of a loop run there) goes on up, as it would from any wait of
    that loop. A ``ToolRetry`` becomes the retry result of the run's ``controls``; the call's
    :class:`~agentkit.RunContext` is current on this thread while it runs.
    """
    started = time.monotonic()
    token = controls.enter(prepared.tool_call.id, prepared.tool.name, signal)
    try:
        value = prepared.tool.execute(prepared.tool_call.id, prepared.args, signal, on_update)
        if isinstance(value, dict):
            value = AgentToolResult.model_validate(value)
        if not isinstance(value, AgentToolResult):
            raise TypeError(
                f"Tool {prepared.tool.name} returned {type(value).__name__}, not an AgentToolResult"
            )
        result, is_error = value, value.is_error
    except ToolRetry as exc:
        tool = prepared.tool
        result, is_error = controls.retry_result(tool.name, tool.max_retries, str(exc)), True
    except BaseException as exc:  # noqa: BLE001 - reported as the call's result, see above
        main = threading.current_thread() is threading.main_thread()
        if main and isinstance(exc, KeyboardInterrupt):
            raise  # Ctrl-C in an inline call of a loop run on the main thread: it stops the run
        result, is_error = error_result(_error_text(exc)), True
    finally:
        controls.leave(token)
    return result, is_error, (time.monotonic() - started) * 1000


def _finalize(
    prepared: _Prepared,
    item: _Finished,
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    after_tool_call: Any,
) -> ToolCallOutcome:
    """Apply ``after_tool_call``'s field-level replacements (or its failure) to a result.

    The final ``details`` and ``structured_content`` are stored as plain JSON data, so every
    event and message holding them serialises (a tool may return any object).
    """
    result, is_error, duration_ms = item.result, item.is_error, item.duration_ms
    if after_tool_call is not None:
        ctx = AfterToolCallContext(
            assistant_message, prepared.tool_call, prepared.args, result, is_error, context
        )
        try:
            change = coerce_hook_result(after_tool_call(ctx, signal), AfterToolCallResult)
        except Exception as exc:
            return ToolCallOutcome(
                prepared.tool_call, error_result(_error_text(exc)), True, duration_ms
            )
        if change is not None:
            updates: dict[str, Any] = {}
            if change.content is not None:
                updates["content"] = change.content
                updates["structured_content"] = change.structured_content
            elif change.structured_content is not None:
                updates["structured_content"] = change.structured_content
            for name in ("details", "usage", "terminate", "is_error"):
                if getattr(change, name) is not None:
                    updates[name] = getattr(change, name)
            result = AgentToolResult.model_validate({**dict(result), **updates})
            if change.is_error is not None:
                is_error = change.is_error
    return ToolCallOutcome(prepared.tool_call, _serialisable(result), is_error, duration_ms)


def _serialisable(result: AgentToolResult) -> AgentToolResult:
    """``result`` with JSON-safe details, structured content and text (see ``to_serialisable``)."""
    content = [clean_message(block) for block in result.content]
    details = to_serialisable(result.details)
    structured = to_serialisable(result.structured_content)
    if (
        details == result.details
        and structured == result.structured_content
        and all(a is b for a, b in zip(content, result.content, strict=True))
        and type(result.details) is type(details)
    ):
        return result
    return result.model_copy(
        update={"content": content, "details": details, "structured_content": structured}
    )


# --- a run's tool calls and one batch of them ---------------------------------------------------


class ToolRunner:
    """How one run runs its tool calls: the hooks, the executor, the controls and the budget
    that every batch of the run shares. Used on the run's loop thread only.

    ``executor`` is the user's (never shut down here) or ``None``: then agentkit's own daemon
    threads, at most ``max_workers``, made at the first batch, reused by later ones and stopped
    by :meth:`close`. ``inline`` (``tool_execution="inline"``) runs every call on the run's own
    thread instead, one after another, with no executor at all.
    """

    def __init__(
        self,
        emit: Callable[[AgentEvent], None],
        signal: AbortSignal,
        *,
        before_tool_call: Any = None,
        after_tool_call: Any = None,
        approvals: Approvals | None = None,
        deps: Any = None,
        grace: float = DEFAULT_TOOL_ABORT_GRACE,
        sequential: bool = False,
        inline: bool = False,
        executor: Executor | None = None,
        max_workers: int = 1,
        budget: BudgetTracker | None = None,
        usage: RunUsage | None = None,
    ) -> None:
        self.emit, self.signal = emit, signal
        self.before_tool_call, self.after_tool_call = before_tool_call, after_tool_call
        self.approvals, self.controls = approvals, ToolControls(deps)
        self.grace, self.sequential, self.inline = grace, sequential, inline
        self.budget, self.usage = budget, usage if usage is not None else RunUsage()
        self._executor, self._owns_executor = executor, executor is None
        self._max_workers = max_workers
        self.abandoned = False
        """A call was given up on, or a batch failed midway: nobody waits for its thread."""
        self.waiting: list[ApprovalRequest] = []
        """Calls deferred to a decision recorded later: the run ends after their batch."""
        self.entries: list[Any] = []
        """The approval entries recorded since the loop last took them (:meth:`take_entries`)."""

    @property
    def executor(self) -> Executor:
        """The executor the calls run on (agentkit's own is made here, at the first batch)."""
        if self._executor is None:
            from ._tool_threads import ToolThreadExecutor  # its import costs: see the module

            self._executor = ToolThreadExecutor(self._max_workers)
        return self._executor

    def close(self) -> None:
        """Stop agentkit's own threads, waiting for them unless a call was given up on."""
        if self._owns_executor and self._executor is not None:
            self._executor.shutdown(wait=not self.abandoned)

    def run_batch(
        self, context: AgentContext, message: AssistantMessage, calls: list[ToolCall]
    ) -> tuple[list[ToolResultMessage], bool]:
        """Run one turn's calls (SPEC 4.5): one group in parallel mode, a group per call in
        sequential mode; return their result messages and whether every result asked to
        terminate. Calls past the ``max_tool_calls`` budget are refused with an error result."""
        allowed = len(calls) if self.budget is None else self.budget.allowed_tool_calls(len(calls))
        calls, refused = calls[:allowed], calls[allowed:]
        self.usage.tool_calls += len(calls)
        sequential = self.sequential or self.inline or any(
            (t := find_tool(context.tools, c.name)) is not None and t.execution_mode == "sequential"
            for c in calls
        )
        outcomes: list[ToolCallOutcome] = []
        messages: list[ToolResultMessage] = []
        groups = [[call] for call in calls] if sequential else [calls]
        for number, group in enumerate(groups):
            if self.waiting:  # a sequential batch: the calls after a waiting one wait too
                self.defer([call for rest in groups[number:] for call in rest], held=True)
                break
            for outcome in ToolBatch(self, context.tools, context, message).run(group):
                outcomes.append(outcome)
                messages.append(self.emit_result_message(outcome))
                self.usage.add(outcome.result.usage)
        limit = (self.budget.limit if self.budget is not None else None) or "max_tool_calls"
        for call in refused:
            messages.append(self.fail_call(call, REFUSED_TEXT.format(name=call.name, limit=limit)))
        terminate = bool(outcomes) and all(o.result.terminate for o in outcomes)
        return messages, terminate

    def defer(self, calls: list[ToolCall], held: bool = False) -> None:
        """Record that ``calls`` wait for a decision (``held``: for the calls before them),
        as approval entries announced now, so they are durable before anything else of the
        batch runs (see :mod:`agentkit.deferred`)."""
        from .deferred import request_entry

        self.usage.tool_calls -= len(calls)  # counted when they run, at the resume
        for call in calls:
            entry = request_entry(call, held)
            self.emit(MessageStartEvent(entry))
            self.emit(MessageEndEvent(entry))
            self.entries.append(entry)
            if not held:
                self.waiting.append(entry.request())

    def take_entries(self) -> list[Any]:
        """The approval entries recorded since the last call, for the loop's transcript."""
        entries, self.entries = self.entries, []
        return entries

    def fail_truncated(self, calls: list[ToolCall]) -> list[ToolResultMessage]:
        """Length protection: calls from a truncated response never run (SPEC 4.4)."""
        return [self.fail_call(call, TRUNCATED_TEXT.format(name=call.name)) for call in calls]

    def fail_call(self, call: ToolCall, text: str) -> ToolResultMessage:
        """A call that never runs: its start and end events and its error result message."""
        _start_call(self.emit, call)
        outcome = _refused(call, text)
        self.emit_end(outcome)
        return self.emit_result_message(outcome)

    def emit_end(self, outcome: ToolCallOutcome) -> None:
        """Announce that a call ended."""
        call = outcome.tool_call
        self.emit(
            ToolExecutionEndEvent(
                call.id, call.name, outcome.result, outcome.is_error, outcome.duration_ms
            )
        )

    def emit_result_message(self, outcome: ToolCallOutcome) -> ToolResultMessage:
        """The call's result message, announced."""
        result = outcome.result
        message = ToolResultMessage(
            tool_call_id=outcome.tool_call.id,
            tool_name=outcome.tool_call.name,
            content=list(result.content or []),
            details=result.details,
            usage=result.usage,
            is_error=outcome.is_error,
            duration_ms=outcome.duration_ms,
        )
        self.emit(MessageStartEvent(message))
        self.emit(MessageEndEvent(message))
        return message


class ToolBatch:
    """One group of calls that execute together, in named steps: :meth:`prepare` each call (its
    start event and preflight, on the loop's thread), :meth:`execute` the prepared ones at once
    on the executor, :meth:`finalize` each as it ends (``after_tool_call`` and its end event,
    back on the loop's thread), and give up on those that ignore an abort past the grace period.

    The tool threads only put updates and ends on the batch's inbox; the loop's thread takes
    them off in order, so every event is emitted there. An update of a call that already ended
    is dropped (SPEC 2.4), and so is the real end of a call that timed out.
    """

    def __init__(
        self,
        runner: ToolRunner,
        tools: Sequence[AgentTool],
        context: AgentContext,
        message: AssistantMessage,
    ) -> None:
        self.runner, self.tools, self.context, self.message = runner, tools, context, message
        self._prepared: list[_Prepared] = []
        self._outcomes: list[ToolCallOutcome | None] = []  # by index in _prepared
        self._remaining = 0  # prepared calls not finalized yet
        self._inbox: queue.SimpleQueue[_Update | _Finished | object] = queue.SimpleQueue()
        self._timers = _CallTimers(self._inbox)
        self._futures: list[Future[_Finished | None]] = []
        self._failure: Exception | None = None  # inline: a listener of an update raised

    def run(self, calls: list[ToolCall]) -> list[ToolCallOutcome]:
        """Prepare every call, ask their approvals together, execute the prepared ones; the
        outcomes in source order (a call deferred to a later decision has none)."""
        slots = self.approve([self.prepare(call) for call in calls])
        self._prepared = [slot for slot in slots if isinstance(slot, _Prepared)]
        if self._prepared:
            self.execute()
        finished = iter([outcome for outcome in self._outcomes if outcome is not None])
        return [next(finished) if isinstance(s, _Prepared) else s for s in slots if s is not None]

    def approve(
        self, slots: list[_Prepared | ToolCallOutcome]
    ) -> list[_Prepared | ToolCallOutcome | None]:
        """Ask for the approvals of the prepared calls that need one, all at once (a reviewer
        sees the whole batch, and one timeout covers it); a refused call ends here, a deferred
        one waits for a decision recorded later (``None``: :meth:`ToolRunner.defer`)."""
        asking = [s for s in slots if isinstance(s, _Prepared) and s.asks]
        if not asking:
            return list(slots)
        verdicts = dict(zip(map(id, asking), _ask_approvals(asking, self.runner), strict=True))
        decided: list[_Prepared | ToolCallOutcome | None] = []
        deferred: list[ToolCall] = []
        for slot in slots:
            verdict = verdicts.get(id(slot))
            if verdict is None or isinstance(slot, ToolCallOutcome):
                decided.append(slot)
                continue
            if isinstance(verdict, ToolCallOutcome):
                outcome: _Prepared | ToolCallOutcome = verdict
            elif verdict.deferred:
                call, args = slot.tool_call, slot.args
                if isinstance(args, dict) and args is not call.arguments:
                    call = call.model_copy(update={"arguments": args})
                deferred.append(call)
                decided.append(None)
                continue
            else:
                outcome = _approved(slot, verdict)
            if isinstance(outcome, ToolCallOutcome):
                self.runner.emit_end(outcome)
            decided.append(outcome)
        if deferred:
            self.runner.defer(deferred)
        return decided

    def prepare(self, call: ToolCall) -> _Prepared | ToolCallOutcome:
        """Emit the call's start and preflight it in its own contextvars; a call that will not
        execute ends here."""
        runner = self.runner
        prepared = _start_call(runner.emit, call).run(
            _prepare_tool_call,
            call,
            self.tools,
            self.message,
            self.context,
            runner.signal,
            runner.before_tool_call,
            runner.approvals,
        )
        if isinstance(prepared, ToolCallOutcome):
            if runner.signal.aborted:
                prepared = _if_interrupted(prepared, runner.signal)
            runner.emit_end(prepared)
        return prepared

    def execute(self) -> None:
        """Submit the prepared calls and finalize each as it ends, until all have, or until
        the grace period after an abort runs out."""
        runner = self.runner
        self._outcomes = [None] * len(self._prepared)
        self._remaining = len(self._prepared)
        if runner.inline:
            self._execute_here()
            return
        try:
            items = wait_or_give_up(
                self._get, runner.signal, self._wake, runner.grace, runner.budget, self._submit
            )
            try:
                for item in items:
                    if isinstance(item, _Update):
                        self._emit_update(item)
                    elif isinstance(item, _Finished):
                        self.finalize(item)
                        if not self._remaining:
                            break
            finally:
                items.close()
            self._give_up()
        finally:
            self._close()

    def finalize(self, item: _Finished) -> None:
        """A call ended: apply ``after_tool_call``, record the outcome, announce the end."""
        if self._outcomes[item.index] is not None:
            return  # the real end of a call that already timed out
        runner = self.runner
        outcome = _finalize(
            self._prepared[item.index],
            item,
            self.message,
            self.context,
            runner.signal,
            runner.after_tool_call,
        )
        if item.late:
            outcome = _if_interrupted(outcome, runner.signal)
        self._outcomes[item.index] = outcome
        runner.emit_end(outcome)
        self._remaining -= 1

    def _execute_here(self) -> None:
        """Inline mode: execute each prepared call in turn on this thread, the run's, emitting
        its updates as they come. The run's deadline reaches a call through a timer that aborts
        the run's signal, and a call's ``timeout`` as in threaded mode; but nothing here can give
        up on a call that ignores its signal: the run waits for it to return."""
        budget = self.runner.budget
        deadline = budget.expiring_meanwhile() if budget is not None else contextlib.nullcontext()
        try:
            with deadline:
                for index, prepared in enumerate(self._prepared):
                    item = prepared.scope.run(self._execute_call, index, self._update_here)
                    if self._failure is not None:
                        raise self._failure  # a listener of one of its updates raised
                    self._take_timed_out()
                    self.finalize(item or self._not_executed(index))
        finally:
            self._timers.close()

    def _update_here(self, index: int, partial: Any) -> None:
        """Inline mode: emit a call's update now, on the run's thread (dropped once the call
        timed out). A listener that raises fails the run once the call returns, as in threaded
        mode, instead of reaching the tool as if the tool had failed."""
        if self._failure is not None:
            return
        try:
            self._take_timed_out()
            self._emit_update(_Update(index, partial))
        except Exception as exc:
            self._failure = exc

    def _take_timed_out(self) -> None:
        """Inline mode: finalize the calls whose timer fired (the only thing on the inbox)."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Finished):
                self.finalize(item)

    def _get(self, timeout: float | None) -> Any:
        return self._inbox.get(timeout=timeout)

    def _wake(self) -> None:
        self._inbox.put(WAKE)

    def _submit(self) -> None:
        submit = self.runner.executor.submit
        for index, prepared in enumerate(self._prepared):
            future = submit(prepared.scope.run, self._execute_call, index)
            self._futures.append(future)
            future.add_done_callback(functools.partial(self._report, index))

    def _execute_call(
        self, index: int, on_update: Callable[[int, Any], None] | None = None
    ) -> _Finished | None:
        """On a tool thread (or, inline, the run's): execute call ``index`` under its timer,
        unless the run was aborted first (a call that never executed has no duration)."""
        signal = self.runner.signal
        if signal.aborted:
            return None
        prepared = self._prepared[index]
        try:
            call_signal = self._timers.start(index, prepared.tool, signal)
            update = functools.partial(on_update or self._update, index)
            result, is_error, duration = _execute(
                prepared, call_signal, update, self.runner.controls
            )
        finally:
            self._timers.finished(index)
        return _Finished(index, result, is_error, duration, signal.aborted)

    def _update(self, index: int, partial: Any) -> None:
        self._inbox.put(_Update(index, partial))

    def _report(self, index: int, future: Future[_Finished | None]) -> None:
        """Hand call ``index``'s end to the loop's thread: every call reports, whatever
        happened on its thread (a call that never executed ends as aborted)."""
        try:
            item = future.result()
        except BaseException:  # noqa: BLE001 - its thread failed: reported as not executed
            item = None
        self._inbox.put(item or self._not_executed(index))

    @staticmethod
    def _not_executed(index: int) -> _Finished:
        """The end of a call that never executed: the run was aborted first."""
        return _Finished(index, error_result(ABORTED_TEXT), True, None, True)

    def _emit_update(self, item: _Update) -> None:
        if self._outcomes[item.index] is None:
            call = self._prepared[item.index].tool_call
            self.runner.emit(
                ToolExecutionUpdateEvent(call.id, call.name, call.arguments, item.partial)
            )

    def _give_up(self) -> None:
        """End the calls that did not stop within the grace period after an abort; their
        threads are left to finish on their own."""
        grace, budget = self.runner.grace, self.runner.budget
        why = "before the run's deadline" if budget and budget.timed_out else f"within {grace:g} s"
        for index, prepared in enumerate(self._prepared):
            if self._outcomes[index] is None:
                text = f"{ABORTED_TEXT}: tool {prepared.tool.name} did not stop {why}"
                outcome = ToolCallOutcome(prepared.tool_call, error_result(text), True, None)
                outcome = _if_interrupted(outcome, self.runner.signal)
                self._outcomes[index] = outcome
                self.runner.emit_end(outcome)

    def _close(self) -> None:
        """Cancel the timers left; tell the runner when a call is still running; let go of
        the futures, whose done callbacks refer back to this batch (a cycle that would leave
        the whole batch, and the run it reaches, to the garbage collector)."""
        runner = self.runner
        futures, self._futures = self._futures, []
        self._timers.close()
        if not self._remaining:
            if self._timers.still_running():
                runner.abandoned = True  # a call that timed out is still running
            return
        if not runner.signal.aborted and futures:
            # The run is failing mid-batch (a listener raised): give the running tools the
            # grace period to finish, but never hang the failure on them.
            from concurrent.futures import wait  # imported already: an executor runs the calls

            wait(futures, timeout=runner.grace)
        runner.abandoned = True


def run_tool_call(
    tool_call: ToolCall,
    *,
    tools: Sequence[AgentTool],
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal | None = None,
    on_update: Callable[[Any], None] | None = None,
    before_tool_call: Any = None,
    after_tool_call: Any = None,
    approvals: Approvals | None = None,
    deps: Any = None,
) -> ToolCallOutcome:
    """Preflight, execute and finalise one call, without events or messages.

    ``on_update`` is called on this thread. It never raises for a tool failure: the failure is
    in the outcome. ``approvals`` and ``deps`` are as for a run.
    """

    def forward(event: AgentEvent) -> None:
        if on_update is not None and isinstance(event, ToolExecutionUpdateEvent):
            on_update(event.partial_result)

    runner = ToolRunner(
        forward,
        signal or AbortController().signal,
        before_tool_call=before_tool_call,
        after_tool_call=after_tool_call,
        approvals=approvals,
        deps=deps,
    )
    try:
        outcomes = ToolBatch(runner, tools, context, assistant_message).run([tool_call])
    finally:
        runner.close()
    if not outcomes:  # deferred: a single call has no session to wait in
        text = f"Tool call {tool_call.name} waits for approval, which run_tool_call cannot defer"
        return _refused(tool_call, text)
    return outcomes[0]
