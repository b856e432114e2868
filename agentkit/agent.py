"""The :class:`Agent`: a thin, thread-safe state shell around the loop.

It owns the transcript, the steering and follow-up queues, the active run's abort controller and
the listeners. Each run executes the loop on a worker thread of its own (a blocking call off the
main thread lends its own thread, see :func:`~agentkit.run.caller_hosts_run`); listeners are
called on that thread, one at a time, in event order, after the state was updated for the event.
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from ._log import agentkit_logger
from .abort import AbortController, AbortSignal
from .agent_state import AgentState, PendingMessageQueue, QueueMode, resolve_model
from .config import AgentLoopConfig, StreamFn, get_default_stream_fn
from .errors import AgentBusyError, AgentError, CannotContinueError, CompactionError
from .events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    ToolExecutionEndEvent,
)
from .interrupts import InterruptLane
from .loop import request_once, run_agent_loop, run_agent_loop_continue
from .options import (
    AgentOptions,
    Envelope,
    RunOptions,
    check_run_options,
    merge_options,
    run_policies,
    run_stream_fn,
)
from .results import RunResult, as_run_result
from .run import (
    AgentRunStream,
    Listener,
    Run,
    _wait_through_interrupts,
    announce_failure,
    caller_hosts_run,
    running_agent,
    start_worker,
)
from .transcript import (
    create_initial_system_message,
    exception_text,
    failure_message,
    get_current_system_message,
    last_said,
    run_end_entry,
    user_message,
)
from .types import (
    AgentContext,
    AgentTool,
    ImageContent,
    Model,
    StreamOptions,
    TextContent,
    ThinkingLevel,
    UserMessage,
    placeholder_model,
    role_of,
    to_tool_declaration,
)

if TYPE_CHECKING:
    from .sessions import Session, SessionWriter
    from .transcript import CompactionRecord

__all__ = ["Agent", "AgentRunStream", "AgentState", "PendingMessageQueue", "Run", "resolve_model"]


BUSY_PROMPT = (
    "Agent is already processing a prompt. Use steer() or follow_up() to queue messages, "
    "or wait for completion."
)
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
BUSY_RESET = "Agent is already processing. Wait for completion before resetting."
BUSY_COMPACT = "Agent is already processing. Wait for completion before compacting."


class Agent(AgentOptions):
    """A stateful agent: a transcript, tools and a model, run by blocking calls.

    ``prompt()`` blocks until the run and its listeners are done; ``start()`` returns a
    :class:`Run` at once; ``stream()`` yields the run's events. ``steer()``, ``follow_up()`` and
    ``abort()`` are safe from any thread while a run is going. Its options (the hooks, the
    request options, the run envelope) are typed attributes, read when a run starts; assigning a
    name that is not one raises ``AttributeError`` (see :class:`~agentkit.config.AgentOptions`).
    """

    def __init__(
        self,
        *,
        model: Model | str | None = None,
        system_prompt: str = "",
        tools: Sequence[AgentTool] | None = None,
        messages: Sequence[Any] | None = None,
        thinking_level: ThinkingLevel = "off",
        stream_fn: StreamFn | None = None,
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
        stream_options: StreamOptions | dict[str, Any] | None = None,
        session: Session | None = None,
        name: str | None = None,
        description: str | None = None,
        **options: Any,
    ) -> None:
        """``options`` are loop options (the fields of :class:`AgentLoopConfig`: the hooks,
        ``tool_execution``, ``max_tool_workers``, ``tool_abort_grace``, ...) and request options
        (the fields of :class:`StreamOptions`: ``session_id``, ``api_key``, ``max_tokens``,
        ``headers``, ...). Each is then a public attribute, read when a run starts; an unknown
        name raises ``TypeError``. ``model`` may be ``"provider:id"`` from the catalog.
        ``name`` and ``description`` say what the agent is for: :meth:`as_tool` offers it to
        other agents under them, and tracing names its runs after it.
        """
        self.name, self.description = name, description
        self._loop = AgentLoopConfig(model=placeholder_model())
        self._envelope = Envelope()
        self._stream_fn: StreamFn = stream_fn or get_default_stream_fn()
        self.stream_options = stream_options
        for name, value in options.items():
            self._set_option(name, value)

        self._state = AgentState(resolve_model(model), thinking_level)
        self._state.tools = list(tools or [])
        initial = list(messages or [])
        if not (initial and role_of(initial[0]) == "system"):
            first = create_initial_system_message(
                system_prompt, [to_tool_declaration(t) for t in self._state.tools]
            )
            if first is not None:
                initial.insert(0, first)
        # A session (agentkit.sessions.Session) supplies the history and keeps every message.
        self._session_writer: SessionWriter | None = None
        if session is not None:
            from .settle import settle_interrupted  # the approvals load with a session

            tools, deps, approvals = self._state.tools, self._loop.deps, self.approvals
            self._session_writer = session.attach(
                initial, lambda messages: settle_interrupted(messages, tools, deps, approvals)
            )
            initial = self._session_writer.messages
        self._state.messages = initial

        self._steering = PendingMessageQueue(steering_mode)
        self._follow_ups = PendingMessageQueue(follow_up_mode)
        self._interrupts = InterruptLane()
        # Guards _active and _listeners: runs start, and listeners (un)subscribe, from any thread.
        self._lock = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()
        self._active: Run | None = None
        self._closed = False
        self._close_callbacks: list[Callable[[], Any]] = []

    @property
    def name(self) -> str | None:
        """What the agent is called (the tool name :meth:`as_tool` gives it)."""
        return self._name

    @name.setter
    def name(self, value: str | None) -> None:
        self._name = value

    @property
    def description(self) -> str | None:
        """What the agent does (the description :meth:`as_tool` gives the model)."""
        return self._description

    @description.setter
    def description(self, value: str | None) -> None:
        self._description = value

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        input_type: type[Any] | None = None,
        session: Any = None,
    ) -> AgentTool:
        """This agent as a tool another agent can call: each call is a fresh run of it, inside
        the caller's run (its abort, budgets, deadline, usage, listeners and spans); see
        :func:`agentkit.subagents.agent_tool` for ``input_type`` and ``session``."""
        from .subagents import agent_tool

        return agent_tool(
            self, name=name, description=description, input_type=input_type, session=session
        )

    def fresh_copy(self, session: Session | None = None) -> Agent:
        """A new agent with this one's settings (every option, hooks and policies included)
        and its starting transcript, in ``session``: a sub-agent's run (see
        :mod:`agentkit.subagents`)."""
        state = self.state
        child = Agent(
            model=state.model,
            tools=list(state.tools),
            messages=list(state.messages),
            thinking_level=state.thinking_level,
            stream_fn=self.stream_fn,
            steering_mode=self.steering_mode,
            follow_up_mode=self.follow_up_mode,
            session=session,
            name=self.name,
            description=self.description,
        )
        child._loop = dataclasses.replace(self._loop)
        child._envelope = dataclasses.replace(self._envelope)
        return child

    @property
    def stream_fn(self) -> StreamFn:
        """The seam to the model: ``stream_fn(model, context, options)``; ``None`` sets the
        process default."""
        return self._stream_fn

    @stream_fn.setter
    def stream_fn(self, fn: StreamFn | None) -> None:
        self._stream_fn = fn or get_default_stream_fn()

    # --- state ---------------------------------------------------------------------------------

    @property
    def state(self) -> AgentState:
        """The live state: transcript, tools, model, streaming status."""
        return self._state

    @property
    def signal(self) -> AbortSignal | None:
        """The active run's abort signal, or ``None`` when idle."""
        run = self._active
        return run.signal if run is not None else None

    @property
    def run_options(self) -> RunOptions | None:
        """The active run's options, its own over the agent's (``prompt(..., output_type=...)``
        wins over ``agent.output_type``), or ``None`` when idle: what a listener describing
        the run reads."""
        run = self._active
        return run.options if run is not None else None

    @property
    def steering_mode(self) -> QueueMode:
        """How many steering messages one poll takes: ``"one-at-a-time"`` or ``"all"``."""
        return self._steering.mode

    @steering_mode.setter
    def steering_mode(self, mode: QueueMode) -> None:
        self._steering.mode = mode

    @property
    def follow_up_mode(self) -> QueueMode:
        """How many follow-up messages one poll takes: ``"one-at-a-time"`` or ``"all"``."""
        return self._follow_ups.mode

    @follow_up_mode.setter
    def follow_up_mode(self, mode: QueueMode) -> None:
        self._follow_ups.mode = mode

    # --- listeners -----------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(event)`` for every event from now on; return an unsubscribe function.

        Listeners run on the run's worker thread, one at a time, in event order. A listener
        that raises fails the run (the failure becomes the last assistant message).
        """
        with self._lock:
            self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                listeners = list(self._listeners)
                if listener in listeners:
                    listeners.remove(listener)
                self._listeners = tuple(listeners)

        return unsubscribe

    # --- queues --------------------------------------------------------------------------------

    def steer(self, message: Any) -> None:
        """Queue a message to inject after the current tool batch (a ``str`` is a user message)."""
        self._steering.enqueue(_as_message(message))

    def follow_up(self, message: Any) -> None:
        """Queue a message to run once the agent would otherwise stop."""
        self._follow_ups.enqueue(_as_message(message))

    def interrupt(self, message: Any) -> None:
        """Stop what the run is doing now and go on with ``message`` (a ``str`` is a user
        message) as its next user turn; safe from any thread.

        The model request going on is cancelled (its partial response is kept as an aborted
        one, which later requests leave out), and every tool call still running is aborted and
        gets an error result saying it was interrupted, with the message; a tool that ignores
        the abort is given up on after ``tool_abort_grace``. Unlike :meth:`abort` the run goes
        on; unlike :meth:`steer` it does not wait for the tool batch. When no run is active, the
        message waits for the next run's first turn, as a steering message would.
        """
        self._interrupts.interrupt(_as_message(message))

    def clear_steering_queue(self) -> None:
        """Drop every queued steering message."""
        self._steering.clear()

    def clear_follow_up_queue(self) -> None:
        """Drop every queued follow-up message."""
        self._follow_ups.clear()

    def clear_all_queues(self) -> None:
        """Drop every queued steering and follow-up message."""
        self._steering.clear()
        self._follow_ups.clear()

    def has_queued_messages(self) -> bool:
        """Whether a steering or follow-up message is waiting."""
        return len(self._steering) > 0 or len(self._follow_ups) > 0

    def peek_queued_messages(self) -> list[Any]:
        """The next steering batch, else the next follow-up batch; nothing is taken."""
        return self._steering.peek() or self._follow_ups.peek()

    # --- runs ----------------------------------------------------------------------------------

    def prompt(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> RunResult:
        """Run the agent on ``input`` and block until it is done; return the run's result.

        The :class:`~agentkit.RunResult` is the list of new messages, with the final ``text``,
        typed ``output``, ``usage``, ``stop_reason`` and error. ``input`` is a string, a
        message or a list of messages. ``run_options`` override the agent's for this run:
        ``output_type``, ``output_retries``, ``budgets``, ``deps`` and ``tool_choice``. A
        ``KeyboardInterrupt`` (or any exception a signal handler raises) at any instant aborts
        the run, waits for it to wind down, then propagates.
        """
        prompts = self._prompt_messages(input, images)
        body = self._prompt_body(prompts, check_run_options(run_options))
        return self._launch(BUSY_PROMPT, body, block=True).result()

    def start(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> Run:
        """Start a run on ``input`` and return its :class:`Run` at once (``run_options`` as for
        :meth:`prompt`)."""
        prompts = self._prompt_messages(input, images)
        body = self._prompt_body(prompts, check_run_options(run_options))
        return self._launch(BUSY_PROMPT, body)

    def continue_(self, **run_options: Any) -> RunResult:
        """Continue from the transcript as it stands; block; return the run's result
        (``run_options`` as for :meth:`prompt`)."""
        body = self._continue_body(check_run_options(run_options))
        return self._launch(BUSY_CONTINUE, body, block=True).result()

    def start_continue(self, **run_options: Any) -> Run:
        """Start a continue run (see :meth:`continue_`) and return its :class:`Run` at once."""
        return self._launch(BUSY_CONTINUE, self._continue_body(check_run_options(run_options)))

    def _prompt_here(
        self, input: Any, bind: Callable[[Run], None], **run_options: Any
    ) -> RunResult:
        """``prompt()`` with the run's loop on this thread rather than a worker of its own
        (a sub-agent's run, on its parent's tool thread); ``bind(run)`` gets the run first."""
        body = self._prompt_body(self._prompt_messages(input, None), check_run_options(run_options))
        return self._launch(BUSY_PROMPT, body, bind=bind, here=True).result()

    def _prompt_body(
        self, prompts: list[Any], overrides: dict[str, Any]
    ) -> Callable[[], Callable[[Run], list[Any]]]:
        def choose() -> Callable[[Run], list[Any]]:
            self._refuse_while_waiting()
            return lambda run: self._run_prompt(run, prompts, False, overrides)

        return choose

    def _refuse_while_waiting(self) -> None:
        """A prompt would land between calls waiting for approval and their results: refuse
        it (:class:`~agentkit.errors.ApprovalError`) until they are decided and resumed."""
        messages = self._state.messages
        if messages and role_of(messages[-1]) not in ("assistant", "system"):
            from .sessions.decisions import refuse_while_waiting

            refuse_while_waiting(messages)

    def _continue_body(self, overrides: dict[str, Any]) -> Callable[[], Callable[[Run], list[Any]]]:
        return lambda: self._choose_continue(overrides)

    def _choose_continue(self, overrides: dict[str, Any]) -> Callable[[Run], list[Any]]:
        """What a continue run does; called once the run has claimed the agent, so a busy agent
        never loses queued messages to it."""
        messages = self._state.messages
        if self._session_writer is not None and messages and role_of(messages[-1]) not in (
            "assistant", "system"
        ):  # calls may wait for approval: read the decisions recorded since (any process)
            self._session_writer.catch_up(messages)
            from .sessions.decisions import waiting_batch

            batch = waiting_batch(messages)
            if batch is not None and batch.inputs:  # heard after the batch: memory reorders
                self._session_writer.reorders()
        if not any(role_of(m) != "system" for m in messages):
            raise CannotContinueError("No messages to continue from")
        if role_of(last_said(messages)) == "assistant":
            steering = self._steering.drain()
            if steering:
                return lambda run: self._run_prompt(run, steering, True, overrides)
            follow_ups = self._follow_ups.drain()
            if follow_ups:
                return lambda run: self._run_prompt(run, follow_ups, False, overrides)
            raise CannotContinueError("Cannot continue from message role: assistant")
        return lambda run: self._run_continue(run, overrides)

    def stream(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> AgentRunStream:
        """Start a run and iterate its events as they happen (``run_options`` as for
        :meth:`prompt`); ``result()`` gives the :class:`~agentkit.RunResult` at the end and
        ``partial_output`` the typed output as it grows.

        Leaving the iteration early in any way (``break``, an exception, ``close()``, the end of
        a ``with`` block) aborts the run and waits for it to end.
        """
        prompts = self._prompt_messages(input, images)
        overrides = check_run_options(run_options)
        body = self._prompt_body(prompts, overrides)
        spec = overrides["output_type"] if "output_type" in overrides else self.output_type
        return AgentRunStream(
            self.subscribe, lambda bind: self._launch(BUSY_PROMPT, body, bind=bind), output=spec
        )

    def abort(self) -> None:
        """Abort the active run, if any; never raises."""
        run = self._active
        if run is not None:
            run.abort()

    def wait_for_idle(self, timeout: float | None = None) -> bool:
        """Block until no run is active (or ``timeout`` passes); return whether it is idle."""
        run = self._active
        return True if run is None else run.wait(timeout)

    def reset(self) -> None:
        """Collapse the transcript to its replayed system message; clear queues and errors."""
        if self._active is not None:
            raise AgentBusyError(BUSY_RESET)
        current = get_current_system_message(self._state.messages)
        self._state.messages = [current] if current is not None else []
        self._state.streaming_message = None
        self._state.pending_tool_calls = frozenset()
        self._state.error_message = None
        self.clear_all_queues()
        self._interrupts.take()  # an interrupt nobody heard is dropped with the queues

    def compact(self) -> CompactionRecord:
        """Compact the transcript now, with the agent's ``compaction`` settings (the defaults
        when it has none), and return the record that joined the transcript (and the session).

        Listeners see ``compaction_start``, the record's ``message_start``/``message_end`` and
        ``compaction_end``; ``abort()`` stops a summary request. Raises
        :class:`~agentkit.errors.CompactionError` (the transcript unchanged) when nothing can be
        dropped or the summary fails, :class:`AgentBusyError` during a run.
        """
        outcome: list[Any] = []
        result = self._launch(
            BUSY_COMPACT, lambda: lambda run: self._run_compaction(run, outcome), block=True
        ).result()
        if not outcome:  # a listener or the user's strategy raised: recorded as a failure
            raise CompactionError(
                f"the compaction did not finish: {result.error_message}"
            ) from result.error
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return cast("CompactionRecord", outcome[0])

    def _run_compaction(self, run: Run, outcome: list[Any]) -> list[Any]:
        from .compaction import Compaction, compact_now

        def emit(event: AgentEvent) -> None:
            self._process_event(run, event)

        loop, model = self._loop, self._state.model

        def request(messages: list[Any], max_tokens: int) -> Any:
            options = loop.stream_options.model_copy(update={"max_tokens": max_tokens})
            return request_once(
                model, self.stream_fn, options, messages, run.signal,
                get_api_key=loop.get_api_key, grace=loop.tool_abort_grace,
            )  # fmt: skip

        settings = self.compaction or Compaction()
        done = compact_now(self._state.messages, settings, model, request, emit)
        outcome.append(done)
        return [] if isinstance(done, BaseException) else [done]

    def close(self) -> None:
        """Abort any active run, wait for it to end, refuse further runs, then call the close
        callbacks (an MCP server attached to the agent stops here)."""
        self._closed = True
        self.abort()
        self.wait_for_idle()
        if self._session_writer is not None:
            self._session_writer.detach()  # its Session object may serve another agent now
        callbacks, self._close_callbacks = self._close_callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:
                agentkit_logger().exception("agentkit: a close callback raised")

    def add_close_callback(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` when :meth:`close` has ended the agent's last run."""
        self._close_callbacks.append(fn)

    async def aprompt(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> RunResult:
        """``prompt()`` for asyncio callers: see :func:`agentkit.aio.aprompt`."""
        from .aio import aprompt

        return await aprompt(self, input, images, **run_options)

    async def acontinue(self, **run_options: Any) -> RunResult:
        """``continue_()`` for asyncio callers: see :func:`agentkit.aio.acontinue`."""
        from .aio import acontinue

        return await acontinue(self, **run_options)

    def astream(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> AsyncGenerator[AgentEvent, None]:
        """``stream()`` for asyncio callers: see :func:`agentkit.aio.astream`."""
        from .aio import astream

        return astream(self, input, images, **run_options)

    def __enter__(self) -> Agent:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- run machinery -------------------------------------------------------------------------

    def _prompt_messages(self, input: Any, images: Sequence[ImageContent] | None) -> list[Any]:
        if isinstance(input, str):
            content: list[TextContent | ImageContent] = [TextContent(text=input)]
            content.extend(images or [])
            return [UserMessage(content=content)]
        if isinstance(input, (list, tuple)):
            return list(input)
        return [input]

    def _launch(
        self,
        busy_message: str,
        choose: Callable[[], Callable[[Run], list[Any]]],
        *,
        block: bool = False,
        bind: Callable[[Run], None] | None = None,
        here: bool = False,
    ) -> Run:
        """Claim the agent, pick the run's body (``choose``), run it on a worker thread.

        With ``block``, wait for the run's end. ``bind(run)`` hands the run over before its
        worker starts. Whatever interrupts this (a ``KeyboardInterrupt`` at any instant, or
        ``choose`` raising), a run whose worker has not begun is cancelled and the claim
        released; one that has begun is aborted and waited for when ``block`` (``prompt()``,
        ``continue_()``), and otherwise left running for ``agent.abort()`` (``start()``; the
        stream's own clean-up aborts it for ``stream()``). Then the exception propagates.
        With ``here``, the run's body runs on this thread instead (a sub-agent's tool call), as
        it does for a blocking call off the main thread (:func:`~agentkit.run.caller_hosts_run`).
        """
        run = Run(AbortController())
        here = here or (block and caller_hosts_run())
        try:
            with self._lock:
                if self._closed:
                    raise AgentError("Agent is closed")
                if self._active is not None:
                    raise AgentBusyError(busy_message)
                self._active = run
                self._state.is_streaming = True
                self._state.streaming_message = None
                self._state.error_message = None
            body = choose()
            if self._session_writer is not None:  # its events go to the session's run log
                from ._runlog_writer import record_run

                record_run(self, run, self._session_writer.session)
            # The run sees the caller's contextvars (an OpenTelemetry parent span, say).
            worker: threading.Thread | None = None
            if here:
                run._host()
            else:
                worker = threading.Thread(
                    target=contextvars.copy_context().run,
                    args=(self._work, run, body),
                    name="agentkit-agent",
                    daemon=True,
                )
                run._thread = worker
            if bind is not None:
                bind(run)
            if worker is None:
                contextvars.copy_context().run(self._work, run, body)
            else:
                start_worker(worker, lambda exc: self._abandon(run, stop=False, error=exc))
            if block:
                run.wait()
        except BaseException:
            self._abandon(run, stop=block)
            raise
        return run

    def _abandon(self, run: Run, stop: bool, error: BaseException | None = None) -> None:
        """Undo a start that was interrupted: release an unbegun run (ended with ``error``, a
        worker thread that could not start); abort and wait for a begun one if ``stop``."""
        if self._active is not run:
            return  # never claimed (busy or closed)
        if run._cancel_unbegun():
            self._release(run)
            run._settle([], error)
        elif stop:
            _wait_through_interrupts(run)

    def _release(self, run: Run) -> None:
        with self._lock:
            if self._active is run:
                self._state.is_streaming = False
                self._state.streaming_message = None
                self._state.pending_tool_calls = frozenset()
                self._active = None

    def _work(self, run: Run, body: Callable[[Run], list[Any]]) -> None:
        if not run._begin():
            return  # the starter gave up first and released the claim
        running_agent.set(self)  # this thread's context is the run's own copy
        messages: list[Any] = []
        error: BaseException | None = None
        try:
            messages = body(run)
            self._sync_session()
        except BaseException as exc:  # the failure becomes the transcript's last message
            try:
                self._sync_session()
                messages = as_run_result(self._handle_run_failure(run, exc))
                messages.error = exc if isinstance(exc, Exception) else None
            except BaseException as final:  # pragma: no cover - only if state handling breaks
                error = final
        finally:
            self._release(run)
            run._settle(messages, error)

    def _sync_session(self) -> None:
        """After a run: the transcript as the session stores it, when the two may differ
        (another writer's messages deferred into the run, a failed batch's stored results)."""
        if self._session_writer is not None:
            stored = self._session_writer.sync()
            if stored is not None:
                self._state.messages = stored

    def _poll_steering(self) -> list[Any]:
        """The run's steering poll: interrupt messages first (the rest waits for the next
        poll); else the messages other writers stored in the session during the turn (all of
        them), then the steering queue."""
        interrupts = self._interrupts.take()
        if interrupts:
            return interrupts
        deferred = [] if self._session_writer is None else self._session_writer.take_deferred()
        return deferred + self._steering.drain()

    def _config(self, run: Run, overrides: dict[str, Any]) -> tuple[AgentLoopConfig, StreamFn]:
        """The loop config for ``run``, starting now (the run's own options, ``overrides``, over
        the agent's, with the state and queues, and the policy chain), and its stream
        function (with failover, when the agent has fallback models). The run keeps its
        options (``run.options``)."""
        level = self._state.thinking_level
        config, envelope = merge_options(
            self._loop,
            self._envelope,
            overrides,
            model=self._state.model,
            reasoning=None if level == "off" else level,
            get_steering_messages=self._poll_steering,
            get_follow_up_messages=self._follow_ups.drain,
        )
        config.policies = run_policies(envelope, self._interrupts)
        run.options = RunOptions.of(config, envelope)
        return config, run_stream_fn(envelope, self.stream_fn)

    def _snapshot(self) -> AgentContext:
        return AgentContext(messages=list(self._state.messages), tools=list(self._state.tools))

    def _run_prompt(
        self,
        run: Run,
        prompts: list[Any],
        skip_first_steering: bool,
        overrides: dict[str, Any],
    ) -> list[Any]:
        config, stream_fn = self._config(run, overrides)
        if skip_first_steering:
            drain = self._poll_steering
            skipped = threading.Event()

            def steering_after_first() -> list[Any]:
                if not skipped.is_set():
                    skipped.set()
                    return []
                return drain()

            config.get_steering_messages = steering_after_first
        return run_agent_loop(
            prompts,
            self._snapshot(),
            config,
            lambda event: self._process_event(run, event),
            run.signal,
            stream_fn,
        )

    def _run_continue(self, run: Run, overrides: dict[str, Any]) -> list[Any]:
        config, stream_fn = self._config(run, overrides)
        return run_agent_loop_continue(
            self._snapshot(),
            config,
            lambda event: self._process_event(run, event),
            run.signal,
            stream_fn,
        )

    def _process_event(self, run: Run, event: AgentEvent) -> None:
        if self._active is not run:
            raise AgentError("Agent listener invoked outside active run")
        if self._session_writer is not None and isinstance(event, MessageEndEvent):
            self._session_writer.message_end(event.message)  # durable before it is announced
        elif self._session_writer is not None and isinstance(event, AgentEndEvent):
            self._record_ending(as_run_result(event.messages))
        elif self._session_writer is not None and isinstance(event, ToolExecutionEndEvent):
            self._session_writer.tool_end(event)  # its result too, before its end is announced
        self._state.reduce(event, run.signal.aborted)
        for listener in self._listeners:
            listener(event)

    def _record_ending(self, result: RunResult) -> None:
        """Keep how the run ended in the session when its last message does not say it (an
        abort during tools, a budget, a guardrail, a policy's reason), for every reader of the
        session; in memory too, so memory and store stay alike. No event announces it: a run's
        events are the loop's (SPEC 3.3)."""
        entry = run_end_entry(result)
        if entry is not None and self._session_writer is not None:
            self._session_writer.message_end(entry)
            self._state.messages.append(entry)

    def _handle_run_failure(self, run: Run, exc: BaseException) -> list[Any]:
        """Record a failed run as a failure assistant message and its events (SPEC 5.5).

        A listener that raises again here is logged, not raised: the caller of ``prompt()``
        never sees a listener's or hook's exception.
        """
        reason: Literal["error", "aborted"] = "aborted" if run.signal.aborted else "error"
        failure = failure_message(
            reason, exception_text(exc), self._state.model, content=[TextContent(text="")]
        )
        announce_failure(failure, self._state.reduce, self._listeners)
        if not isinstance(exc, Exception):  # KeyboardInterrupt/SystemExit inside a hook
            agentkit_logger().warning("agentkit: run stopped by %s", type(exc).__name__)
        return [failure]


def _as_message(message: Any) -> Any:
    return user_message(message) if isinstance(message, str) else message
