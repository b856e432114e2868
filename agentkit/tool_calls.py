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
import functools
import queue
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ._tool_execution import (
    CallTimers,
    Finished,
    Prepared,
    ToolControls,
    Update,
    as_it_runs,
    as_reviewed,
    ask_reviewers,
    execute_prepared,
    execute_tool,
    finalize,
    find_tool,
    if_interrupted,
    prepare_tool_call,
    refused,
    start_call,
)
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .config import DEFAULT_TOOL_ABORT_GRACE
from .events import (
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    ToolExecutionEndEvent,
    ToolExecutionUpdateEvent,
)
from .hooks import (
    ToolCallOutcome,
)
from .policy import PreparedCall, RunPolicy, RunScope, ToolCallRun, chain, overrides
from .results import RunUsage
from .tools import (
    error_result,
)
from .transcript import TRUNCATED_TEXT, request_entry
from .types import (
    AgentContext,
    AgentTool,
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
)
from .waits import WAKE, Deadline, wait_or_give_up

if TYPE_CHECKING:  # see _tool_threads: concurrent.futures is imported when a batch needs it
    from concurrent.futures import Executor, Future

__all__ = ["ToolControls", "ToolRunner", "run_tool_call"]

# --- a run's tool calls and one batch of them ---------------------------------------------------


