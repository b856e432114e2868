"""The :class:`Agent`: a thin, thread-safe state shell around the loop.

It owns the transcript, the steering and follow-up queues, the active run's abort controller and
the listeners. Each run executes the loop on a worker thread of its own; listeners are called on
that thread, one at a time, in event order, after the state was updated for the event.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import importlib
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

from .abort import ABORTED_TEXT, AbortController, AbortSignal
from .budgets import Budgets
from .errors import AgentBusyError, AgentError, CannotContinueError
from .events import (
    AgentEndEvent,
    AgentEvent,
    MessageEndEvent,
    MessageStartEvent,
    MessageUpdateEvent,
    TextDeltaEvent,
    ToolExecutionEndEvent,
    ToolExecutionStartEvent,
    TurnEndEvent,
)
from .loop import (
    AgentLoopConfig,
    StreamFn,
    default_convert_to_llm,
    get_default_stream_fn,
    run_agent_loop,
    run_agent_loop_continue,
)
from .output import OutputSpec
from .results import RunResult, as_run_result
from .transcript import (
    create_initial_system_message,
    failure_message,
    get_current_system_message,
    get_current_system_prompt,
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
    as_stream_options,
    placeholder_model,
    role_of,
    to_serialisable,
    to_tool_declaration,
)
from .waits import get_item, wait_event

if TYPE_CHECKING:
    import logging

    from .sessions import Session, SessionWriter


def _logger() -> logging.Logger:
    """The ``agentkit`` logger. Only failures are logged (a raising callback or listener), so
    ``logging`` is imported at the first one rather than with agentkit (a few ms of import)."""
    import logging

    return logging.getLogger("agentkit")


QueueMode = Literal["all", "one-at-a-time"]
Listener = Callable[[AgentEvent], Any]

BUSY_PROMPT = (
    "Agent is already processing a prompt. Use steer() or follow_up() to queue messages, "
    "or wait for completion."
)
BUSY_CONTINUE = "Agent is already processing. Wait for completion before continuing."
BUSY_RESET = "Agent is already processing. Wait for completion before resetting."

# Loop options the agent fills from its own state and queues when a run starts.
_STATE_FIELDS = frozenset(
    {"model", "reasoning", "get_steering_messages", "get_follow_up_messages", "stream_options"}
)
LOOP_OPTIONS = frozenset(
    f.name for f in dataclasses.fields(AgentLoopConfig) if f.name not in _STATE_FIELDS
)
"""The Agent options that are loop options: each is an ``AgentLoopConfig`` field, defined there."""


def _non_negative(name: str, value: int) -> int:
    """``value`` if it is an int of 0 or more; else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more; got {value!r}")
    return value


_CHECKED_OPTIONS: dict[str, Callable[[Any], Any]] = {
    "output_type": OutputSpec.of,
    "budgets": lambda value: None if value is None else Budgets.of(value),
    "output_retries": lambda value: _non_negative("output_retries", value),
}
"""Run-envelope options checked when they are set (a bad ``output_type`` or budget raises)."""


RUN_OPTIONS = frozenset({"output_type", "output_retries", "budgets", "deps", "tool_choice"})
"""What ``prompt()``, ``start()`` and ``stream()`` accept per run, overriding the agent's."""


@functools.cache
def request_options() -> frozenset[str]:
    """The Agent options that are request options: each is a ``StreamOptions`` field, defined
    there (``signal`` and ``reasoning`` come from the run)."""
    return frozenset(StreamOptions.model_fields) - {"signal", "reasoning"}


