"""The agent loop: plain functions over ``(context, config, emit, signal)`` that keep no state.

A run alternates model requests and tool batches until the model stops asking for tools and no
steering or follow-up message is waiting (SPEC section 4). Everything here runs on the calling
thread; only tool execution fans out to the run's tool threads, and the calling thread pumps
their progress so that every ``emit`` happens on it, in order.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import importlib
import queue
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._serialize import LLM_ROLES
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .budgets import REFUSED_TEXT, Budgets, BudgetTracker
from .controls import TIMEOUT_TEXT, ToolControls
from .errors import CannotContinueError, NoStreamFunctionError, ToolRetry
from .event_stream import WAKE, AssistantMessageEventStream, EventStream, consuming_here
from .events import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    DoneEvent,
    ErrorEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    StartEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    ToolExecutionUpdateEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    RequestContext,
    ToolCallOutcome,
    TurnContext,
    TurnUpdate,
    coerce_hook_result,
)
from .output import DEFAULT_OUTPUT_RETRIES, OutputSpec
from .results import OutputValidationError, RunResult, finish_result
from .tools import error_result, validate_tool_arguments
from .transcript import ToolDeclarations, declare_tool_changes, failure_message
from .types import (
    AgentContext,
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    Context,
    FieldsEqRepr,
    Model,
    StreamOptions,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    clean_message,
    role_of,
    to_serialisable,
)

if TYPE_CHECKING:  # an Approvals broker is made by the application, which imports the module
    from .approvals import Approvals

__all__ = [
    "AgentContext",
    "AgentLoopConfig",
    "Emit",
    "StreamFn",
    "agent_loop",
    "agent_loop_continue",
    "check_can_continue",
    "default_convert_to_llm",
    "get_default_stream_fn",
    "run_agent_loop",
    "run_agent_loop_continue",
    "run_tool_call",
    "set_default_stream_fn",
]

Emit = Callable[[AgentEvent], None]
StreamFn = Callable[[Model, Context, Any], AssistantMessageEventStream]
"""``stream_fn(model, context, options) -> AssistantMessageEventStream``: the seam to a model."""

TRUNCATED_TEXT = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)


def default_convert_to_llm(messages: list[Any]) -> list[Any]:
    """Keep the roles a model understands (system, user, assistant, tool_result); drop the rest."""
    return [m for m in messages if role_of(m) in LLM_ROLES]


@dataclass(eq=False, repr=False)
class AgentLoopConfig(FieldsEqRepr):
    """Every hook and option of a run (SPEC 2.7), each defined here once.

    Hooks run on the loop's thread; a hook that raises fails the run, except the tool hooks,
    whose failures become error tool results. ``tool_abort_grace`` is how long (seconds) an
    aborted run waits for a stream or tools that ignore the signal before giving up on them.
    ``stream_options`` holds the request options (session id, token limit, headers, ...);
    each request gets a copy of it with that request's ``api_key``, ``signal`` and
    ``reasoning``, and nothing else from this config: hooks never reach a provider.
    ``api_key`` falls back to ``stream_options.api_key`` when ``get_api_key`` gives none.

    The run envelope: ``budgets`` (:class:`~agentkit.Budgets`; ``None`` is the default turn
    cap), ``output_type`` (validated, retried ``output_retries`` times), ``deps`` (handed to
    tools through :class:`~agentkit.RunContext`) and ``approvals`` (an
    :class:`~agentkit.Approvals` broker for tools that need a decision).
    """

    model: Model
    convert_to_llm: Callable[[list[Any]], list[Any]] = default_convert_to_llm
    transform_context: Callable[[list[Any], AbortSignal], list[Any]] | None = None
    get_api_key: Callable[[str], str | None] | None = None
    get_steering_messages: Callable[[], list[Any]] | None = None
    get_follow_up_messages: Callable[[], list[Any]] | None = None
    prepare_next_turn: Callable[[TurnContext], TurnUpdate | dict[str, Any] | None] | None = None
    prepare_request: (
        Callable[[RequestContext, AbortSignal], TurnUpdate | dict[str, Any] | None] | None
    ) = None
    finish_turn: Callable[[TurnContext, AbortSignal], Any] | None = None
    before_tool_call: (
        Callable[[BeforeToolCallContext, AbortSignal], BeforeToolCallResult | dict[str, Any] | None]
        | None
    ) = None
    after_tool_call: (
        Callable[[AfterToolCallContext, AbortSignal], AfterToolCallResult | dict[str, Any] | None]
        | None
    ) = None
    tool_execution: Literal["parallel", "sequential"] = "parallel"
    max_tool_workers: int = 32
    tool_abort_grace: float = 2.0
    reasoning: ThinkingLevel | None = None
    stream_options: StreamOptions = field(default_factory=StreamOptions)
    budgets: Budgets | dict[str, Any] | None = None
    output_type: Any = None
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    deps: Any = None
    approvals: Approvals | None = None


# --- the default stream function --------------------------------------------------------------

# Guards _default_stream_fn, the process-wide fallback when no stream_fn is given.
_default_lock = threading.Lock()
_default_stream_fn: StreamFn | None = None


def set_default_stream_fn(fn: StreamFn | None) -> None:
    """Replace the process-wide default stream function; ``None`` restores the providers'."""
    global _default_stream_fn
    with _default_lock:
        _default_stream_fn = fn


