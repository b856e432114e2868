"""The agent loop: the entry points, the turns of a run and one model request, top to bottom in
the order they run.

A run alternates model requests and tool batches until the model stops asking for tools and no
steering or follow-up message is waiting (SPEC section 4). A run's state lives in one
:class:`_Run`, made when it starts and dropped when it ends; the loop keeps nothing between
runs. The loop runs on the calling thread, and so does every ``emit``, in order; a tool batch
(:mod:`agentkit.tool_calls`) fans out to the run's tool executor while this thread pumps the
calls' progress.

Everything beyond pi's loop is a run policy (:mod:`agentkit.policy`), called at named points:
``start``, ``before_turn``, ``wrap_request``, ``review_calls`` (inside the tool batch),
``wrap_batch``, ``wrap_tool_call``, ``at_final_answer`` and ``end``. The loop imports none of
them; the :class:`~agentkit.Agent` turns its options (budgets, typed output, compaction,
approvals, the interrupt lane) into the chain, ``config.policies``.

Two facts the loop takes from its arguments rather than from a policy: an abort whose reason
has ``keeps_run`` set (an :class:`~agentkit.interrupts.Interrupt`) cuts a response short
without ending the run; and when ``stream_fn`` is not given, the process-wide default
(:func:`~agentkit.config.get_default_stream_fn`) makes the requests.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ._request import read_quietly, request_once, side_request, snapshot, stream_response
from ._serialize import LLM_ROLES, clean_message
from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .config import (
    AgentLoopConfig,
    StreamFn,
    default_convert_to_llm,
    get_default_stream_fn,
    set_default_stream_fn,
)
from .errors import CannotContinueError
from .event_stream import EventStream
from .events import (
    AgentEndEvent,
    AgentEvent,
    AgentStartEvent,
    MessageEndEvent,
    MessageStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from .hooks import RequestContext, TurnContext, TurnUpdate, coerce_hook_result
from .policy import (
    BatchOutcome,
    Ending,
    EndRun,
    ModelRequest,
    RunPolicy,
    RunScope,
    ToolBatchRun,
    chain,
    ending_of,
    overrides,
)
from .results import RunResult, finish_result
from .tool_calls import ToolRunner, execute_tool, run_tool_call
from .transcript import (
    COMPACTION_ROLE,
    ToolDeclarations,
    compacted_view,
    declare_tool_changes,
    last_said,
)
from .types import (
    AgentContext,
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    ToolCall,
    ToolResultMessage,
    role_of,
)
from .waits import Deadline

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
    "request_once",
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
    last = role_of(last_said(messages))  # a run_end record says nothing to go on from
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


# --- the run, as its policies see it ----------------------------------------------------------


class _Run(RunScope):
    """One run's state, made by :func:`_run_loop` and dropped when the run ends."""

    def __init__(
        self,
        context: AgentContext,
        config: AgentLoopConfig,
        result: RunResult,
        emit: Emit,
        signal: AbortSignal,
        stream_fn: StreamFn,
    ) -> None:
        self.context, self.config, self.result = context, config, result
        self.emit = emit
        self.signal, self.stream_fn = signal, stream_fn
        self.model: Model = config.model
        self.options: StreamOptions = config.stream_options
        self.deadline: Deadline | None = None
        self.state: dict[str, Any] = {}
        self.turn_start = 0
        self.wrapping_up = False
        self.interrupted = False
        self.declarations = ToolDeclarations()
        self._seen = _Seen()
        self.policies: list[RunPolicy] = []
        self._hooks: dict[str, list[RunPolicy]] = {}  # by hook: the policies that have it
        self.tools = ToolRunner(
            emit,
            signal,
            before_tool_call=config.before_tool_call,
            after_tool_call=config.after_tool_call,
            deps=config.deps,
            grace=config.tool_abort_grace,
            sequential=config.tool_execution == "sequential",
            inline=config.tool_execution == "inline",
            executor=config.tool_executor,
            max_workers=config.max_tool_workers,
            usage=result.usage,
        )
        self._ending: Ending | None = None
        self._stop = False  # the ending asked the loop to stop at its next point
        self._ending_lock = threading.Lock()  # end() may come from a deadline's timer thread
        self._sent: AssistantMessage | None = None  # the last response the base request made
        self.send: Callable[[ModelRequest], AssistantMessage] = self._send
        self.run_batch: Callable[[ToolBatchRun], BatchOutcome] = self._run_batch

    def adopt(self, policies: Sequence[RunPolicy]) -> None:
        """Take each policy's object for this run and build the chains around the request,
        the batch and each call."""
        self.policies = [policy.for_run(self) for policy in policies]
        self._hooks = {
            name: [p for p in self.policies if overrides(p, name)]
            for name in ("start", "before_turn", "review_calls", "at_final_answer", "end")
        }
        self.tools.reviewers = self._hooks["review_calls"]
        self.send = chain(self.policies, "wrap_request", self, self._send)
        self.run_batch = chain(self.policies, "wrap_batch", self, self._run_batch)
        self.tools.scope = self
        if any(overrides(p, "wrap_tool_call") for p in self.policies):
            self.tools.execute_call = chain(self.policies, "wrap_tool_call", self, execute_tool)

    def close(self) -> None:
        """Stop the run's tool threads and let go of the chains, which refer back to this run
        (cycles that would leave the run, and all it reaches, to the garbage collector)."""
        self.tools.close()
        self.send = self.run_batch = _ended
        self.tools.scope, self.tools.execute_call, self.tools.reviewers = None, None, []
        self._hooks = {}

    def hooks(self, name: str) -> list[RunPolicy]:
        """The run's policies that have their own ``name`` hook, in order."""
        return self._hooks.get(name, [])

    # --- RunScope ---

    def append(self, messages: Sequence[Any]) -> None:
        for message in messages:
            self.emit(MessageStartEvent(message))
            self.emit(MessageEndEvent(message))
            self.context.messages.append(message)
            self.result.append(message)

    def end(
        self,
        reason: str,
        message: str | None = None,
        *,
        error: BaseException | None = None,
        budget: str | None = None,
        pending_approvals: Sequence[Any] = (),
        detail: dict[str, Any] | None = None,
        at_once: bool = True,
    ) -> None:
        if reason == "stop":  # the run ends as it stands: its last message says how
            with self._ending_lock:
                self._stop = self._stop or at_once
            return
        ending = Ending(reason, message, error, budget, list(pending_approvals), detail)
        self.end_with(ending, at_once)

    def end_with(self, ending: Ending, at_once: bool = True) -> None:
        """Keep ``ending`` unless one was asked for first; stop at the next point if asked."""
        with self._ending_lock:
            if self._ending is None:
                self._ending = ending
            self._stop = self._stop or at_once

    @property
    def ending(self) -> Ending | None:
        return self._ending

    @property
    def stops(self) -> bool:
        """Whether an ending asked the loop to stop."""
        return self._stop

    def set_signal(self, signal: AbortSignal, deadline: Deadline | None = None) -> None:
        self.signal = self.tools.signal = signal
        self.deadline = self.tools.deadline = deadline

    def view(self) -> Context:
        config = self.config
        transcript = self.context.messages
        if self._seen.compacted(transcript):
            messages = compacted_view(transcript)
        elif config.transform_context is None and config.convert_to_llm is default_convert_to_llm:
            return Context(messages=self._seen.model_view(transcript))  # the common case
        else:
            messages = transcript
        if config.transform_context is not None:
            messages = config.transform_context(messages, self.signal)
        return Context(messages=list(config.convert_to_llm(messages)))

    def complete(
        self, messages: list[Any], *, max_tokens: int | None = None, purpose: str = "summary"
    ) -> AssistantMessage:
        request = side_request(
            self.model, self.stream_fn, self.options, messages, self.signal,
            get_api_key=self.config.get_api_key, max_tokens=max_tokens, purpose=purpose,
        )  # fmt: skip
        return self.send(request)

    def send_aside(self, request: ModelRequest, grace: float | None = None) -> AssistantMessage:
        wait = self.config.tool_abort_grace if grace is None else grace
        deadline = self.deadline  # read once: set_signal may change it on the run's thread

        def read(sent: ModelRequest) -> AssistantMessage:
            return read_quietly(sent, wait, deadline)

        return chain(self.policies, "wrap_side_request", self, read)(request)

    def run_tools(self, message: AssistantMessage, calls: list[ToolCall]) -> BatchOutcome:
        results, terminate = _run_tools(self, message, calls)
        return BatchOutcome(results, not terminate)

    def refuse_call(self, call: ToolCall, text: str) -> ToolResultMessage:
        return self.tools.fail_call(call, text)

    # --- the innermost handlers ---

    def _send(self, request: ModelRequest) -> AssistantMessage:
        """The request itself: a turn's streams its response into the transcript; another
        (``run.complete``) is read quietly. Either is counted in the run's usage."""
        if request.purpose == "turn":
            final = _stream_assistant_response(self, request)
            self._sent = final
            self.result.append(final)
        else:
            final = read_quietly(request, self.config.tool_abort_grace, self.deadline)
        self.result.usage.requests += 1
        self.result.usage.add(final.usage)
        return final

    def _run_batch(self, batch: ToolBatchRun) -> BatchOutcome:
        messages, terminate = self.tools.run_batch(
            self.context, batch.message, batch.calls, batch.signal
        )
        return BatchOutcome(messages, terminate)


