"""The agent loop: the entry points, the turns of a run and one model request, top to bottom in
the order they run.

A run alternates model requests and tool batches until the model stops asking for tools and no
steering or follow-up message is waiting (SPEC section 4). A run's state lives in one
``_LoopState``, made when it starts and dropped when it ends; the loop keeps nothing between
runs (the process-wide default stream function lives in :mod:`agentkit.config`). The loop runs on the calling thread, and so does
every ``emit``, in order; a tool batch (:mod:`agentkit.tool_calls`) fans out to the run's tool
executor while this thread pumps the calls' progress. The run's envelope (budgets, typed output,
usage) is called at named points: before a turn, after a request, at the final answer.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._serialize import clean_message
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .budgets import Budgets, BudgetTracker, adopt_into_parent
from .compaction import Compactor, ModelAccess
from .config import (
    AgentLoopConfig,
    StreamFn,
    default_convert_to_llm,
    get_default_stream_fn,
    set_default_stream_fn,
)
from .errors import CannotContinueError
from .event_stream import EventStream, consuming_here
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
    TurnEndEvent,
    TurnStartEvent,
)
from .failover import failover_stream_fn
from .hooks import (
    RequestContext,
    TurnContext,
    TurnUpdate,
    coerce_hook_result,
)
from .interrupts import INTERRUPTED_TEXT, Interrupt
from .output import OutputSpec
from .results import OutputValidationError, RunResult, finish_result
from .tool_calls import ToolRunner, run_tool_call, wait_or_give_up
from .transcript import (
    ToolDeclarations,
    compacted_view,
    declare_tool_changes,
    failure_message,
)
from .types import (
    AgentContext,
    AssistantMessage,
    Context,
    FieldsEqRepr,
    Model,
    StreamOptions,
    ToolCall,
    ToolResultMessage,
    role_of,
)

if TYPE_CHECKING:

    # an Approvals broker is made by the application, which imports the module
    pass

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


# --- the turns --------------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class _LoopState(FieldsEqRepr):
    """One run's state, made by :func:`_run_loop` and dropped when the run ends."""

    context: AgentContext
    config: AgentLoopConfig
    new_messages: RunResult
    emit: Emit
    signal: AbortSignal
    stream_fn: StreamFn
    tracker: BudgetTracker
    tools: ToolRunner
    output: OutputSpec | None = None
    output_failures: int = 0
    declarations: ToolDeclarations = field(default_factory=ToolDeclarations)
    interrupted: bool = False
    """The last response was cut off by an interrupt (the run goes on)."""


def _run_loop(
    context: AgentContext,
    new_messages: RunResult,
    config: AgentLoopConfig,
    emit: Emit,
    signal: AbortSignal,
    stream_fn: StreamFn,
) -> None:
    """Run the turns inside the run's envelope: the budget tracker owns the run's signal (its
    deadline aborts it) and, like the run's tool threads, is closed however the run ends."""
    tracker = BudgetTracker(config.budgets or Budgets(), signal, new_messages.usage)
    output = config.output_type
    if config.fallback_models:
        stream_fn = failover_stream_fn(stream_fn, config.fallback_models, config.failover_cooldown)
    tools = ToolRunner(
        emit,
        tracker.signal,
        before_tool_call=config.before_tool_call,
        after_tool_call=config.after_tool_call,
        approvals=config.approvals,
        deps=config.deps,
        grace=config.tool_abort_grace,
        sequential=config.tool_execution == "sequential",
        inline=config.tool_execution == "inline",
        executor=config.tool_executor,
        max_workers=config.max_tool_workers,
        budget=tracker,
        usage=new_messages.usage,
    )
    state = _LoopState(
        context, config, new_messages, emit, tracker.signal, stream_fn, tracker, tools, output
    )
    parent = adopt_into_parent(tracker)  # a sub-agent's run: its parent counts it if given up
    scope = tracker.enter()  # sub-agents started by this run's tools draw from its budgets
    try:
        _turns(state)
        _end_run(state)
    finally:
        tools.close()
        tracker.close()
        tracker.leave(scope)
        if parent is not None:
            parent.release(tracker)