def resolve_model(model: Model | str | None) -> Model:
    """``model`` as a :class:`Model`: ``"provider:id"`` is looked up in the provider catalog,
    as the command line does; ``None`` is the placeholder model."""
    if model is None:
        return placeholder_model()
    if isinstance(model, Model):
        return model
    if not isinstance(model, str):
        raise TypeError(f"model must be a Model or 'provider:id', not {type(model).__name__}")
    # The catalog lives with the providers, which load only when a model is named this way.
    catalog = importlib.import_module(".providers.catalog", __package__)
    return cast(Model, catalog.model_from_spec(model))


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
        self._model: Model = model
        self.thinking_level: ThinkingLevel = thinking_level
        self._messages: list[Any] = []
        self._tools: list[AgentTool] = []
        self.is_streaming: bool = False
        self.streaming_message: Any = None
        self.pending_tool_calls: frozenset[str] = frozenset()
        self.error_message: str | None = None

    @property
    def model(self) -> Model:
        """The model the next run uses; a ``"provider:id"`` string is looked up in the catalog."""
        return self._model

    @model.setter
    def model(self, value: Model | str) -> None:
        self._model = resolve_model(value)

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
        # Guards _callbacks against add_done_callback racing the run's end, and the hand-over
        # between the worker beginning (_begun) and a starter that gives up first (_cancelled).
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Run], Any]] = []
        self._begun = False
        self._cancelled = False
        self._messages: RunResult = RunResult()
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

        Once the run has ended, the rest of ``timeout`` is spent letting its thread finish the
        done callbacks; a callback that takes longer does not hold the caller past ``timeout``.
        Raises :class:`AgentError` when called from the run's own thread (a listener or hook)
        before the run ended, since that wait could never end.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        thread = self._thread
        if thread is threading.current_thread() and not self._done.is_set():
            raise AgentError(
                "A run cannot wait for itself: this was called from the run's own thread "
                "(a listener or a hook)"
            )
        if not wait_event(self._done, timeout):
            return False
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(remaining)  # it only has its done callbacks left to run
        return True

    def result(self, timeout: float | None = None) -> RunResult:
        """The run's :class:`~agentkit.RunResult`: its new messages (a list) with its output,
        usage, stop reason and error; raises ``TimeoutError`` if it has not ended in time."""
        if not self.wait(timeout):
            raise TimeoutError("the run did not end in time")
        if self._error is not None:
            raise self._error
        return self._messages.copy_envelope(self._messages)

    def add_done_callback(self, fn: Callable[[Run], Any]) -> None:
        """Call ``fn(run)`` when the run ends (at once if it has); on the worker thread."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def _begin(self) -> bool:
        """Called first on the worker thread: whether the run is still wanted."""
        with self._lock:
            self._begun = not self._cancelled
            return self._begun

    def _cancel_unbegun(self) -> bool:
        """Called by a starter that gives up: cancel the run if its worker has not begun."""
        with self._lock:
            if self._begun:
                return False
            self._cancelled = True
            self._thread = None  # it may never start; nothing to join
            return True

    def _settle(self, messages: list[Any], error: BaseException | None) -> None:
        self._messages, self._error = as_run_result(messages), error
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn(self)
            except Exception:
                _logger().exception("agentkit: a run's done callback raised")


class Agent:
    """A stateful agent: a transcript, tools and a model, run by blocking calls.

    ``prompt()`` blocks until the run and its listeners are done; ``start()`` returns a
    :class:`Run` at once; ``stream()`` yields the run's events. ``steer()``, ``follow_up()`` and
    ``abort()`` are safe from any thread while a run is going.
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
        **options: Any,
    ) -> None:
        """``options`` are loop options (the fields of :class:`AgentLoopConfig`: the hooks,
        ``tool_execution``, ``max_tool_workers``, ``tool_abort_grace``, ...) and request options
        (the fields of :class:`StreamOptions`: ``session_id``, ``api_key``, ``max_tokens``,
        ``headers``, ...). Each is then a public attribute, read when a run starts; an unknown
        name raises ``TypeError``. ``model`` may be ``"provider:id"`` from the catalog.
        """
        object.__setattr__(self, "_loop", AgentLoopConfig(model=placeholder_model()))
        self.stream_fn: StreamFn = stream_fn or get_default_stream_fn()
        self.stream_options: StreamOptions = as_stream_options(stream_options)
        requests: dict[str, Any] = {}
        for name, value in options.items():
            if name in LOOP_OPTIONS:
                setattr(self, name, value)
            elif name in request_options():
                requests[name] = value
            else:
                raise TypeError(
                    f"Agent() got an unknown option {name!r}. Loop options: "
                    f"{', '.join(sorted(LOOP_OPTIONS))}; request options: "
                    f"{', '.join(sorted(request_options()))}"
                )
        if requests:
            self.stream_options = StreamOptions.model_validate(
                {**dict(self.stream_options), **requests}
            )

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
        self._close_callbacks: list[Callable[[], Any]] = []

    # --- options: each defined once, on AgentLoopConfig or StreamOptions ------------------------

    def __getattr__(self, name: str) -> Any:
        """A loop option (``agent.before_tool_call``) or request option (``agent.session_id``)."""
        if name in LOOP_OPTIONS:
            return getattr(self.__dict__["_loop"], name)
        if name in request_options() and "stream_options" in self.__dict__:
            return getattr(self.__dict__["stream_options"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in LOOP_OPTIONS:
            if name == "convert_to_llm" and value is None:
                value = default_convert_to_llm
            elif name in _CHECKED_OPTIONS:
                value = _CHECKED_OPTIONS[name](value)  # bad values fail here, not mid-run
            setattr(self._loop, name, value)
        elif name in request_options():  # validated as the constructor does: a bad value raises
            current = self.stream_options
            self.stream_options = StreamOptions.model_validate({**dict(current), name: value})
        elif name == "stream_options":
            object.__setattr__(self, name, as_stream_options(value))
        else:
            object.__setattr__(self, name, value)

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
        body = self._prompt_body(prompts, self._run_overrides(run_options))
        return self._launch(BUSY_PROMPT, body, block=True).result()

    def start(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> Run:
        """Start a run on ``input`` and return its :class:`Run` at once (``run_options`` as for
        :meth:`prompt`)."""
        prompts = self._prompt_messages(input, images)
        body = self._prompt_body(prompts, self._run_overrides(run_options))
        return self._launch(BUSY_PROMPT, body)

    def continue_(self) -> RunResult:
        """Continue from the transcript as it stands; block; return the run's result."""
        return self._launch(BUSY_CONTINUE, self._continue_body, block=True).result()

    def start_continue(self) -> Run:
        """Start a continue run (see :meth:`continue_`) and return its :class:`Run` at once."""
        return self._launch(BUSY_CONTINUE, self._continue_body)

    def _prompt_body(
        self, prompts: list[Any], overrides: dict[str, Any] | None = None
    ) -> Callable[[], Callable[[Run], list[Any]]]:
        return lambda: lambda run: self._run_prompt(run, prompts, False, overrides)

    def _run_overrides(self, run_options: dict[str, Any]) -> dict[str, Any]:
        """Check a run's options (an unknown name or a bad value raises before it starts)."""
        unknown = sorted(set(run_options) - RUN_OPTIONS)
        if unknown:
            raise TypeError(
                f"unknown run option(s) {', '.join(unknown)}; a run takes "
                f"{', '.join(sorted(RUN_OPTIONS))}"
            )
        return {
            name: _CHECKED_OPTIONS[name](value) if name in _CHECKED_OPTIONS else value
            for name, value in run_options.items()
        }

    def _continue_body(self) -> Callable[[Run], list[Any]]:
        """What a continue run does; called once the run has claimed the agent, so a busy agent
        never loses queued messages to it."""
        messages = self._state.messages
        if not any(role_of(m) != "system" for m in messages):
            raise CannotContinueError("No messages to continue from")
        if role_of(messages[-1]) == "assistant":
            steering = self._steering.drain()
            if steering:
                return lambda run: self._run_prompt(run, steering, True)
            follow_ups = self._follow_ups.drain()
            if follow_ups:
                return lambda run: self._run_prompt(run, follow_ups, False)
            raise CannotContinueError("Cannot continue from message role: assistant")
        return self._run_continue

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
        overrides = self._run_overrides(run_options)
        body = self._prompt_body(prompts, overrides)
        spec = overrides.get("output_type", self.output_type)
        return AgentRunStream(
            self, lambda bind: self._launch(BUSY_PROMPT, body, bind=bind), output=spec
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

    def close(self) -> None:
        """Abort any active run, wait for it to end, refuse further runs, then call the close
        callbacks (an MCP server attached to the agent stops here)."""
        self._closed = True
        self.abort()
        self.wait_for_idle()
        callbacks, self._close_callbacks = self._close_callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:
                _logger().exception("agentkit: a close callback raised")

    def add_close_callback(self, fn: Callable[[], Any]) -> None:
        """Call ``fn()`` when :meth:`close` has ended the agent's last run."""
        self._close_callbacks.append(fn)

    async def aprompt(self, input: Any, images: Sequence[ImageContent] | None = None) -> list[Any]:
        """``prompt()`` for asyncio callers: see :func:`agentkit.aio.aprompt`."""
        from .aio import aprompt

        return await aprompt(self, input, images)

    def astream(
        self, input: Any, images: Sequence[ImageContent] | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """``stream()`` for asyncio callers: see :func:`agentkit.aio.astream`."""
        from .aio import astream

        return astream(self, input, images)

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
    ) -> Run:
        """Claim the agent, pick the run's body (``choose``), run it on a worker thread.

        With ``block``, wait for the run's end. ``bind(run)`` hands the run over before its
        worker starts. Whatever interrupts this (a ``KeyboardInterrupt`` at any instant, or
        ``choose`` raising), a run whose worker has not begun is cancelled and the claim
        released; one that has begun is aborted and waited for when ``block`` (``prompt()``,
        ``continue_()``), and otherwise left running for ``agent.abort()`` (``start()``; the
        stream's own clean-up aborts it for ``stream()``). Then the exception propagates.
        """
        run = Run(AbortController())
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
            # The run sees the caller's contextvars (an OpenTelemetry parent span, say).
            run._thread = threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._work, run, body),
                name="agentkit-agent",
                daemon=True,
            )
            if bind is not None:
                bind(run)
            run._thread.start()
            if block:
                run.wait()
        except BaseException:
            self._abandon(run, stop=block)
            raise
        return run

    def _abandon(self, run: Run, stop: bool) -> None:
        """Undo a start that was interrupted: release an unbegun run; abort and wait for a
        begun one if ``stop``."""
        if self._active is not run:
            return  # never claimed (busy or closed)
        if run._cancel_unbegun():
            self._release(run)
            run._settle([], None)
        elif stop:
            run.abort()
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
        messages: list[Any] = []
        error: BaseException | None = None
        try:
            messages = body(run)
        except BaseException as exc:  # the failure becomes the transcript's last message
            try:
                messages = as_run_result(self._handle_run_failure(run, exc))
                messages.error = exc if isinstance(exc, Exception) else None
            except BaseException as final:  # pragma: no cover - only if state handling breaks
                error = final
        finally:
            self._release(run)
            run._settle(messages, error)

    def _config(self, overrides: dict[str, Any] | None = None) -> AgentLoopConfig:
        """The loop config for a run starting now: the loop options, the state and queues,
        and the run's own options (``overrides``)."""
        level = self._state.thinking_level
        loop_overrides = dict(overrides or {})
        options = self.stream_options
        if "tool_choice" in loop_overrides:
            options = options.model_copy(update={"tool_choice": loop_overrides.pop("tool_choice")})
        return dataclasses.replace(
            self._loop,
            model=self._state.model,
            reasoning=None if level == "off" else level,
            get_steering_messages=self._steering.drain,
            get_follow_up_messages=self._follow_ups.drain,
            stream_options=options,
            **loop_overrides,
        )

    def _snapshot(self) -> AgentContext:
        return AgentContext(messages=list(self._state.messages), tools=list(self._state.tools))

    def _run_prompt(
        self,
        run: Run,
        prompts: list[Any],
        skip_first_steering: bool,
        overrides: dict[str, Any] | None = None,
    ) -> list[Any]:
        config = self._config(overrides)
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

    def _reduce(self, event: AgentEvent, aborted: bool = False) -> None:
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
            if aborted and state.error_message is None:
                # Aborted during tools: the run ended after its batch without an aborted
                # assistant message, so record here why it ended.
                state.error_message = ABORTED_TEXT

    def _process_event(self, run: Run, event: AgentEvent) -> None:
        if self._active is not run:
            raise AgentError("Agent listener invoked outside active run")
        if self._session_writer is not None and isinstance(event, MessageEndEvent):
            self._session_writer.message_end(event.message)  # durable before it is announced
        self._reduce(event, run.signal.aborted)
        for listener in self._listeners:
            listener(event)

    def _handle_run_failure(self, run: Run, exc: BaseException) -> list[Any]:
        """Record a failed run as a failure assistant message and its events (SPEC 5.5).

        A listener that raises again here is logged, not raised: the caller of ``prompt()``
        never sees a listener's or hook's exception.
        """
        model = self._state.model
        try:
            text = to_serialisable(str(exc)) or type(exc).__name__
        except Exception:  # an exception whose __str__ fails still gets recorded
            text = type(exc).__name__
        reason: Literal["error", "aborted"] = "aborted" if run.signal.aborted else "error"
        failure = failure_message(reason, text, model, content=[TextContent(text="")])
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
                    _logger().exception("agentkit: a listener raised while reporting a failed run")
        if not isinstance(exc, Exception):  # KeyboardInterrupt/SystemExit inside a hook
            _logger().warning("agentkit: run stopped by %s", type(exc).__name__)
        return [failure]


def _wait_through_interrupts(run: Run) -> None:
    """Wait for an aborted run to end, even if more ``KeyboardInterrupt``s arrive."""
    while True:
        try:
            run.wait()
            return
        except KeyboardInterrupt:
            run.abort()


def _as_message(message: Any) -> Any:
    return user_message(message) if isinstance(message, str) else message


class _StreamEnd:
    """Queue token: the run is over."""


class _WithPartial:
    """Queue item: a message update and the typed output's partial object at that moment."""

    __slots__ = ("event", "partial")

    def __init__(self, event: Any, partial: Any) -> None:
        self.event, self.partial = event, partial


class _PartialObjects:
    """A stream's listener with an ``output_type``: each text delta comes with the partial
    object of the reply's text so far (read from the deltas, in event order, since the
    streaming message itself may be further along by the time the event is yielded)."""

    def __init__(self, events: queue.SimpleQueue[Any], output: OutputSpec) -> None:
        self._events, self._output, self._text = events, output, ""

    def __call__(self, event: Any) -> None:
        if isinstance(event, MessageStartEvent):
            self._text = ""
        elif isinstance(event, MessageUpdateEvent) and isinstance(
            event.assistant_message_event, TextDeltaEvent
        ):
            self._text += event.assistant_message_event.delta
            self._events.put(_WithPartial(event, self._output.partial(self._text)))
            return
        self._events.put(event)


_STREAM_END = _StreamEnd()


class AgentRunStream:
    """The events of one run as an iterator; see :meth:`Agent.stream`.

    ``for event in stream`` iterates a generator that closes the stream when the loop is left
    in any way (``break`` included), so leaving early aborts the run and waits for it, with no
    reliance on this object being garbage collected.
    """

    def __init__(
        self,
        agent: Agent,
        launch: Callable[[Callable[[Run], None]], Run],
        output: OutputSpec | None = None,
    ) -> None:
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._finished = False
        self._run: Run | None = None
        self._output = output
        self.partial_output: Any = None
        """With an ``output_type``: the object so far in the reply being streamed (not yet
        validated; a dict for a model type), updated as each event is yielded."""
        put: Listener = self._events.put
        if output is not None:  # the text is read when the event happens, not when yielded
            put = _PartialObjects(self._events, output)
        self._unsubscribe = agent.subscribe(put)
        try:
            launch(self._bind)
        except BaseException:
            if self._run is not None and not self._run.done():
                self.close()  # interrupted after the run started: abort it and wait
            self._finished = True
            self._unsubscribe()
            raise

    def _bind(self, run: Run) -> None:
        self._run = run
        events = self._events  # no reference back to self: dropping the stream must free it
        run.add_done_callback(lambda _run: events.put(_STREAM_END))

    @property
    def run(self) -> Run:
        """The run whose events this yields."""
        assert self._run is not None
        return self._run

    def __iter__(self) -> Iterator[AgentEvent]:
        try:
            while not self._finished:
                item = self._next_item()
                if item is _STREAM_END:
                    self._finish()
                    return
                yield cast(AgentEvent, self._track(item))
        finally:
            self.close()  # left early (break, an exception) or finished: either way, ended

    def __next__(self) -> AgentEvent:
        if self._finished:
            raise StopIteration
        item = self._next_item()
        if item is _STREAM_END:
            self._finish()
            raise StopIteration
        return cast(AgentEvent, self._track(item))

    def _track(self, item: Any) -> Any:
        """The event of a queue item; a partial object that came with it becomes
        :attr:`partial_output`."""
        if isinstance(item, _WithPartial):
            if item.partial is not None:
                self.partial_output = item.partial
            return item.event
        return item

    def _next_item(self) -> Any:
        try:
            return get_item(lambda timeout: self._events.get(timeout=timeout))
        except BaseException:
            self.close()
            raise

    def result(self) -> RunResult:
        """The run's :class:`~agentkit.RunResult` (waits for the run)."""
        return self.run.result()

    def close(self) -> None:
        """Abort the run if it is still going and wait for it to end."""
        if self._finished:
            return
        self.run.abort()
        _wait_through_interrupts(self.run)
        self._finish()

    def _finish(self) -> None:
        self._finished = True
        self._unsubscribe()
        self.run.wait()

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
        # A last resort for a stream dropped without being iterated to its end or closed.
        if getattr(self, "_finished", True) or getattr(self, "_run", None) is None:
            return
        run = self.run
        if run._thread is threading.current_thread():
            run.abort()
        else:
            self.close()