class _Seen:
    """What the run's requests have read of its transcript so far, so that each request reads
    only what was added since (a long run would otherwise read its whole transcript again for
    every request): whether it holds a compaction, and the messages the model sees of it.

    The transcript only grows during a run (a streaming message is replaced by its final one
    before the next request reads it); when the list is another (``prepare_request`` replaced
    the context) or its last seen message moved, everything is read again."""

    def __init__(self) -> None:
        self._list: list[Any] | None = None
        self._read = 0  # how many messages of _list were read
        self._last: Any = None  # the last of them, to notice a list changed in place
        self._compaction = False
        self._view: list[Any] = []  # the messages the model sees (default conversion)

    def _catch_up(self, messages: list[Any]) -> None:
        read = self._read
        if messages is not self._list or read > len(messages) or (
            read and messages[read - 1] is not self._last
        ):
            self._list, read, self._compaction, self._view = messages, 0, False, []
        for message in messages[read:]:
            role = role_of(message)
            if role == COMPACTION_ROLE:
                self._compaction = True
            elif role in LLM_ROLES:
                self._view.append(message)
        self._read = len(messages)
        self._last = messages[-1] if messages else None

    def compacted(self, messages: list[Any]) -> bool:
        """Whether ``messages`` holds a compaction."""
        self._catch_up(messages)
        return self._compaction

    def model_view(self, messages: list[Any]) -> list[Any]:
        """``default_convert_to_llm(messages)``, read incrementally (a new list each time)."""
        self._catch_up(messages)
        return list(self._view)