def _turns(state: _LoopState) -> None:
    """The turns of a run (SPEC 4.2), until the run is to end; the envelope is called before a
    turn, after each request and at the final answer."""
    config = state.config
    last_turn: TurnContext | None = None
    explicit_continuation = False
    if _resume_approvals(state):
        return
    pending = _poll(config.get_steering_messages)
    # where this turn's own messages begin (a compaction keeps them)
    turn_start = len(state.context.messages) - len(state.new_messages)
    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            if last_turn is not None:
                starting = _next_turn(state, last_turn, pending)
                if starting is None:
                    return
                pending = starting
                turn_start = len(state.context.messages)
            _add_incoming(state, pending)
            _before_request(state)
            message = _request(state, turn_start)
            stopped = message.stop_reason in ("error", "aborted")
            failed = stopped and not state.interrupted  # an interrupted run goes on
            calls = [] if stopped else _tool_calls_of(message)
            tool_results, has_more_tool_calls = _run_tools(state, message, calls)
            last_turn = TurnContext(message, tool_results, state.context, state.new_messages)
            decision = _finish_turn(state, last_turn)
            if failed or decision == "end" or (calls and state.signal.aborted):
                return  # a run aborted during tools ends after that batch
            if state.tools.waiting:  # calls deferred to a decision recorded later
                _wait_for_approval(state, state.tools.waiting)
                return
            explicit_continuation = decision == "continue"
            pending = _poll(config.get_steering_messages)
            if has_more_tool_calls or pending:
                explicit_continuation = False
            elif not calls and message.stop_reason == "stop":
                retry = _at_final_answer(state, message)
                if retry is None:
                    return
                pending = retry
        pending = _poll(config.get_follow_up_messages)
        if not pending and not explicit_continuation:
            return
        explicit_continuation = False


def _next_turn(state: _LoopState, last_turn: TurnContext, pending: list[Any]) -> list[Any] | None:
    """Between two turns: the envelope, ``prepare_next_turn`` and the steering queue, then
    ``turn_start``. Return the messages the turn starts with, ``None`` when the run ends."""
    if _before_turn(state, pending):
        return None
    config = state.config
    prepared: list[Any] = []
    if config.prepare_next_turn is not None:
        update = coerce_hook_result(config.prepare_next_turn(last_turn), TurnUpdate)
        _apply_update(state, update)
        if update is not None and update.messages:
            prepared = list(update.messages)
    if not pending:
        pending = _poll(config.get_steering_messages)
    state.emit(TurnStartEvent())
    return prepared + pending


def _before_turn(state: _LoopState, pending: list[Any]) -> bool:
    """The envelope before a turn: if a budget is reached, end the run (keeping ``pending``
    messages in the transcript) or, once, turn it into a summary turn without tools.
    Return whether the run ends."""
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
    _append_messages(state, pending)  # drained from a queue: they stay in the transcript
    return True


def _add_incoming(state: _LoopState, messages: list[Any]) -> None:
    """Start the turn's messages (a tool-set change declared before them) in the transcript."""
    context = state.context
    _append_messages(
        state,
        state.declarations(context.messages, context.tools, [clean_message(m) for m in messages]),
    )


def _append_messages(state: _LoopState, messages: list[Any]) -> None:
    for message in messages:
        state.emit(MessageStartEvent(message))
        state.emit(MessageEndEvent(message))
        state.context.messages.append(message)
        state.new_messages.append(message)


def _before_request(state: _LoopState) -> None:
    """``prepare_request``: the last change to the context, model or thinking level."""
    hook = state.config.prepare_request
    if hook is not None:
        request = RequestContext(
            context=state.context,
            model=state.config.model,
            thinking_level=state.config.reasoning or "off",
        )
        _apply_update(state, coerce_hook_result(hook(request, state.signal), TurnUpdate))


def _apply_update(state: _LoopState, update: TurnUpdate | None) -> None:
    if update is None:
        return
    if update.context is not None:
        state.context = update.context
    if update.model is not None:
        state.config.model = update.model
    if update.thinking_level is not None:
        state.config.reasoning = None if update.thinking_level == "off" else update.thinking_level