class ToolRunner:
    """How one run runs its tool calls: the hooks, the executor, the controls, the run's
    policies (their ``review_calls`` and ``wrap_tool_call``) and its deadline, which every
    batch of the run shares. Used on the run's loop thread only.

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
        deps: Any = None,
        grace: float = DEFAULT_TOOL_ABORT_GRACE,
        sequential: bool = False,
        inline: bool = False,
        executor: Executor | None = None,
        max_workers: int = 1,
        usage: RunUsage | None = None,
    ) -> None:
        self.emit, self.signal = emit, signal
        self.before_tool_call, self.after_tool_call = before_tool_call, after_tool_call
        self.controls = ToolControls(deps)
        self.grace, self.sequential, self.inline = grace, sequential, inline
        self.usage = usage if usage is not None else RunUsage()
        self.deadline: Deadline | None = None
        """What ends the batch's waits early (the run's budget deadline)."""
        self.reviewers: list[RunPolicy] = []
        """The run's policies that review each batch's prepared calls (``review_calls``)."""
        self.scope: RunScope | None = None
        """The run the policies are given."""
        self.execute_call: Callable[[ToolCallRun], Any] | None = None
        """The run's ``wrap_tool_call`` chain, when a policy wraps calls."""
        self._executor, self._owns_executor = executor, executor is None
        self._max_workers = max_workers
        self.abandoned = False
        """A call was given up on, or a batch failed midway: nobody waits for its thread."""
        self.waiting: list[Any] = []
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
        self,
        context: AgentContext,
        message: AssistantMessage,
        calls: list[ToolCall],
        signal: AbortSignal | None = None,
    ) -> tuple[list[ToolResultMessage], bool]:
        """Run one turn's calls (SPEC 4.5) under ``signal`` (the run's by default): one group
        in parallel mode, a group per call in sequential mode; return their result messages and
        whether every result asked to terminate."""
        if signal is None or signal is self.signal:
            return self._run_groups(context, message, calls)
        run_signal, self.signal = self.signal, signal
        try:
            return self._run_groups(context, message, calls)
        finally:
            self.signal = run_signal

    def _run_groups(
        self, context: AgentContext, message: AssistantMessage, calls: list[ToolCall]
    ) -> tuple[list[ToolResultMessage], bool]:
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
        terminate = bool(outcomes) and all(o.result.terminate for o in outcomes)
        return messages, terminate

    def defer(self, calls: list[ToolCall], held: bool = False) -> None:
        """Record that ``calls`` wait for a decision (``held``: for the calls before them),
        as approval entries announced now, so they are durable before anything else of the
        batch runs (see :mod:`agentkit.deferred`)."""
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

    def take_waiting(self) -> list[Any]:
        """The requests of the calls that wait for a decision (the run ends waiting)."""
        waiting, self.waiting = self.waiting, []
        return waiting

    def fail_truncated(self, calls: list[ToolCall]) -> list[ToolResultMessage]:
        """Length protection: calls from a truncated response never run (SPEC 4.4)."""
        return [self.fail_call(call, TRUNCATED_TEXT.format(name=call.name)) for call in calls]

    def fail_call(self, call: ToolCall, text: str) -> ToolResultMessage:
        """A call that never runs: its start and end events and its error result message."""
        start_call(self.emit, call)
        outcome = refused(call, text)
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
        self._prepared: list[Prepared] = []
        self._outcomes: list[ToolCallOutcome | None] = []  # by index in _prepared
        self._remaining = 0  # prepared calls not finalized yet
        self._inbox: queue.SimpleQueue[Update | Finished | object] = queue.SimpleQueue()
        self._timers = CallTimers(self._inbox)
        self._futures: list[Future[Finished | None]] = []
        self._failure: Exception | None = None  # inline: a listener of an update raised

    def run(self, calls: list[ToolCall]) -> list[ToolCallOutcome]:
        """Prepare every call, ask their approvals together, execute the prepared ones; the
        outcomes in source order (a call deferred to a later decision has none)."""
        slots = self.review([self.prepare(call) for call in calls])
        self._prepared = [slot for slot in slots if isinstance(slot, Prepared)]
        if self._prepared:
            self.execute()
        finished = iter([outcome for outcome in self._outcomes if outcome is not None])
        return [next(finished) if isinstance(s, Prepared) else s for s in slots if s is not None]

    def review(
        self, slots: list[Prepared | ToolCallOutcome]
    ) -> list[Prepared | ToolCallOutcome | None]:
        """The run's policies review the prepared calls, all at once (an approver sees the
        whole batch, and one timeout covers it); a refused call ends here, a deferred one waits
        for a decision recorded later (``None``: :meth:`ToolRunner.defer`). A call whose tool
        requires approval runs only when a policy allowed it."""
        runner = self.runner
        prepared = [s for s in slots if isinstance(s, Prepared)]
        reviewers = runner.reviewers
        if not reviewers and not any(p.tool.requires_approval for p in prepared):
            return list(slots)
        reviews = {id(p): PreparedCall(as_it_runs(p), p.tool, p.args) for p in prepared}
        ask_reviewers(reviewers, runner.scope, list(reviews.values()))
        decided: list[Prepared | ToolCallOutcome | None] = []
        deferred: list[ToolCall] = []
        for slot in slots:
            review = reviews.get(id(slot))
            if review is None or isinstance(slot, ToolCallOutcome):
                decided.append(slot)
                continue
            if review.verdict == "defer":
                deferred.append(review.tool_call)
                decided.append(None)
                continue
            outcome = as_reviewed(slot, review)
            if isinstance(outcome, ToolCallOutcome):
                runner.emit_end(outcome)
            decided.append(outcome)
        if deferred:
            runner.defer(deferred)
        return decided

    def prepare(self, call: ToolCall) -> Prepared | ToolCallOutcome:
        """Emit the call's start and preflight it in its own contextvars; a call that will not
        execute ends here."""
        runner = self.runner
        prepared = start_call(runner.emit, call).run(
            prepare_tool_call,
            call,
            self.tools,
            self.message,
            self.context,
            runner.signal,
            runner.before_tool_call,
        )
        if isinstance(prepared, ToolCallOutcome):
            if runner.signal.aborted:
                prepared = if_interrupted(prepared, runner.signal)
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
                self._get, runner.signal, self._wake, runner.grace, runner.deadline, self._submit
            )
            try:
                for item in items:
                    if isinstance(item, Update):
                        self._emit_update(item)
                    elif isinstance(item, Finished):
                        self.finalize(item)
                        if not self._remaining:
                            break
            finally:
                items.close()
            self._give_up()
        finally:
            self._close()

    def finalize(self, item: Finished) -> None:
        """A call ended: apply ``after_tool_call``, record the outcome, announce the end."""
        if self._outcomes[item.index] is not None:
            return  # the real end of a call that already timed out
        runner = self.runner
        outcome = finalize(
            self._prepared[item.index],
            item,
            self.message,
            self.context,
            runner.signal,
            runner.after_tool_call,
        )
        if item.late:
            outcome = if_interrupted(outcome, runner.signal)
        self._outcomes[item.index] = outcome
        runner.emit_end(outcome)
        self._remaining -= 1

    def _execute_here(self) -> None:
        """Inline mode: execute each prepared call in turn on this thread, the run's, emitting
        its updates as they come. The run's deadline reaches a call through a timer that aborts
        the run's signal, and a call's ``timeout`` as in threaded mode; but nothing here can give
        up on a call that ignores its signal: the run waits for it to return."""
        ends = self.runner.deadline
        deadline = ends.expiring_meanwhile() if ends is not None else contextlib.nullcontext()
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
            self._emit_update(Update(index, partial))
        except Exception as exc:
            self._failure = exc

    def _take_timed_out(self) -> None:
        """Inline mode: finalize the calls whose timer fired (the only thing on the inbox)."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, Finished):
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
    ) -> Finished | None:
        """On a tool thread (or, inline, the run's): execute call ``index`` under its timer,
        unless the run was aborted first (a call that never executed has no duration)."""
        signal = self.runner.signal
        if signal.aborted:
            return None
        prepared = self._prepared[index]
        try:
            call_signal = self._timers.start(index, prepared.tool, signal)
            update = functools.partial(on_update or self._update, index)
            result, is_error, duration = execute_prepared(
                prepared, call_signal, update, self.runner.controls, self.runner.execute_call
            )
        finally:
            self._timers.finished(index)
        return Finished(index, result, is_error, duration, signal.aborted)

    def _update(self, index: int, partial: Any) -> None:
        self._inbox.put(Update(index, partial))

    def _report(self, index: int, future: Future[Finished | None]) -> None:
        """Hand call ``index``'s end to the loop's thread: every call reports, whatever
        happened on its thread (a call that never executed ends as aborted)."""
        try:
            item = future.result()
        except BaseException:  # noqa: BLE001 - its thread failed: reported as not executed
            item = None
        self._inbox.put(item or self._not_executed(index))

    @staticmethod
    def _not_executed(index: int) -> Finished:
        """The end of a call that never executed: the run was aborted first."""
        return Finished(index, error_result(ABORTED_TEXT), True, None, True)

    def _emit_update(self, item: Update) -> None:
        if self._outcomes[item.index] is None:
            call = self._prepared[item.index].tool_call
            self.runner.emit(
                ToolExecutionUpdateEvent(call.id, call.name, call.arguments, item.partial)
            )

    def _give_up(self) -> None:
        """End the calls that did not stop within the grace period after an abort; their
        threads are left to finish on their own."""
        grace, ends = self.runner.grace, self.runner.deadline
        why = "before the run's deadline" if ends and ends.timed_out else f"within {grace:g} s"
        for index, prepared in enumerate(self._prepared):
            if self._outcomes[index] is None:
                text = f"{ABORTED_TEXT}: tool {prepared.tool.name} did not stop {why}"
                outcome = ToolCallOutcome(prepared.tool_call, error_result(text), True, None)
                outcome = if_interrupted(outcome, self.runner.signal)
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
    approvals: RunPolicy | None = None,
    deps: Any = None,
    policies: Sequence[RunPolicy] = (),
) -> ToolCallOutcome:
    """Preflight, execute and finalise one call, without events or messages.

    ``on_update`` is called on this thread. It never raises for a tool failure: the failure is
    in the outcome. ``approvals`` (an :class:`~agentkit.Approvals` broker) and ``deps`` are as
    for a run; ``policies`` review the call and wrap its execution as a run's would (their
    other hooks are not called: there is no run).
    """

    def forward(event: AgentEvent) -> None:
        if on_update is not None and isinstance(event, ToolExecutionUpdateEvent):
            on_update(event.partial_result)

    runner = ToolRunner(
        forward,
        signal or AbortController().signal,
        before_tool_call=before_tool_call,
        after_tool_call=after_tool_call,
        deps=deps,
    )
    chained = [*([approvals] if approvals is not None else []), *policies]
    runner.reviewers = [p for p in chained if overrides(p, "review_calls")]
    runner.scope = _OneCall(runner.signal, context)
    if any(overrides(p, "wrap_tool_call") for p in chained):
        runner.execute_call = chain(chained, "wrap_tool_call", runner.scope, execute_tool)
    try:
        outcomes = ToolBatch(runner, tools, context, assistant_message).run([tool_call])
    finally:
        runner.close()
    if not outcomes:  # deferred: a single call has no session to wait in
        text = f"Tool call {tool_call.name} waits for approval, which run_tool_call cannot defer"
        return refused(tool_call, text)
    return outcomes[0]


class _OneCall(RunScope):
    """What the policies of :func:`run_tool_call` are given: one call has a signal and a
    context, but no run to act on (its run-level methods raise)."""

    def __init__(self, signal: AbortSignal, context: AgentContext) -> None:
        self.signal, self.context, self.deadline = signal, context, None
        self.state: dict[str, Any] = {}

    def _no_run(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("run_tool_call runs one call outside a run: there is no run to act on")

    emit = append = set_signal = view = complete = send_aside = run_tools = refuse_call = _no_run

    def end(self, *args: Any, **kwargs: Any) -> None:
        self._no_run()

    @property
    def ending(self) -> None:
        return None
