"""The :class:`Agent`: a thin, thread-safe state shell around the loop.

It owns the transcript, the steering and follow-up queues, the active run's abort controller and
the listeners. Each run executes the loop on a worker thread of its own; listeners are called on
that thread, one at a time, in event order, after the state was updated for the event.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from .abort import AbortController, AbortSignal
from .errors import AgentBusyError, AgentError, CannotContinueError
from .events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    TurnEndEvent,
)
from .hooks import TurnContext, TurnUpdate
from .loop import (
    AgentContext,
    AgentLoopConfig,
    StreamFn,
    default_convert_to_llm,
    get_default_stream_fn,
    run_agent_loop,
    run_agent_loop_continue,
)
from .tools import AgentTool, to_tool_declaration
from .transcript import (
    create_initial_system_message,
    get_current_system_message,
    get_current_system_prompt,
)
from .types import (
    AssistantMessage,
    ImageContent,
    Model,
    TextContent,
    ThinkingLevel,
    UserMessage,
    placeholder_model,
    role_of,
)

if TYPE_CHECKING:
    from .sessions import Session, SessionWriter

logger = logging.getLogger("agentkit")

QueueMode = Literal["all", "one-at-a-time"]
Listener = Callable[[AgentEvent], Any]

BUSY_PROMPT = (
    "Agent is already processing a prompt. Use steer() or follow_up() to queue messages, "
    "or wait for completion."
)
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
BUSY_RESET = "Agent is already processing. Wait for completion before resetting."


class PendingMessageQueue:
    """Messages waiting to be injected into a run; ``mode`` says how many a poll takes."""

    def __init__(self, mode: QueueMode = "one-at-a-time") -> None:
        self.mode: QueueMode = mode
        # Guards _items: steer()/follow_up() come from any thread, the loop drains on its own.
        self._lock = threading.Lock()
        self._items: deque[Any] = deque()

    def enqueue(self, message: Any) -> None:
        """Add a message at the end."""
        with self._lock:
            self._items.append(message)

    def peek(self) -> list[Any]:
        """What the next :meth:`drain` would return, without taking it."""
        with self._lock:
            return self._peek_locked()

    def _peek_locked(self) -> list[Any]:
        if self.mode == "all":
            return list(self._items)
        return [self._items[0]] if self._items else []

    def drain(self) -> list[Any]:
        """Take every message (``"all"``) or the first one (``"one-at-a-time"``)."""
        with self._lock:
            taken = self._peek_locked()
            for _ in taken:
                self._items.popleft()
            return taken

    def clear(self) -> None:
        """Drop every waiting message."""
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class AgentState:
    """The agent's live state. ``messages`` and ``tools`` setters store a shallow copy;
    ``system_prompt`` is read-only, replayed from the transcript's system messages."""

    def __init__(self, model: Model, thinking_level: ThinkingLevel) -> None:
        self.model: Model = model
        self.thinking_level: ThinkingLevel = thinking_level
        self._messages: list[Any] = []
        self._tools: list[AgentTool] = []
        self.is_streaming: bool = False
        self.streaming_message: Any = None
        self.pending_tool_calls: frozenset[str] = frozenset()
        self.error_message: str | None = None

    @property
    def messages(self) -> list[Any]:
        """The transcript (the live list)."""
        return self._messages

    @messages.setter
    def messages(self, value: Sequence[Any]) -> None:
        self._messages = list(value)

    @property
    def tools(self) -> list[AgentTool]:
        """The executable tools (the live list); changes apply from the next run."""
        return self._tools

    @tools.setter
    def tools(self, value: Sequence[AgentTool]) -> None:
        self._tools = list(value)

    @property
    def system_prompt(self) -> str:
        """The prompt the transcript's system messages amount to."""
        return get_current_system_prompt(self._messages)