def _request(state: _LoopState, turn_start: int) -> AssistantMessage:
    """One model request, counted in the result. With ``compaction`` set, the transcript is
    compacted first when the request nears the context window, and when the provider refuses
    it as too long it is compacted and the request sent once more (:mod:`agentkit.compaction`);
    the messages from ``turn_start`` on are this turn's own and always kept."""
    settings = state.config.compaction
    if settings is None:
        message = _stream_assistant_response(state)
        _after_request(state, message)
        return message
    config = state.config
    access = ModelAccess(
        config.model, state.stream_fn, config.stream_options, state.signal,
        state.new_messages.usage, config.get_api_key, config.tool_abort_grace, state.tracker,
    )  # fmt: skip
    compactor = Compactor(
        settings, access, state.emit, lambda record: _append_messages(state, [record])
    )
    compactor.before_request(state.context.messages, turn_start)
    message = _stream_assistant_response(state)
    _after_request(state, message)
    if not compactor.overflowed(message, state.new_messages.error):
        return message
    failed = compactor.after_overflow(state.context.messages, turn_start)
    if failed is None:
        state.new_messages.error = None  # the refused request stays on record; try once more
        message = _stream_assistant_response(state)
        _after_request(state, message)
        if not compactor.overflowed(message, state.new_messages.error):
            return message
    compactor.give_up(state.new_messages, message, failed)
    return message


def _after_request(state: _LoopState, message: AssistantMessage) -> None:
    """The envelope after a request: the response joins the result, counted in its usage."""
    result = state.new_messages
    result.append(message)
    result.usage.requests += 1
    result.usage.add(message.usage)


def _tool_calls_of(message: AssistantMessage) -> list[ToolCall]:
    return [block for block in message.content if isinstance(block, ToolCall)]


def _run_tools(
    state: _LoopState, message: AssistantMessage, calls: list[ToolCall]
) -> tuple[list[ToolResultMessage], bool]:
    """The turn's tool batch; return its result messages and whether the model is to see them
    (not when every result asked to terminate)."""
    if not calls:
        return [], False
    if message.stop_reason == "length":
        results, terminate = state.tools.fail_truncated(calls), False
    else:
        with _turn_signal(state) as signal:  # an interrupt stops this batch, not the run
            state.tools.signal = signal
            try:
                results, terminate = state.tools.run_batch(state.context, message, calls)
            finally:
                state.tools.signal = state.signal
    entries = state.tools.take_entries()  # approval requests of deferred calls, announced
    state.context.messages.extend([*entries, *results])
    state.new_messages.extend([*entries, *results])
    return results, not terminate


def _resume_approvals(state: _LoopState) -> bool:
    """A batch whose calls waited for approval (:mod:`agentkit.deferred`): once every call is
    decided, claim the batch (durably: of two resumers only one claim is stored), run it and
    end its turn. Return whether the run ends here: a call is still undecided, or the results
    asked to terminate."""
    messages = state.context.messages
    if not messages or role_of(messages[-1]) in ("user", "assistant", "system"):
        return False  # the cheap test first: a waiting batch ends in entries or results
    from .deferred import run_decided, waiting_batch

    batch = waiting_batch(messages)
    if batch is None:
        return False
    if batch.undecided:
        _wait_for_approval(state, batch.pending())
        state.emit(TurnEndEvent(batch.message, []))
        return True
    _append_messages(state, [batch.claim()])
    results, terminate = run_decided(state.tools, state.context, batch)
    entries = state.tools.take_entries()  # a held call asked now may wait again
    state.context.messages.extend([*entries, *results])
    state.new_messages.extend([*entries, *results])
    state.emit(TurnEndEvent(batch.message, results))
    if state.tools.waiting:
        _wait_for_approval(state, state.tools.waiting)
        return True
    if terminate or state.signal.aborted:
        return True
    state.emit(TurnStartEvent())
    return False


def _wait_for_approval(state: _LoopState, pending: list[Any]) -> None:
    """End the run waiting for approval: its result lists every pending call."""
    state.new_messages.stop_reason = "approval"
    state.new_messages.pending_approvals = list(pending)