def _ended(item: Any) -> Any:
    """What a closed run's chains are: a request or batch after the end is a mistake."""
    raise RuntimeError("the run has ended")


# --- the turns --------------------------------------------------------------------------------


def _run_loop(
    context: AgentContext,
    new_messages: RunResult,
    config: AgentLoopConfig,
    emit: Emit,
    signal: AbortSignal,
    stream_fn: StreamFn,
) -> None:
    """Run the turns between the policies' ``start`` and ``end``; the run's tool threads are
    closed and every ``end`` hook called however the run ends."""
    run = _Run(context, config, new_messages, emit, signal, stream_fn)
    ended = False
    try:
        run.adopt(config.policies)
        for policy in run.hooks("start"):
            _guarded(run, policy.start, run)
            if run.stops:
                break
        if not run.stops:
            _turns(run)
        finish_result(new_messages, run.ending, ABORTED_TEXT if run.signal.aborted else None)
        ended = True
        _end_policies(run)
        emit(AgentEndEvent(new_messages))
    finally:
        try:
            if not ended:
                _end_policies(run, failing=True)
        finally:
            run.close()


def _end_policies(run: _Run, failing: bool = False) -> None:
    """Every policy's ``end``, the outermost last; the first failure is raised once all ran
    (while the run is failing already, it is that failure that propagates)."""
    failure: BaseException | None = None
    for policy in reversed(run.hooks("end")):
        try:
            policy.end(run, run.result)
        except BaseException as exc:  # noqa: BLE001 - every end hook runs; raised below
            failure = failure or exc
    if failure is not None and not failing:
        raise failure


def _guarded(run: _Run, hook: Callable[..., Any], *args: Any) -> Any:
    """Call a hook; an :class:`EndRun` it raises becomes the run's ending."""
    try:
        return hook(*args)
    except EndRun as stop:
        run.end_with(ending_of(stop))
        return None