class Run:
    """One run of an :class:`Agent`, returned by :meth:`Agent.start`."""

    def __init__(self, controller: AbortController) -> None:
        self._controller = controller
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        # Guards _callbacks against add_done_callback racing the run's end.
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Run], Any]] = []
        self._messages: list[Any] = []
        self._error: BaseException | None = None

    @property
    def signal(self) -> AbortSignal:
        """The run's abort signal."""
        return self._controller.signal

    def abort(self) -> None:
        """Ask the run to stop; safe from any thread, does nothing once it is done."""
        self._controller.abort()

    def done(self) -> bool:
        """Whether the run has ended (listeners included)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the run ends or ``timeout`` seconds pass; return whether it ended.

        Raises :class:`AgentError` when called from the run's own thread (a listener or hook)
        before the run ended, since that wait could never end.
        """
        thread = self._thread
        if thread is threading.current_thread() and not self._done.is_set():
            raise AgentError(
                "A run cannot wait for itself: this was called from the run's own thread "
                "(a listener or a hook)"
            )
        if not self._done.wait(timeout):
            return False
        if thread is not None and thread is not threading.current_thread():
            thread.join()  # it only has its done callbacks left to run
        return True

    def result(self, timeout: float | None = None) -> list[Any]:
        """The run's new messages; raises ``TimeoutError`` if it has not ended in time."""
        if not self.wait(timeout):
            raise TimeoutError("the run did not end in time")
        if self._error is not None:
            raise self._error
        return list(self._messages)

    def add_done_callback(self, fn: Callable[[Run], Any]) -> None:
        """Call ``fn(run)`` when the run ends (at once if it has); on the worker thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def _settle(self, messages: list[Any], error: BaseException | None) -> None:
        self._messages, self._error = messages, error
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                logger.exception("agentkit: a run's done callback raised")


class Agent:
    """A stateful agent: a transcript, tools and a model, run by blocking calls.

    ``prompt()`` blocks until the run and its listeners are done; ``start()`` returns a
    :class:`Run` at once; ``stream()`` yields the run's events. ``steer()``, ``follow_up()`` and
    ``abort()`` are safe from any thread while a run is going.
    """

    def __init__(
        self,
        *,
        model: Model | None = None,
        system_prompt: str = "",
        tools: Sequence[AgentTool] | None = None,
        messages: Sequence[Any] | None = None,
        thinking_level: ThinkingLevel = "off",
        stream_fn: StreamFn | None = None,
        convert_to_llm: Callable[[list[Any]], list[Any]] | None = None,
        transform_context: Callable[[list[Any], AbortSignal], list[Any]] | None = None,
        get_api_key: Callable[[str], str | None] | None = None,
        before_tool_call: Callable[..., Any] | None = None,
        after_tool_call: Callable[..., Any] | None = None,
        prepare_next_turn: Callable[[TurnContext], TurnUpdate | dict[str, Any] | None]
        | None = None,
        prepare_request: Callable[..., Any] | None = None,
        finish_turn: Callable[..., Any] | None = None,
        steering_mode: QueueMode = "one-at-a-time",
        follow_up_mode: QueueMode = "one-at-a-time",
        tool_execution: Literal["parallel", "sequential"] = "parallel",
        max_tool_workers: int = 32,
        session_id: str | None = None,
        thinking_budgets: dict[str, int] | None = None,
        api_key: str | None = None,
        max_retry_delay_ms: int | None = None,
        transport: str = "auto",
        on_payload: Callable[..., Any] | None = None,
        tool_abort_grace: float = 2.0,
        max_tokens: int | None = None,
        temperature: float | None = None,
        max_retries: int | None = None,
        timeout: float | tuple[float, float] | None = None,
        headers: dict[str, str] | None = None,
        session: Session | None = None,
    ) -> None:
        self.stream_fn: StreamFn = stream_fn or get_default_stream_fn()
        self.convert_to_llm = convert_to_llm or default_convert_to_llm
        self.transform_context = transform_context
        self.get_api_key = get_api_key
        self.before_tool_call = before_tool_call
        self.after_tool_call = after_tool_call
        self.prepare_next_turn = prepare_next_turn
        self.prepare_request = prepare_request
        self.finish_turn = finish_turn
        self.tool_execution: Literal["parallel", "sequential"] = tool_execution
        self.max_tool_workers = max_tool_workers
        self.session_id = session_id
        self.thinking_budgets = thinking_budgets
        self.api_key = api_key
        self.max_retry_delay_ms = max_retry_delay_ms
        self.transport = transport
        self.on_payload = on_payload
        self.tool_abort_grace = tool_abort_grace
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.max_retries = max_retries
        self.timeout = timeout
        self.headers = headers

        self._state = AgentState(model or placeholder_model(), thinking_level)
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
            self._session_writer = session.attach(initial, self._state.tools)
            initial = self._session_writer.messages
        self._state.messages = initial

        self._steering = PendingMessageQueue(steering_mode)
        self._follow_ups = PendingMessageQueue(follow_up_mode)
        # Guards _active and _listeners: runs start, and listeners (un)subscribe, from any thread.
        self._lock = threading.Lock()
        self._listeners: tuple[Listener, ...] = ()
        self._active: Run | None = None
        self._closed = False

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

    def prompt(self, input: Any, images: Sequence[ImageContent] | None = None) -> list[Any]:
        """Run the agent on ``input`` and block until it is done; return the new messages.

        ``input`` is a string, a message or a list of messages. A ``KeyboardInterrupt`` (or any
        exception a signal handler raises) while waiting aborts the run, waits for it to wind
        down, then propagates.
        """
        return self._wait(self.start(input, images))

    def start(self, input: Any, images: Sequence[ImageContent] | None = None) -> Run:
        """Start a run on ``input`` and return its :class:`Run` at once."""
        prompts = self._prompt_messages(input, images)
        return self._launch(BUSY_PROMPT, lambda run: self._run_prompt(run, prompts, False))

    def continue_(self) -> list[Any]:
        """Continue from the transcript as it stands; block; return the new messages."""
        return self._wait(self.start_continue())

    def start_continue(self) -> Run:
        """Start a continue run (see :meth:`continue_`) and return its :class:`Run` at once."""
        if self._active is not None:
            raise AgentBusyError(BUSY_CONTINUE)
        messages = self._state.messages
        if not any(role_of(m) != "system" for m in messages):
            raise CannotContinueError("No messages to continue from")
        if role_of(messages[-1]) == "assistant":
            steering = self._steering.drain()
            if steering:
                return self._launch(
                    BUSY_CONTINUE, lambda run: self._run_prompt(run, steering, True)
                )
            follow_ups = self._follow_ups.drain()
            if follow_ups:
                return self._launch(
                    BUSY_CONTINUE, lambda run: self._run_prompt(run, follow_ups, False)
                )
            raise CannotContinueError("Cannot continue from message role: assistant")
        return self._launch(BUSY_CONTINUE, self._run_continue)

    def stream(self, input: Any, images: Sequence[ImageContent] | None = None) -> AgentRunStream:
        """Start a run and iterate its events as they happen.

        Leaving the iteration early in any way (``break``, an exception, ``close()``, the end of
        a ``with`` block) aborts the run and waits for it to end.
        """
        return AgentRunStream(self, lambda: self.start(input, images))

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

    def close(self) -> None:
        """Abort any active run, wait for it to end, and refuse further runs."""
        self._closed = True
        self.abort()
        self.wait_for_idle()

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

    def _launch(self, busy_message: str, body: Callable[[Run], list[Any]]) -> Run:
        """Start a run: claim the agent (synchronously), then run ``body`` on a worker thread."""
        run = Run(AbortController())
        with self._lock:
            if self._closed:
                raise AgentError("Agent is closed")
            if self._active is not None:
                raise AgentBusyError(busy_message)
            self._active = run
            self._state.is_streaming = True
            self._state.streaming_message = None
            self._state.error_message = None
        thread = threading.Thread(
            target=self._work, args=(run, body), name="agentkit-agent", daemon=True
        )
        run._thread = thread
        thread.start()
        return run

    def _work(self, run: Run, body: Callable[[Run], list[Any]]) -> None:
        messages: list[Any] = []
        error: BaseException | None = None
        try:
            messages = body(run)
        except BaseException as exc:  # the failure becomes the transcript's last message
            try:
                messages = self._handle_run_failure(run, exc)
            except BaseException as final:  # pragma: no cover - only if state handling breaks
                error = final
        finally:
            with self._lock:
                self._state.is_streaming = False
                self._state.streaming_message = None
                self._state.pending_tool_calls = frozenset()
                self._active = None
            run._settle(messages, error)

    def _config(self) -> AgentLoopConfig:
        """The loop config, built from the agent's current options when a run starts."""
        return AgentLoopConfig(
            model=self._state.model,
            convert_to_llm=self.convert_to_llm,
            transform_context=self.transform_context,
            get_api_key=self.get_api_key,
            get_steering_messages=self._steering.drain,
            get_follow_up_messages=self._follow_ups.drain,
            prepare_next_turn=self.prepare_next_turn,
            prepare_request=self.prepare_request,
            finish_turn=self.finish_turn,
            before_tool_call=self.before_tool_call,
            after_tool_call=self.after_tool_call,
            tool_execution=self.tool_execution,
            max_tool_workers=self.max_tool_workers,
            tool_abort_grace=self.tool_abort_grace,
            api_key=self.api_key,
            reasoning=None if self._state.thinking_level == "off" else self._state.thinking_level,
            session_id=self.session_id,
            thinking_budgets=self.thinking_budgets,
            max_retry_delay_ms=self.max_retry_delay_ms,
            transport=self.transport,
            on_payload=self.on_payload,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            max_retries=self.max_retries,
            timeout=self.timeout,
            headers=self.headers,
        )

    def _snapshot(self) -> AgentContext:
        return AgentContext(messages=list(self._state.messages), tools=list(self._state.tools))

    def _run_prompt(self, run: Run, prompts: list[Any], skip_first_steering: bool) -> list[Any]:
        config = self._config()
        if skip_first_steering:
            drain = self._steering.drain
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
            self.stream_fn,
        )

    def _run_continue(self, run: Run) -> list[Any]:
        return run_agent_loop_continue(
            self._snapshot(),
            self._config(),
            lambda event: self._process_event(run, event),
            run.signal,
            self.stream_fn,
        )

    def _reduce(self, event: AgentEvent) -> None:
        """Update the state for ``event`` (SPEC 5.6), before any listener sees it."""
        state = self._state
        if isinstance(event, (MessageStartEvent, MessageUpdateEvent)):
            state.streaming_message = event.message
        elif isinstance(event, MessageEndEvent):
            state.streaming_message = None
            state.messages.append(event.message)
        elif isinstance(event, ToolExecutionStartEvent):
            state.pending_tool_calls = state.pending_tool_calls | {event.tool_call_id}
        elif isinstance(event, ToolExecutionEndEvent):
            state.pending_tool_calls = state.pending_tool_calls - {event.tool_call_id}
        elif isinstance(event, TurnEndEvent):
            message = event.message
            if role_of(message) == "assistant" and getattr(message, "error_message", None):
                state.error_message = message.error_message
        elif isinstance(event, AgentEndEvent):
            state.streaming_message = None

    def _process_event(self, run: Run, event: AgentEvent) -> None:
        if self._active is not run:
            raise AgentError("Agent listener invoked outside active run")
        if self._session_writer is not None and isinstance(event, MessageEndEvent):
            self._session_writer.message_end(event.message)  # durable before it is announced
        self._reduce(event)
        for listener in self._listeners:
            listener(event)

    def _handle_run_failure(self, run: Run, exc: BaseException) -> list[Any]:
        """Record a failed run as a failure assistant message and its events (SPEC 5.5).

        A listener that raises again here is logged, not raised: the caller of ``prompt()``
        never sees a listener's or hook's exception.
        """
        model = self._state.model
        text = str(exc) or type(exc).__name__
        failure = AssistantMessage(
            content=[TextContent(text="")],
            api=model.api,
            provider=model.provider,
            model=model.id,
            stop_reason="aborted" if run.signal.aborted else "error",
            error_message=text,
        )
        events: list[AgentEvent] = [
            MessageStartEvent(failure),
            MessageEndEvent(failure),
            TurnEndEvent(failure, []),
            AgentEndEvent([failure]),
        ]
        for event in events:
            self._reduce(event)
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:
                    logger.exception("agentkit: a listener raised while reporting a failed run")
        if not isinstance(exc, Exception):  # KeyboardInterrupt/SystemExit inside a hook
            logger.warning("agentkit: run stopped by %s", type(exc).__name__)
        return [failure]

    def _wait(self, run: Run) -> list[Any]:
        try:
            run.wait()
        except BaseException:  # Ctrl-C, or what a signal handler raises (Celery's time limits)
            run.abort()
            _wait_through_interrupts(run)
            raise
        return run.result()