def _finish_turn(state: _LoopState, turn: TurnContext) -> str | None:
    """``finish_turn``'s decision (``"end"``, ``"continue"`` or none), then ``turn_end``."""
    decision = None
    if state.config.finish_turn is not None:
        value = state.config.finish_turn(turn, state.signal)
        if isinstance(value, dict):
            value = value.get("action")
        decision = value if value in ("end", "continue") else None
    state.emit(TurnEndEvent(turn.message, turn.tool_results))
    return decision


def _at_final_answer(state: _LoopState, message: AssistantMessage) -> list[Any] | None:
    """The envelope at the final answer: validate it against ``output_type``. ``[]`` when it
    is valid (stored in the result), the retry message when not, ``None`` when the retries are
    spent (the run fails)."""
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


def _end_run(state: _LoopState) -> None:
    """Settle the run's result (stop reason, budget) and emit ``agent_end``."""
    result, limit = state.new_messages, state.tracker.limit
    state.tracker.count_unfinished_children()  # sub-agents given up on: their spend so far
    finish_result(result)
    if limit is not None and result.stop_reason in ("stop", "aborted"):
        result.stop_reason, result.budget = "budget", limit
        result.error_message = None
    elif state.signal.aborted and result.stop_reason == "stop":  # aborted during tools
        result.stop_reason, result.error_message = "aborted", ABORTED_TEXT
    state.emit(AgentEndEvent(state.new_messages))


def _poll(getter: Callable[[], list[Any]] | None) -> list[Any]:
    if getter is None:
        return []
    return list(getter() or [])


# --- one model request ------------------------------------------------------------------------


@contextlib.contextmanager
def _turn_signal(state: _LoopState) -> Iterator[AbortSignal]:
    """The signal of one request or tool batch: the run's, or with an interrupt lane (an
    Agent's) a child of it that ``agent.interrupt()`` aborts too."""
    lane = state.config.interrupts
    if lane is None:
        yield state.signal
        return
    with lane.turn(state.signal) as signal:
        yield signal


def _request_options(
    state: _LoopState, api_key: str | None, signal: AbortSignal | None = None
) -> StreamOptions:
    """This request's options: the config's ``stream_options`` plus key, signal and reasoning."""
    options = state.config.stream_options
    update: dict[str, Any] = {
        "api_key": api_key or options.api_key,
        "signal": signal or state.signal,
        "reasoning": state.config.reasoning,
    }
    if state.output is not None and not state.tracker.summarizing:
        update["output_schema"] = state.output.output_schema
    return options.model_copy(update=update)


def _stream_assistant_response(state: _LoopState) -> AssistantMessage:
    """Make one request and fold its stream into the transcript, emitting message events.

    If the stream function ignores an abort, the loop gives it ``tool_abort_grace`` seconds to
    end, then ends the message as aborted itself. An interrupt aborts the request alone: its
    response is kept as an aborted one, marked :data:`~agentkit.interrupts.INTERRUPTED_TEXT`.
    """
    with _turn_signal(state) as signal:
        final, started = _stream_response(state, signal)
    state.interrupted = (
        final.stop_reason == "aborted"
        and isinstance(signal.reason, Interrupt)
        and not state.signal.aborted
    )
    if state.interrupted:
        final.error_message = INTERRUPTED_TEXT
    final.thinking_level = state.config.reasoning or "off"
    if not started:
        state.context.messages.append(final)
        state.emit(MessageStartEvent(_snapshot(final)))
    state.emit(MessageEndEvent(final))
    return final


def _stream_response(state: _LoopState, signal: AbortSignal) -> tuple[AssistantMessage, bool]:
    """Make the request under ``signal``; fold its stream into the transcript, emitting the
    start and update events. Return the final message and whether it started (then it is in
    the transcript already, in its partial's place)."""
    config = state.config
    messages = compacted_view(state.context.messages)  # the transcript itself if not compacted
    if config.transform_context is not None:
        messages = config.transform_context(messages, signal)
    llm_messages = config.convert_to_llm(messages)
    api_key = None
    if config.get_api_key is not None:
        api_key = config.get_api_key(config.model.provider)
    request_context = Context(messages=list(llm_messages))
    options = _request_options(state, api_key, signal)
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
    events = wait_or_give_up(
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
    if partial is not None:
        context_messages[-1] = final
    return final, partial is not None


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