def _turns(run: _Run) -> None:
    """The turns of a run (SPEC 4.2), until the run is to end; the policies are called before
    a turn, around each request and batch, and at the final answer."""
    config = run.config
    last_turn: TurnContext | None = None
    explicit_continuation = False
    pending = _poll(config.get_steering_messages)
    run.turn_start = len(run.context.messages) - len(run.result)  # this turn's own messages
    while True:
        has_more_tool_calls = True
        while has_more_tool_calls or pending:
            if last_turn is not None:
                starting = _next_turn(run, last_turn, pending)
                if starting is None:
                    return
                pending = starting
                run.turn_start = len(run.context.messages)
            _add_incoming(run, pending)
            _before_request(run)
            message = _request(run)
            if message is None:
                return  # a policy ended the run instead of making the request
            stopped = message.stop_reason in ("error", "aborted")
            calls = [] if stopped else _tool_calls_of(message)
            tool_results, has_more_tool_calls = _run_tools(run, message, calls)
            last_turn = TurnContext(message, tool_results, run.context, run.result)
            decision = _finish_turn(run, last_turn)
            if _ends_here(run, stopped, decision, bool(calls)):
                return
            explicit_continuation = decision == "continue"
            pending = _poll(config.get_steering_messages)
            if has_more_tool_calls or pending:
                explicit_continuation = False
            elif not calls and message.stop_reason == "stop":
                retry = _at_final_answer(run, message)
                if retry is None:
                    return
                pending = retry
        pending = _poll(config.get_follow_up_messages)
        if not pending and not explicit_continuation:
            return
        explicit_continuation = False


def _ends_here(run: _Run, stopped: bool, decision: str | None, had_calls: bool) -> bool:
    """Whether the run ends after this turn: its response failed (an interrupted one goes
    on), ``finish_turn`` said end, it was aborted during its tools (it ends after that batch),
    or a policy asked it to end."""
    failed = stopped and not run.interrupted
    return failed or decision == "end" or (had_calls and run.signal.aborted) or run.stops


def _next_turn(run: _Run, last_turn: TurnContext, pending: list[Any]) -> list[Any] | None:
    """Between two turns: the policies' ``before_turn``, ``prepare_next_turn`` and the
    steering queue, then ``turn_start``. Return the messages the turn starts with, ``None``
    when the run ends (the pending messages, drained from a queue, stay in the transcript)."""
    for policy in run.hooks("before_turn"):
        _guarded(run, policy.before_turn, run, pending)
        if run.stops:
            run.append(pending)
            return None
    config = run.config
    prepared: list[Any] = []
    if config.prepare_next_turn is not None:
        update = coerce_hook_result(config.prepare_next_turn(last_turn), TurnUpdate)
        _apply_update(run, update)
        if update is not None and update.messages:
            prepared = list(update.messages)
    if not pending:
        pending = _poll(config.get_steering_messages)
    run.emit(TurnStartEvent())
    return prepared + pending


def _add_incoming(run: _Run, messages: list[Any]) -> None:
    """Start the turn's messages (a tool-set change declared before them) in the transcript."""
    context = run.context
    run.append(
        run.declarations(context.messages, context.tools, [clean_message(m) for m in messages])
    )


def _before_request(run: _Run) -> None:
    """``prepare_request``: the last change to the context, model or thinking level."""
    hook = run.config.prepare_request
    if hook is not None:
        request = RequestContext(
            context=run.context,
            model=run.model,
            thinking_level=run.config.reasoning or "off",
        )
        _apply_update(run, coerce_hook_result(hook(request, run.signal), TurnUpdate))


def _apply_update(run: _Run, update: TurnUpdate | None) -> None:
    if update is None:
        return
    if update.context is not None:
        run.context = update.context
    if update.model is not None:
        run.model = update.model
    if update.thinking_level is not None:
        run.config.reasoning = None if update.thinking_level == "off" else update.thinking_level


def _request(run: _Run) -> AssistantMessage | None:
    """One model request through the policies' ``wrap_request`` chain; ``None`` when a policy
    ended the run instead."""
    run._sent = None
    try:
        message = run.send(build_request(run))
    except EndRun as stop:
        run.end_with(ending_of(stop))
        return None
    if message is not run._sent:
        if run._sent is not None:
            raise TypeError(
                "a policy's wrap_request returned another message than the one call_next gave; "
                "change a response as it streams (wrap request.stream_fn) instead"
            )
        _adopt_response(run, message)  # a policy answered without asking the model
    return message


def build_request(run: _Run) -> ModelRequest:
    """The next request, from the transcript as it is now."""
    config = run.config
    context = run.view()
    api_key = config.get_api_key(run.model.provider) if config.get_api_key is not None else None
    options = run.options.model_copy(
        update={
            "api_key": api_key or run.options.api_key,
            "signal": run.signal,
            "reasoning": config.reasoning,
        }
    )
    return ModelRequest(run.model, context, options, run.stream_fn, run.signal)


