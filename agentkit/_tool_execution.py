"""One tool call, in named steps: its preflight (lookup, arguments, ``before_tool_call``), the
batch's review of it, its execution (under its ``timeout`` and the run's ``wrap_tool_call``
chain) and its finalisation (``after_tool_call``, JSON-safe results). :mod:`agentkit.tool_calls`
runs batches of them; the steps here are what each call goes through, on whichever thread.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ._serialize import clean_message, to_serialisable
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .errors import ToolRetry
from .events import AgentEvent, ToolExecutionStartEvent
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    ToolCallOutcome,
    coerce_hook_result,
)
from .policy import EndRun, PreparedCall, RunPolicy, RunScope, ToolCallRun, ending_of
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
)

RETRY_TEXT = "{message}\n\nFix the problem and call {name} again."
RETRIES_SPENT_TEXT = (
    "{message}\n\n{name} asked for a retry more than its budget ({budget}) allows in this run; "
    "do not call it again."
)
TIMEOUT_TEXT = "Tool {name} timed out after {timeout:g} s"
NO_REVIEWER_TEXT = "Tool {name} needs approval, but the agent has no approvals broker"


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


# --- what the tool threads tell the loop's thread ----------------------------------------------


class Update:
    __slots__ = ("index", "partial")

    def __init__(self, index: int, partial: Any) -> None:
        self.index, self.partial = index, partial


class Finished:
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


def if_interrupted(outcome: ToolCallOutcome, signal: AbortSignal) -> ToolCallOutcome:
    """``outcome``, or, when ``signal`` was aborted with a reason that says what a call it cut
    short returns (an interrupt's ``tool_result(name)``), that result (keeping the usage and
    details the call reported: what it spent was spent)."""
    call = outcome.tool_call
    reason = signal.reason
    result_for = getattr(reason, "tool_result", None) if signal.aborted else None
    replaced = result_for(call.name) if result_for is not None else None
    if replaced is None:
        return outcome
    replaced.usage, replaced.details = outcome.result.usage, outcome.result.details
    return ToolCallOutcome(call, replaced, True, outcome.duration_ms)


class CallTimers:
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
            self._inbox.put(Finished(index, error_result(text), True, timeout * 1000))
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
class Prepared(FieldsEqRepr):
    tool_call: ToolCall
    tool: AgentTool
    args: Any
    scope: contextvars.Context  # the contextvars it executes in, as its preflight left them


def start_call(emit: Callable[[AgentEvent], None], call: ToolCall) -> contextvars.Context:
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


def error_text(exc: BaseException) -> str:
    text = str(exc)
    if not isinstance(exc, Exception):  # SystemExit(2) says "2": name what stopped the tool
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if text else type(exc).__name__


def refused(tool_call: ToolCall, text: str, terminate: bool = False) -> ToolCallOutcome:
    """The outcome of a call that does not execute."""
    return ToolCallOutcome(tool_call, error_result(text, terminate=terminate), True, None)


def prepare_tool_call(
    tool_call: ToolCall,
    tools: Sequence[AgentTool],
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    before_tool_call: Any,
) -> Prepared | ToolCallOutcome:
    """Preflight one call: lookup, argument preparation and validation, ``before_tool_call``
    (the batch's review, an approval say, comes after, for all its calls at once:
    ``ToolBatch.review``). Runs inside the call's own contextvars (``start_call``); the
    prepared call executes in a copy of them."""
    if signal.aborted:
        return refused(tool_call, ABORTED_TEXT)
    tool = find_tool(tools, tool_call.name)
    if tool is None:
        return refused(tool_call, f"Tool {tool_call.name} not found")
    try:
        args = arguments(tool, tool_call)
        if before_tool_call is not None:
            ctx = BeforeToolCallContext(assistant_message, tool_call, args, context)
            decision = coerce_hook_result(before_tool_call(ctx, signal), BeforeToolCallResult)
            args = ctx.args
            if signal.aborted:
                return refused(tool_call, ABORTED_TEXT)
            if decision is not None and decision.block:
                reason = decision.reason or "Tool execution was blocked"
                return refused(tool_call, reason, decision.terminate)
    except Exception as exc:
        return refused(tool_call, error_text(exc))
    return Prepared(tool_call, tool, args, contextvars.copy_context())


def arguments(tool: AgentTool, tool_call: ToolCall) -> Any:
    """The call's arguments, through the tool's ``prepare_arguments`` and validated."""
    call = tool_call
    if tool.prepare_arguments is not None:
        prepared_args = tool.prepare_arguments(tool_call.arguments)
        if prepared_args is not tool_call.arguments:
            call = tool_call.model_copy(update={"arguments": prepared_args})
    return validate_tool_arguments(tool, call)


def as_it_runs(prepared: Prepared) -> ToolCall:
    """The call with the arguments it would run with (``before_tool_call`` may change them)."""
    call, args = prepared.tool_call, prepared.args
    if isinstance(args, dict) and args is not call.arguments:
        call = call.model_copy(update={"arguments": args})
    return call


def ask_reviewers(
    reviewers: list[RunPolicy], scope: RunScope | None, calls: list[PreparedCall]
) -> None:
    """Each reviewer's ``review_calls`` in order. One that ends the run (:class:`EndRun`)
    leaves the undecided calls refused with its message; any other exception fails the run."""
    for reviewer in reviewers:
        try:
            reviewer.review_calls(scope, calls)  # type: ignore[arg-type]
        except EndRun as stop:
            if scope is not None:
                ending = ending_of(stop)
                scope.end(ending.reason, ending.message, budget=ending.budget,
                          detail=ending.detail)  # fmt: skip
            for call in calls:
                if call.verdict is None:
                    call.deny(str(stop))
            return


def as_reviewed(prepared: Prepared, review: PreparedCall) -> Prepared | ToolCallOutcome:
    """The call as it runs after its review: as prepared, with the approver's edited
    arguments (validated again), or refused."""
    call = prepared.tool_call
    if review.verdict == "deny":
        return refused(call, review.reason or "Tool execution was blocked")
    if review.verdict is None and review.needs_review:
        return refused(call, NO_REVIEWER_TEXT.format(name=call.name))
    if review.arguments is None:
        return prepared
    try:
        edited = call.model_copy(update={"arguments": dict(review.arguments)})
        args = prepared.scope.run(arguments, prepared.tool, edited)
    except Exception as exc:
        text = f"The edited arguments of {call.name} are invalid: {error_text(exc)}"
        return refused(call, text)
    return Prepared(edited, prepared.tool, args, prepared.scope)


def execute_prepared(
    prepared: Prepared,
    signal: AbortSignal,
    on_update: Callable[[Any], None],
    controls: ToolControls,
    execute_call: Callable[[ToolCallRun], Any] | None = None,
) -> tuple[AgentToolResult, bool, float]:
    """Run a prepared call (through the run's ``wrap_tool_call`` chain, ``execute_call``, when
    a policy wraps calls); whatever it raises, or a non-result, becomes an error result.

    ``BaseException`` is caught too: a ``SystemExit`` from argparse, a ``GeneratorExit`` or an
    async tool's ``CancelledError`` ends this call, never its tool thread. Only Ctrl-C on the
    main thread (an inline call of a loop run there) goes on up, as it would from any wait of
    that loop. A ``ToolRetry`` becomes the retry result of the run's ``controls``; the call's
    :class:`~agentkit.RunContext` is current on this thread while it runs.
    """
    started = time.monotonic()
    token = controls.enter(prepared.tool_call.id, prepared.tool.name, signal)
    try:
        if execute_call is None:
            value = prepared.tool.execute(prepared.tool_call.id, prepared.args, signal, on_update)
        else:
            run = ToolCallRun(prepared.tool_call, prepared.tool, prepared.args, signal, on_update)
            value = execute_call(run)
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
        result, is_error = error_result(error_text(exc)), True
    finally:
        controls.leave(token)
    return result, is_error, (time.monotonic() - started) * 1000


def finalize(
    prepared: Prepared,
    item: Finished,
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
                prepared.tool_call, error_result(error_text(exc)), True, duration_ms
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
    return ToolCallOutcome(prepared.tool_call, serialisable(result), is_error, duration_ms)


def serialisable(result: AgentToolResult) -> AgentToolResult:
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


def execute_tool(call: ToolCallRun) -> Any:
    """The innermost ``wrap_tool_call`` handler: the tool itself."""
    return call.tool.execute(call.tool_call.id, call.args, call.signal, call.on_update)