def get_default_stream_fn() -> StreamFn:
    """The default stream function: the one set, else ``agentkit.providers.stream_simple``."""
    with _default_lock:
        fn = _default_stream_fn
    if fn is not None:
        return fn
    try:
        # Imported by name: the providers package is optional for type checking and imports.
        stream_simple: StreamFn = importlib.import_module(".providers", __package__).stream_simple
    except (ImportError, AttributeError):
        raise NoStreamFunctionError(
            "No default stream function configured. Pass stream_fn explicitly or call "
            "set_default_stream_fn()."
        ) from None
    return stream_simple


# --- entry points -----------------------------------------------------------------------------


def run_agent_loop(
    prompts: Sequence[Any],
    context: AgentContext,
    config: AgentLoopConfig,
    emit: Emit,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[Any]:
    """Run the loop for new prompt messages; block until it ends; return the new messages.

    The caller's ``context.messages`` is not changed. ``emit`` is called for every event, in
    order, on this thread; if it raises, the run stops and the exception propagates.
    """
    stream_fn = stream_fn or get_default_stream_fn()
    signal = signal or AbortController().signal
    initial = declare_tool_changes(
        context.messages, context.tools, [clean_message(p) for p in prompts]
    )
    new_messages = RunResult(initial)
    current = AgentContext(messages=[*context.messages, *initial], tools=list(context.tools))
    emit(AgentStartEvent())
    emit(TurnStartEvent())
    for message in initial:
        emit(MessageStartEvent(message))
        emit(MessageEndEvent(message))
    _run_loop(current, new_messages, dataclasses.replace(config), emit, signal, stream_fn)
    return new_messages


def check_can_continue(messages: Sequence[Any]) -> None:
    """Raise :class:`CannotContinueError` unless the transcript ends in a continuable message."""
    if not messages:
        raise CannotContinueError("Cannot continue: no messages in context")
    last = role_of(messages[-1])
    if last == "assistant":
        raise CannotContinueError("Cannot continue from message role: assistant")


def run_agent_loop_continue(
    context: AgentContext,
    config: AgentLoopConfig,
    emit: Emit,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> list[Any]:
    """Continue from the transcript as it is (its last message must not be the assistant's).

    Unlike :func:`run_agent_loop`, this appends to the caller's ``context.messages``.
    """
    check_can_continue(context.messages)
    stream_fn = stream_fn or get_default_stream_fn()
    signal = signal or AbortController().signal
    new_messages = RunResult()
    current = AgentContext(messages=context.messages, tools=list(context.tools))
    emit(AgentStartEvent())
    emit(TurnStartEvent())
    _run_loop(current, new_messages, dataclasses.replace(config), emit, signal, stream_fn)
    return new_messages


def agent_loop(
    prompts: Sequence[Any],
    context: AgentContext,
    config: AgentLoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> EventStream[AgentEvent, list[Any]]:
    """Run :func:`run_agent_loop` on a thread; iterate the stream for its events.

    ``.result()`` gives the new messages. If the loop raises, iteration and ``.result()``
    re-raise the exception.
    """
    return _loop_stream(
        lambda emit: run_agent_loop(prompts, context, config, emit, signal, stream_fn)
    )


def agent_loop_continue(
    context: AgentContext,
    config: AgentLoopConfig,
    signal: AbortSignal | None = None,
    stream_fn: StreamFn | None = None,
) -> EventStream[AgentEvent, list[Any]]:
    """:func:`run_agent_loop_continue` as a stream; the continue checks raise at once."""
    check_can_continue(context.messages)
    return _loop_stream(
        lambda emit: run_agent_loop_continue(context, config, emit, signal, stream_fn)
    )


def _loop_stream(run: Callable[[Emit], list[Any]]) -> EventStream[AgentEvent, list[Any]]:
    stream: EventStream[AgentEvent, list[Any]] = EventStream(
        lambda e: isinstance(e, AgentEndEvent),
        lambda e: e.messages,  # type: ignore[union-attr]
    )

    def worker() -> None:
        try:
            stream.end(run(stream.push))
        except BaseException as exc:  # handed to the consumer, never lost on this thread
            stream.fail(exc)

    threading.Thread(target=worker, name="agentkit-loop", daemon=True).start()
    return stream


# --- the loop ---------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class _LoopState(FieldsEqRepr):
    context: AgentContext
    config: AgentLoopConfig
    new_messages: RunResult
    emit: Emit
    signal: AbortSignal
    stream_fn: StreamFn
    tracker: BudgetTracker
    output: OutputSpec | None = None
    controls: ToolControls = field(default_factory=ToolControls)
    output_failures: int = 0
    tool_threads: _ToolThreads = field(default_factory=lambda: _ToolThreads())
    declarations: ToolDeclarations = field(default_factory=ToolDeclarations)


_ToolCallJob = tuple[Callable[[int], Callable[[], None]], int, contextvars.Context]
"""A call for a tool thread: what to run (returning its report), the call's index, its scope."""


class _ToolThreads:
    """The run's tool threads: started as batches need them (up to ``max_workers``), reused by
    later batches, told to stop when the run ends.

    A call goes to an idle thread through one queue, with no future or pool bookkeeping around
    it: the call reports its own progress and end (see :func:`_run_prepared`), and the hand-off
    is on every tool turn's path. The threads are daemons, so a tool given up on after an abort
    never holds the interpreter's exit.
    """

    def __init__(self, max_workers: int = 1) -> None:
        self.max_workers = max(1, max_workers)
        self.clean = True  # False once a tool was given up on or a batch failed midway
        self._calls: queue.SimpleQueue[_ToolCallJob | None]
        self._calls = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # guards _idle: threads become idle on their own
        self._idle = 0

    def submit(
        self, fn: Callable[[int], Callable[[], None]], index: int, scope: contextvars.Context
    ) -> None:
        """Run ``fn(index)`` on a tool thread inside ``scope``, the call's own contextvars.

        ``fn`` must not raise (a call reports its failure itself) and returns the call's
        report, which the thread makes last, once it counts itself idle again: the loop thread
        that the report wakes then never waits for this one to let go of the interpreter, and
        can hand it the next call at once."""
        with self._lock:
            start = not self._idle and len(self._threads) < self.max_workers
            if not start and self._idle:
                self._idle -= 1
        if start:
            thread = threading.Thread(
                target=self._serve, name=f"agentkit-tool-{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._calls.put((fn, index, scope))

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            fn, index, scope = call
            report = None
            try:
                report = scope.run(fn, index)
            except BaseException:  # noqa: BLE001, S110 - a call reports its own failure; the
                pass  # thread keeps serving whatever happened (a pool would drop it in a future)
            with self._lock:
                self._idle += 1
            if report is not None:
                report()

    def shutdown(self) -> None:
        """Stop the threads: wait for them when every tool finished; else leave them to end
        after their call."""
        threads, self._threads = self._threads, []
        for _ in threads:
            self._calls.put(None)
        if self.clean:
            for thread in threads:
                thread.join()


def _apply_update(state: _LoopState, update: TurnUpdate | None) -> None:
    if update is None:
        return
    if update.context is not None:
        state.context = update.context
    if update.model is not None:
        state.config.model = update.model
    if update.thinking_level is not None:
        state.config.reasoning = None if update.thinking_level == "off" else update.thinking_level


def _finish_decision(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("action")
    return value if value in ("end", "continue") else None


def _run_loop(
    context: AgentContext,
    new_messages: RunResult,
    config: AgentLoopConfig,
    emit: Emit,
    signal: AbortSignal,
    stream_fn: StreamFn,
) -> None:
    """Run the loop inside the run's envelope: the budget tracker owns the run's signal (its
    deadline aborts it) and is closed however the loop ends."""
    tracker = BudgetTracker(Budgets.of(config.budgets), signal, new_messages.usage)
    output = OutputSpec.of(config.output_type)
    if output is not None and config.output_retries != output.retries:
        output = OutputSpec(output.type, name=output.name, retries=config.output_retries)
    state = _LoopState(
        context,
        config,
        new_messages,
        emit,
        tracker.signal,
        stream_fn,
        tracker,
        output,
        ToolControls(config.deps),
        tool_threads=_ToolThreads(config.max_tool_workers),
    )
    try:
        _turns(state)
    finally:
        state.tool_threads.shutdown()
        tracker.close()


def _end_run(state: _LoopState) -> None:
    """Settle the run's result (stop reason, budget) and emit ``agent_end``."""
    result, limit = state.new_messages, state.tracker.limit
    finish_result(result)
    if limit is not None and result.stop_reason in ("stop", "aborted"):
        result.stop_reason, result.budget = "budget", limit
        result.error_message = None
    elif state.signal.aborted and result.stop_reason == "stop":  # aborted during tools
        result.stop_reason, result.error_message = "aborted", ABORTED_TEXT
    state.emit(AgentEndEvent(state.new_messages))


def _end_on_budget(state: _LoopState, pending: list[Any]) -> bool:
    """At the start of a turn: if a budget is reached, end the run (keeping ``pending``
    messages in the transcript) or, once, turn it into a summary turn without tools.
    Return whether the run ended."""
    tracker = state.tracker
    limit = tracker.reached()
    if limit is None:
        return False
    tracker.limit = limit
    summary = None if tracker.summarizing else tracker.start_summary()
    if summary is not None:
        pending.append(summary)
        options = state.config.stream_options
        state.config.stream_options = options.model_copy(update={"tool_choice": "none"})
        return False
    for message in pending:  # drained from a queue: they stay in the transcript
        state.emit(MessageStartEvent(message))
        state.emit(MessageEndEvent(message))
        state.context.messages.append(message)
        state.new_messages.append(message)
    _end_run(state)
    return True


def _check_output(state: _LoopState, message: AssistantMessage) -> list[Any] | None:
    """Validate a final answer against ``output_type``: ``[]`` when valid (stored in the
    result), the retry message when not, ``None`` when the retries are spent (the run fails)."""
    spec, result = state.output, state.new_messages
    if spec is None or state.tracker.summarizing:
        return []
    try:
        result.output = spec.validate_text(message.text)
        return []
    except ValueError as exc:
        errors = str(exc)
    if state.output_failures < spec.retries:
        state.output_failures += 1
        return [spec.retry_message(errors)]
    failure = OutputValidationError(
        f"The model's output did not match {spec.name} after {spec.retries} "
        f"retr{'y' if spec.retries == 1 else 'ies'}:\n{errors}",
        errors,
    )
    result.stop_reason, result.error, result.error_message = "error", failure, str(failure)
    return None


def _turns(state: _LoopState) -> None:
    """The turns of a run (SPEC 4.2), until the run ends."""
    config, emit, signal, new_messages = state.config, state.emit, state.signal, state.new_messages
    last_turn: TurnContext | None = None
    explicit_continuation = False
    pending: list[Any] = _poll(config.get_steering_messages)

    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            prepared: list[Any] = []
            if last_turn is not None:
                if _end_on_budget(state, pending):
                    return
                if config.prepare_next_turn is not None:
                    update = coerce_hook_result(config.prepare_next_turn(last_turn), TurnUpdate)
                    _apply_update(state, update)
                    if update is not None and update.messages:
                        prepared = list(update.messages)
                if not pending:
                    pending = _poll(config.get_steering_messages)
                emit(TurnStartEvent())
            incoming = state.declarations(
                state.context.messages,
                state.context.tools,
                [clean_message(m) for m in prepared + pending],
            )
            for message in incoming:
                emit(MessageStartEvent(message))
                emit(MessageEndEvent(message))
                state.context.messages.append(message)
                new_messages.append(message)
            pending = []

            if config.prepare_request is not None:
                request = RequestContext(
                    context=state.context,
                    model=state.config.model,
                    thinking_level=state.config.reasoning or "off",
                )
                update = coerce_hook_result(config.prepare_request(request, signal), TurnUpdate)
                _apply_update(state, update)

            message = _stream_assistant_response(state)
            new_messages.append(message)
            new_messages.usage.requests += 1
            new_messages.usage.add(message.usage)

            if message.stop_reason in ("error", "aborted"):
                last_turn = TurnContext(message, [], state.context, new_messages)
                if config.finish_turn is not None:
                    config.finish_turn(last_turn, signal)  # the decision is ignored
                emit(TurnEndEvent(message, []))
                _end_run(state)
                return

            calls = [c for c in message.content if isinstance(c, ToolCall)]
            tool_results: list[ToolResultMessage] = []
            has_more_tool_calls = False
            if calls:
                if message.stop_reason == "length":
                    tool_results, terminate = _fail_truncated(calls, emit), False
                else:
                    tool_results, terminate = _execute_tool_calls(state, message, calls)
                has_more_tool_calls = not terminate
                state.context.messages.extend(tool_results)
                new_messages.extend(tool_results)

            last_turn = TurnContext(message, tool_results, state.context, new_messages)
            decision = None
            if config.finish_turn is not None:
                decision = _finish_decision(config.finish_turn(last_turn, signal))
            emit(TurnEndEvent(message, tool_results))
            if decision == "end" or (calls and signal.aborted):
                # Departure 1: a run aborted during tools ends after that batch.
                _end_run(state)
                return
            explicit_continuation = decision == "continue"
            pending = _poll(config.get_steering_messages)
            if has_more_tool_calls or pending:
                explicit_continuation = False
            elif not calls and message.stop_reason == "stop":
                retry = _check_output(state, message)
                if retry is None:
                    _end_run(state)
                    return
                pending = retry

        follow_ups = _poll(config.get_follow_up_messages)
        if follow_ups:
            explicit_continuation = False
            pending = follow_ups
            continue
        if explicit_continuation:
            explicit_continuation = False
            continue
        break
    _end_run(state)


def _poll(getter: Callable[[], list[Any]] | None) -> list[Any]:
    if getter is None:
        return []
    return list(getter() or [])


# --- one model request ------------------------------------------------------------------------


def _request_options(state: _LoopState, api_key: str | None) -> StreamOptions:
    """This request's options: the config's ``stream_options`` plus key, signal and reasoning."""
    options = state.config.stream_options
    update: dict[str, Any] = {
        "api_key": api_key or options.api_key,
        "signal": state.signal,
        "reasoning": state.config.reasoning,
    }
    if state.output is not None and not state.tracker.summarizing:
        update.update(state.output.request_options(options, state.config.model))
    return options.model_copy(update=update)


def _wait_or_give_up(
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
                if deadline is None:
                    deadline = time.monotonic() + grace
                continue
            yield item
    finally:
        remove_wake()


def _stream_assistant_response(state: _LoopState) -> AssistantMessage:
    """Make one request and fold its stream into the transcript, emitting message events.

    If the stream function ignores an abort, the loop gives it ``tool_abort_grace`` seconds to
    end, then ends the message as aborted itself.
    """
    config, signal = state.config, state.signal
    messages = state.context.messages
    if config.transform_context is not None:
        messages = config.transform_context(messages, signal)
    llm_messages = config.convert_to_llm(messages)
    api_key = None
    if config.get_api_key is not None:
        api_key = config.get_api_key(config.model.provider)
    request_context = Context(messages=list(llm_messages))
    options = _request_options(state, api_key)
    if state.tracker.ends is None:
        # This thread reads the stream at once and to its end, so the request may be read on
        # it (an abort shuts the request's socket). A run deadline needs the waits below to
        # wake on time, so with one the request keeps a thread of its own.
        with consuming_here():
            response = state.stream_fn(config.model, request_context, options)
    else:
        response = state.stream_fn(config.model, request_context, options)

    context_messages = state.context.messages
    partial: AssistantMessage | None = None
    final: AssistantMessage | None = None
    events = _wait_or_give_up(
        response.get, signal, response.wake, config.tool_abort_grace, state.tracker
    )
    try:
        for event in events:
            if event is None:
                final = response.result()  # raises: the stream ended without done or error
                break
            if isinstance(event, StartEvent):
                partial = event.partial
                context_messages.append(partial)
                state.emit(MessageStartEvent(_snapshot(partial)))
            elif isinstance(event, (DoneEvent, ErrorEvent)):
                final = response.result()
                if isinstance(event, ErrorEvent) and event.provider_error is not None:
                    state.new_messages.error = event.provider_error  # raise_for_error raises it
                break
            elif partial is not None:
                partial = event.partial
                context_messages[-1] = partial
                state.emit(MessageUpdateEvent(_snapshot(partial), event))
    finally:
        events.close()
        close = getattr(response, "close", None)
        if close is not None:
            close()  # a request read on this thread and left early gives back its connection
    if final is None:  # the stream ignored the abort for the whole grace period
        final = _aborted_message(partial, config.model)

    final.thinking_level = config.reasoning or "off"
    if partial is not None:
        context_messages[-1] = final
    else:
        context_messages.append(final)
        state.emit(MessageStartEvent(_snapshot(final)))
    state.emit(MessageEndEvent(final))
    return final


def _snapshot(message: AssistantMessage) -> AssistantMessage:
    """A shallow copy of a streaming message with its own content list (SPEC 3.2), so that a
    listener never sees the provider's later appends to the message it was given.

    ``copy.copy`` is pydantic's own shallow copy; it is built here rather than through
    ``model_copy(update=...)``, which costs a third more, once per streamed delta."""
    snapshot = copy.copy(message)
    snapshot.__dict__["content"] = list(message.content)
    return snapshot


def _aborted_message(partial: AssistantMessage | None, model: Model) -> AssistantMessage:
    """The message for a stream that did not end after an abort."""
    if partial is not None:
        partial = partial.model_copy()
        partial.content = list(partial.content)
    return failure_message("aborted", ABORTED_TEXT, model, partial=partial)


# --- tools ------------------------------------------------------------------------------------
#
# One path runs every tool call: preflight on the loop's thread, execution on a short-lived
# pool, completion (``after_tool_call`` and the end event) back on the loop's thread. A batch in
# parallel mode is one group; sequential mode is a group of one per call; ``run_tool_call`` is a
# group of one without events.


@dataclass(eq=False, repr=False)
class _Prepared(FieldsEqRepr):
    tool_call: ToolCall
    tool: AgentTool
    args: Any
    scope: contextvars.Context  # the contextvars it executes in, as its preflight left them


def _start_call(emit: Emit, call: ToolCall) -> contextvars.Context:
    """Give ``call`` its own copy of this thread's contextvars, emit its start event inside it
    and return it, for the call's preflight (and so its execution) to run in.

    So what a listener sets while handling the start event (the tracer makes the call's
    ``execute_tool`` span current) reaches this call only: never the loop's thread, later
    turns or the batch's other calls, whose start events all come before any of them executes.
    """
    scope = contextvars.copy_context()
    scope.run(emit, ToolExecutionStartEvent(call.id, call.name, call.arguments))
    return scope


def _find_tool(tools: Sequence[AgentTool], name: str) -> AgentTool | None:
    for candidate in tools:
        if candidate.name == name:
            return candidate
    return None


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    if not isinstance(exc, Exception):  # SystemExit(2) says "2": name what stopped the tool
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if text else type(exc).__name__


def _prepare_tool_call(
    tool_call: ToolCall,
    tools: Sequence[AgentTool],
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    before_tool_call: Any,
    approvals: Approvals | None = None,
    budget: BudgetTracker | None = None,
) -> _Prepared | ToolCallOutcome:
    """Preflight one call: lookup, argument preparation and validation, ``before_tool_call``,
    then the approval wait of a call that needs one. Runs inside the call's own contextvars
    (``_start_call``); the prepared call executes in a copy of them."""

    def immediate(text: str, terminate: bool = False) -> ToolCallOutcome:
        return ToolCallOutcome(tool_call, error_result(text, terminate=terminate), True, None)

    if signal.aborted:
        return immediate(ABORTED_TEXT)
    tool = _find_tool(tools, tool_call.name)
    if tool is None:
        return immediate(f"Tool {tool_call.name} not found")
    try:
        call = tool_call
        if tool.prepare_arguments is not None:
            prepared_args = tool.prepare_arguments(tool_call.arguments)
            if prepared_args is not tool_call.arguments:
                call = tool_call.model_copy(update={"arguments": prepared_args})
        args = validate_tool_arguments(tool, call)
        if before_tool_call is not None:
            ctx = BeforeToolCallContext(assistant_message, tool_call, args, context)
            decision = coerce_hook_result(before_tool_call(ctx, signal), BeforeToolCallResult)
            args = ctx.args
            if signal.aborted:
                return immediate(ABORTED_TEXT)
            if decision is not None and decision.block:
                return immediate(
                    decision.reason or "Tool execution was blocked", decision.terminate
                )
        if approvals is not None and approvals.needs_approval(tool_call, tool.requires_approval):
            asked = tool_call
            if isinstance(args, dict) and args is not tool_call.arguments:
                asked = tool_call.model_copy(update={"arguments": args})  # what would run
            ends = None if budget is None else budget.ends
            verdict = approvals.request(asked, signal, ends)
            if budget is not None and budget.expire():
                return immediate(ABORTED_TEXT)
            if not verdict.approved:
                return immediate(
                    f"Tool call {tool_call.name} was rejected"
                    + (f": {verdict.reason}" if verdict.reason else "")
                )
        elif approvals is None and tool.requires_approval:
            return immediate(
                f"Tool {tool.name} needs approval, but the agent has no approvals broker"
            )
    except Exception as exc:
        return immediate(_error_text(exc))
    if signal.aborted:
        return immediate(ABORTED_TEXT)
    return _Prepared(tool_call, tool, args, contextvars.copy_context())


def _execute(
    prepared: _Prepared,
    signal: AbortSignal,
    on_update: Callable[[Any], None],
    controls: ToolControls | None = None,
) -> tuple[AgentToolResult, bool, float]:
    """Run a prepared call; whatever it raises, or a non-result, becomes an error result.

    ``BaseException`` is caught too: a ``SystemExit`` from argparse, a ``GeneratorExit`` or an
    async tool's ``CancelledError`` ends this call, never the pool thread's report. A
    ``ToolRetry`` becomes the retry result of the run's ``controls``; the call's
    :class:`~agentkit.RunContext` is current on this thread while it runs.
    """
    started = time.monotonic()
    controls = controls or ToolControls()
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
        result, is_error = error_result(_error_text(exc)), True
    finally:
        controls.leave(token)
    return result, is_error, (time.monotonic() - started) * 1000


def _finalize(
    prepared: _Prepared,
    result: AgentToolResult,
    is_error: bool,
    duration_ms: float | None,
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    after_tool_call: Any,
) -> ToolCallOutcome:
    """Apply ``after_tool_call``'s field-level replacements (or its failure) to a result.

    The final ``details`` and ``structured_content`` are stored as plain JSON data, so every
    event and message holding them serialises (a tool may return any object).
    """
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


class _Update:
    __slots__ = ("index", "partial")

    def __init__(self, index: int, partial: Any) -> None:
        self.index, self.partial = index, partial


class _Finished:
    __slots__ = ("index", "result", "is_error", "duration_ms")

    def __init__(
        self, index: int, result: AgentToolResult, is_error: bool, duration: float | None
    ) -> None:
        self.index, self.result, self.is_error, self.duration_ms = index, result, is_error, duration


class _CallTimers:
    """The ``timeout`` timers of one batch's calls (a tool without one costs nothing).

    A timer that fires aborts its call's own signal and puts the call's timed-out result on the
    batch's inbox; :meth:`close` cancels the rest, so no timer thread outlives the batch.
    """

    def __init__(self, inbox: queue.SimpleQueue[Any]) -> None:
        self._inbox = inbox
        # Guards _timers and _running: calls start and finish on pool threads.
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
            controller.abort(TimeoutError(text))
            self._inbox.put(_Finished(index, error_result(text), True, timeout * 1000))

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


def _run_prepared(
    batch: list[_Prepared],
    *,
    assistant_message: AssistantMessage,
    context: AgentContext,
    signal: AbortSignal,
    after_tool_call: Any,
    threads: _ToolThreads,
    grace: float,
    on_update: Callable[[_Prepared, Any], None],
    on_end: Callable[[ToolCallOutcome], None],
    controls: ToolControls | None = None,
    budget: BudgetTracker | None = None,
) -> list[ToolCallOutcome]:
    """Execute prepared calls at once on a pool while this thread reports their progress.

    Tool threads only put updates and completions on ``inbox``; this thread takes them off in
    order, drops the updates of calls that already finished (late updates, SPEC 2.4), runs
    ``after_tool_call`` and calls ``on_end`` as each call completes. After an abort, tools that
    ignore the signal get ``grace`` seconds, then an "Operation aborted" result while their
    threads are left to finish on their own. A tool with a ``timeout`` gets a signal of its
    own, which its timer aborts while reporting the call as timed out (a later real finish of
    that call is dropped, like a late update).
    """
    inbox: queue.SimpleQueue[_Update | _Finished | object] = queue.SimpleQueue()
    timers = _CallTimers(inbox)
    unfinished = [len(batch)]  # calls whose thread has not reported yet (guarded by the lock)
    lock, all_reported = threading.Lock(), threading.Event()

    def work(index: int) -> Callable[[], None]:
        result: AgentToolResult | None = None
        is_error, duration = True, None
        try:
            if not signal.aborted:  # a call that never executed has no duration
                call_signal = timers.start(index, batch[index].tool, signal)
                result, is_error, duration = _execute(
                    batch[index],
                    call_signal,
                    lambda partial: inbox.put(_Update(index, partial)),
                    controls,
                )
        except BaseException:  # noqa: BLE001, S110 - reported below as not executed
            pass
        # Every call reports that it finished, whatever happened on its thread. The report is
        # returned, and the thread makes it last (see _ToolThreads._serve): the loop thread it
        # wakes then finds nothing left to do on this one.
        timers.finished(index)
        if result is None:  # never executed, or its thread failed: made only then
            result, is_error, duration = error_result(ABORTED_TEXT), True, None
        with lock:
            unfinished[0] -= 1
            if not unfinished[0]:
                all_reported.set()
        item = _Finished(index, result, is_error, duration)
        return lambda: inbox.put(item)

    def submit_all() -> None:
        for index in range(len(batch)):
            threads.submit(work, index, batch[index].scope)

    outcomes: list[ToolCallOutcome | None] = [None] * len(batch)
    finished_all = False
    try:
        remaining = len(batch)
        items = _wait_or_give_up(
            lambda t: inbox.get(timeout=t),
            signal,
            lambda: inbox.put(WAKE),
            grace,
            budget,
            start=submit_all,
        )
        try:
            for item in items:
                if isinstance(item, _Update):
                    if outcomes[item.index] is None:
                        on_update(batch[item.index], item.partial)
                elif isinstance(item, _Finished):
                    if outcomes[item.index] is not None:
                        continue  # the real end of a call that already timed out
                    outcome = _finalize(
                        batch[item.index],
                        item.result,
                        item.is_error,
                        item.duration_ms,
                        assistant_message,
                        context,
                        signal,
                        after_tool_call,
                    )
                    outcomes[item.index] = outcome
                    on_end(outcome)
                    remaining -= 1
                    if not remaining:
                        break
        finally:
            items.close()
        for index, prepared in enumerate(batch):
            if outcomes[index] is None:  # given up after the grace period
                text = f"{ABORTED_TEXT}: tool {prepared.tool.name} did not stop within {grace:g} s"
                outcome = ToolCallOutcome(prepared.tool_call, error_result(text), True, None)
                outcomes[index] = outcome
                on_end(outcome)
        finished_all = not remaining
    finally:
        timers.close()
        if finished_all and timers.still_running():
            threads.clean = False  # a call that timed out is still running: never wait for it
        elif not finished_all:
            if not signal.aborted:
                # The run is failing mid-batch (an ``on_end`` listener raised): give the running
                # tools the grace period to finish, but never hang the failure on them.
                all_reported.wait(grace)
            threads.clean = False  # the pool's owner must not wait for a tool given up on
    return [o for o in outcomes if o is not None]


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
    signal = signal or AbortController().signal
    prepared = contextvars.copy_context().run(  # the call's own contextvars, as in a run
        _prepare_tool_call,
        tool_call,
        tools,
        assistant_message,
        context,
        signal,
        before_tool_call,
        approvals,
    )
    if isinstance(prepared, ToolCallOutcome):
        return prepared
    threads = _ToolThreads()
    try:
        return _run_prepared(
            [prepared],
            assistant_message=assistant_message,
            context=context,
            signal=signal,
            after_tool_call=after_tool_call,
            threads=threads,
            grace=AgentLoopConfig.tool_abort_grace,
            on_update=lambda _call, partial: on_update(partial) if on_update is not None else None,
            on_end=lambda _outcome: None,
            controls=ToolControls(deps),
        )[0]
    finally:
        threads.shutdown()


def _result_message(outcome: ToolCallOutcome) -> ToolResultMessage:
    result = outcome.result
    return ToolResultMessage(
        tool_call_id=outcome.tool_call.id,
        tool_name=outcome.tool_call.name,
        content=list(result.content or []),
        details=result.details,
        usage=result.usage,
        is_error=outcome.is_error,
        duration_ms=outcome.duration_ms,
    )


def _emit_end(emit: Emit, outcome: ToolCallOutcome) -> None:
    emit(
        ToolExecutionEndEvent(
            outcome.tool_call.id,
            outcome.tool_call.name,
            outcome.result,
            outcome.is_error,
            outcome.duration_ms,
        )
    )


def _emit_result_message(emit: Emit, outcome: ToolCallOutcome) -> ToolResultMessage:
    message = _result_message(outcome)
    emit(MessageStartEvent(message))
    emit(MessageEndEvent(message))
    return message


def _fail_truncated(calls: list[ToolCall], emit: Emit) -> list[ToolResultMessage]:
    """Length protection: calls from a truncated response never run (SPEC 4.4)."""
    return [_fail_call(call, TRUNCATED_TEXT.format(name=call.name), emit) for call in calls]


def _fail_call(call: ToolCall, text: str, emit: Emit) -> ToolResultMessage:
    """A call that never runs: its start and end events and its error result message."""
    _start_call(emit, call)
    outcome = ToolCallOutcome(call, error_result(text), True)
    _emit_end(emit, outcome)
    return _emit_result_message(emit, outcome)


def _execute_tool_calls(
    state: _LoopState, message: AssistantMessage, calls: list[ToolCall]
) -> tuple[list[ToolResultMessage], bool]:
    """Run one batch (SPEC 4.5): one group in parallel mode, a group per call in sequential
    mode; return its result messages and whether every result asked to terminate. Calls past
    the ``max_tool_calls`` budget are refused with an error result (and end the run)."""
    allowed = state.tracker.allowed_tool_calls(len(calls))
    calls, refused = calls[:allowed], calls[allowed:]
    state.new_messages.usage.tool_calls += len(calls)
    tools = state.context.tools
    sequential = state.config.tool_execution == "sequential" or any(
        (t := _find_tool(tools, c.name)) is not None and t.execution_mode == "sequential"
        for c in calls
    )
    groups = [[call] for call in calls] if sequential else [calls]
    outcomes: list[ToolCallOutcome] = []
    messages: list[ToolResultMessage] = []
    for group in groups:
        for outcome in _run_group(state, message, group):
            outcomes.append(outcome)
            messages.append(_emit_result_message(state.emit, outcome))
            state.new_messages.usage.add(outcome.result.usage)
    limit = state.tracker.limit or "max_tool_calls"
    for call in refused:
        text = REFUSED_TEXT.format(name=call.name, limit=limit)
        messages.append(_fail_call(call, text, state.emit))
    terminate = bool(outcomes) and all(o.result.terminate for o in outcomes)
    return messages, terminate


def _run_group(
    state: _LoopState, message: AssistantMessage, calls: list[ToolCall]
) -> list[ToolCallOutcome]:
    """Start and preflight each call, execute the prepared ones together; outcomes in order."""
    emit, config = state.emit, state.config
    slots: list[ToolCallOutcome | _Prepared] = []
    for call in calls:
        prepared = _start_call(emit, call).run(
            _prepare_tool_call,
            call,
            state.context.tools,
            message,
            state.context,
            state.signal,
            config.before_tool_call,
            config.approvals,
            state.tracker,
        )
        if isinstance(prepared, ToolCallOutcome):
            _emit_end(emit, prepared)
        slots.append(prepared)
    batch = [slot for slot in slots if isinstance(slot, _Prepared)]
    if not batch:
        return [slot for slot in slots if isinstance(slot, ToolCallOutcome)]

    def on_update(prepared: _Prepared, partial: Any) -> None:
        call = prepared.tool_call
        emit(ToolExecutionUpdateEvent(call.id, call.name, call.arguments, partial))

    finished = iter(
        _run_prepared(
            batch,
            assistant_message=message,
            context=state.context,
            signal=state.signal,
            after_tool_call=config.after_tool_call,
            threads=state.tool_threads,
            grace=config.tool_abort_grace,
            on_update=on_update,
            on_end=lambda outcome: _emit_end(emit, outcome),
            controls=state.controls,
            budget=state.tracker,
        )
    )
    return [next(finished) if isinstance(slot, _Prepared) else slot for slot in slots]