def _wait_through_interrupts(run: Run) -> None:
    """Wait for an aborted run to end, even if more ``KeyboardInterrupt``s arrive."""
    while True:
        try:
            run.wait()
            return
        except KeyboardInterrupt:
            run.abort()


def _as_message(message: Any) -> Any:
    return UserMessage(content=[TextContent(text=message)]) if isinstance(message, str) else message


class _StreamEnd:
    """Queue token: the run is over."""


_STREAM_END = _StreamEnd()


class AgentRunStream:
    """The events of one run as an iterator; see :meth:`Agent.stream`."""

    def __init__(self, agent: Agent, start: Callable[[], Run]) -> None:
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._unsubscribe = agent.subscribe(self._events.put)
        try:
            self._run = start()
        except BaseException:
            self._unsubscribe()
            raise
        events = self._events  # no reference back to self: dropping the stream must free it
        self._run.add_done_callback(lambda _run: events.put(_STREAM_END))
        self._finished = False

    @property
    def run(self) -> Run:
        """The run whose events this yields."""
        return self._run

    def __iter__(self) -> Iterator[AgentEvent]:
        return self

    def __next__(self) -> AgentEvent:
        if self._finished:
            raise StopIteration
        try:
            item = self._events.get()
        except BaseException:
            self.close()
            raise
        if item is _STREAM_END:
            self._finish()
            raise StopIteration
        return item

    def result(self) -> list[Any]:
        """The run's new messages (waits for the run)."""
        return self._run.result()

    def close(self) -> None:
        """Abort the run if it is still going and wait for it to end."""
        if self._finished:
            return
        self._run.abort()
        _wait_through_interrupts(self._run)
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        self._unsubscribe()
        self._run.wait()

    def __enter__(self) -> AgentRunStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_finished", True):
            return
        if self._run._thread is threading.current_thread():
            self._run.abort()
        else:
            self.close()