def _adopt_response(run: _Run, message: AssistantMessage) -> None:
    """A response a policy made up: into the transcript and the result, with its events."""
    run._sent = message
    run.context.messages.append(message)
    run.emit(MessageStartEvent(message))
    run.emit(MessageEndEvent(message))
    run.result.append(message)


def _tool_calls_of(message: AssistantMessage) -> list[ToolCall]:
    return [block for block in message.content if isinstance(block, ToolCall)]


def _run_tools(
    run: _Run, message: AssistantMessage, calls: list[ToolCall]
) -> tuple[list[ToolResultMessage], bool]:
    """The turn's tool batch through the policies' ``wrap_batch`` chain; return its result
    messages and whether the model is to see them (not when every result asked to
    terminate). Calls deferred to a later decision end the run waiting for approval."""
    if not calls:
        return [], False
    tools = run.tools
    if message.stop_reason == "length":
        outcome = BatchOutcome(tools.fail_truncated(calls))
    else:
        try:
            outcome = run.run_batch(ToolBatchRun(message, list(calls), run.signal))
        except EndRun as stop:
            run.end_with(ending_of(stop))
            outcome = BatchOutcome([])
    entries = tools.take_entries()  # approval requests of deferred calls, announced
    results = outcome.messages + _unanswered(run, calls, outcome.messages, entries)
    run.context.messages.extend([*entries, *results])
    run.result.extend([*entries, *results])
    if tools.waiting:  # calls deferred to a decision recorded later: the run waits for it
        run.end("approval", pending_approvals=tools.take_waiting())
    return results, not outcome.terminate


def _unanswered(
    run: _Run, calls: list[ToolCall], results: list[ToolResultMessage], entries: list[Any]
) -> list[ToolResultMessage]:
    """Results for the calls a policy's batch left without one (it ended the run first): the
    transcript keeps every call paired with a result."""
    answered = {r.tool_call_id for r in results} | {
        getattr(e, "tool_call_id", None) for e in entries
    }
    ending = run.ending
    why = f" ({ending.message or ending.reason})" if ending is not None else ""
    return [
        run.refuse_call(call, f"Tool call {call.name} was not executed: the run ended{why}")
        for call in calls
        if call.id not in answered
    ]


def _finish_turn(run: _Run, turn: TurnContext) -> str | None:
    """``finish_turn``'s decision (``"end"``, ``"continue"`` or none), then ``turn_end``."""
    decision = None
    if run.config.finish_turn is not None:
        value = run.config.finish_turn(turn, run.signal)
        if isinstance(value, dict):
            value = value.get("action")
        decision = value if value in ("end", "continue") else None
    run.emit(TurnEndEvent(turn.message, turn.tool_results))
    return decision


def _at_final_answer(run: _Run, message: AssistantMessage) -> list[Any] | None:
    """The policies' ``at_final_answer``: ``[]`` when every one accepts the answer, the
    messages of another turn when one asks for it, ``None`` when one ended the run."""
    for policy in run.hooks("at_final_answer"):
        more = _guarded(run, policy.at_final_answer, run, message)
        if run.stops:
            return None
        if more:
            return list(more)
    return []


def _poll(getter: Callable[[], list[Any]] | None) -> list[Any]:
    if getter is None:
        return []
    return list(getter() or [])


# --- one model request ------------------------------------------------------------------------


def _stream_assistant_response(run: _Run, request: ModelRequest) -> AssistantMessage:
    """Make one request and fold its stream into the transcript, emitting message events.

    If the stream function ignores an abort, the loop gives it ``tool_abort_grace`` seconds to
    end, then ends the message as aborted itself. An abort whose reason keeps the run going (an
    interrupt) cuts the response alone: it is kept as an aborted one, its error message the
    reason's text.
    """
    signal = request.signal
    final, started = stream_response(
        request, run.context.messages, run.emit, run.result, run.config.tool_abort_grace,
        run.deadline,
    )  # fmt: skip
    reason = signal.reason
    run.interrupted = (
        final.stop_reason == "aborted"
        and signal.aborted
        and getattr(reason, "keeps_run", False)
        and not run.signal.aborted
    )
    if run.interrupted:
        final.error_message = str(reason)
    final.thinking_level = run.config.reasoning or "off"
    if not started:
        run.context.messages.append(final)
        run.emit(MessageStartEvent(snapshot(final)))
    run.emit(MessageEndEvent(final))
    return final


