"""The loop's configuration: :class:`AgentLoopConfig`, pi's hooks and options with a contract
beside every field, plus the run's policies (:mod:`agentkit.policy`); the types of the stream
function and the hooks; and the process-wide default stream function.

The Agent's options (the envelope: budgets, typed output, compaction, approvals, failover), and
how they become a run's config and policies, are the shell's: :mod:`agentkit.options`.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._serialize import LLM_ROLES
from .abort import AbortSignal
from .errors import NoStreamFunctionError
from .event_stream import AssistantMessageEventStream
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    RequestContext,
    TurnContext,
    TurnUpdate,
)
from .policy import RunPolicy, check_policies
from .types import (
    Context,
    FieldsEqRepr,
    Model,
    StreamOptions,
    ThinkingLevel,
    as_stream_options,
    role_of,
)

if TYPE_CHECKING:  # imported by the application that passes one
    from concurrent.futures import Executor

StreamFn = Callable[[Model, Context, Any], AssistantMessageEventStream]
"""``stream_fn(model, context, options) -> AssistantMessageEventStream``: the seam to a model."""

ConvertToLlm = Callable[[list[Any]], list[Any]]
TransformContext = Callable[[list[Any], AbortSignal], list[Any]]
GetApiKey = Callable[[str], str | None]
GetMessages = Callable[[], list[Any]]
PrepareNextTurn = Callable[[TurnContext], TurnUpdate | dict[str, Any] | None]
PrepareRequest = Callable[[RequestContext, AbortSignal], TurnUpdate | dict[str, Any] | None]
FinishTurn = Callable[[TurnContext, AbortSignal], Any]
BeforeToolCall = Callable[
    [BeforeToolCallContext, AbortSignal], BeforeToolCallResult | dict[str, Any] | None
]
AfterToolCall = Callable[
    [AfterToolCallContext, AbortSignal], AfterToolCallResult | dict[str, Any] | None
]
ToolExecution = Literal["parallel", "sequential", "inline"]



def default_convert_to_llm(messages: list[Any]) -> list[Any]:
    """Keep the roles a model understands (system, user, assistant, tool_result); drop the rest."""
    return [m for m in messages if role_of(m) in LLM_ROLES]


# --- the checks, one per checked option ---------------------------------------------------------


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "convert_to_llm": lambda value: default_convert_to_llm if value is None else value,
    "stream_options": as_stream_options,
    "policies": check_policies,
}
"""The loop options whose value is checked (and put in its working form) when it is set."""


def check_option(name: str, value: Any) -> Any:
    """``value`` checked as loop option ``name`` is (a bad one raises); others pass."""
    check = _CHECKS.get(name)
    return value if check is None else check(value)


DEFAULT_TOOL_ABORT_GRACE = 2.0
"""Seconds an aborted call may take to stop before it is given up on (a run's default too)."""


@dataclass(eq=False, repr=False)
class AgentLoopConfig(FieldsEqRepr):
    """Every hook and option of a run (SPEC 2.7), each defined here once, with its contract.

    Every hook runs on the loop's thread (for an :class:`~agentkit.Agent`, its run's worker
    thread), never on a tool thread. A hook that raises fails the run (the failure becomes the
    run's last assistant message), except the two tool hooks, whose failures become error tool
    results. Construction checks the fields :func:`check_option` checks; set a field
    afterwards and ``dataclasses.replace``, which every run does, checks it again.
    """

    model: Model
    """The model of each request; ``prepare_request`` and ``prepare_next_turn`` may change it."""
    convert_to_llm: ConvertToLlm = default_convert_to_llm
    """``convert_to_llm(messages) -> list[Message]``: called before each request, after
    ``transform_context``, with the messages it returned; what the model sees. ``None`` sets the
    default, which drops the roles a model does not understand. Raising fails the run."""
    transform_context: TransformContext | None = None
    """``transform_context(messages, signal) -> list``: called first before each request, with the
    live transcript (prune or inject here), or its compacted view once it holds a compaction
    (:func:`~agentkit.transcript.compacted_view`); the list it returns goes to
    ``convert_to_llm``. Raising fails the run."""
    get_api_key: GetApiKey | None = None
    """``get_api_key(provider) -> str | None``: called before each request, after
    ``convert_to_llm`` (a short-lived token is fetched fresh each time); a falsy answer falls
    back to ``stream_options.api_key``. Raising fails the run."""
    get_steering_messages: GetMessages | None = None
    """``() -> list``: polled once when the loop starts, after every completed turn (unless
    ``finish_turn`` said end), and at the start of a turn when nothing else is pending; the
    messages are injected before the next request. The Agent fills it from its steering queue.
    Raising fails the run."""
    get_follow_up_messages: GetMessages | None = None
    """``() -> list``: polled only when the run would otherwise end (no tool call, no steering);
    messages returned start another turn. The Agent fills it from its follow-up queue. Raising
    fails the run."""
    prepare_next_turn: PrepareNextTurn | None = None
    """``prepare_next_turn(turn) -> TurnUpdate | None``: called at the start of every turn after
    the first, before ``turn_start``, with the last turn; may replace the context, model or
    thinking level and add messages (placed before pending steering). Raising fails the run."""
    prepare_request: PrepareRequest | None = None
    """``prepare_request(request, signal) -> TurnUpdate | None``: called before every request,
    the first included, after the pending messages' events; may replace the context, model or
    thinking level (``"off"`` clears it) for this and later requests. Raising fails the run."""
    finish_turn: FinishTurn | None = None
    """``finish_turn(turn, signal) -> "end" | "continue" | None``: called after the assistant
    message and its tool results, before ``turn_end``, on error and aborted turns too; ``"end"``
    stops the run, ``"continue"`` makes one more request. Raising fails the run."""
    before_tool_call: BeforeToolCall | None = None
    """``before_tool_call(ctx, signal) -> BeforeToolCallResult | None``: called in each call's
    preflight, after its arguments are validated (``ctx.args`` may be changed in place); may
    block the call (with a reason) or end the run after the batch. Raising makes the call an
    error result carrying the message."""
    after_tool_call: AfterToolCall | None = None
    """``after_tool_call(ctx, signal) -> AfterToolCallResult | None``: called after each call
    executes, before its ``tool_execution_end``; the fields it returns replace the result's.
    Raising replaces the result with an error result carrying the message."""
    tool_execution: ToolExecution = "parallel"
    """``"parallel"``: a batch's calls run at once (results still in source order);
    ``"sequential"``: one after another. A tool marked sequential makes its batch sequential.
    ``"inline"``: one after another on the run's own thread, with no tool thread and no hand-off
    (the cheapest under load), but a call that ignores an abort cannot be given up on: the run
    waits for it to return (see docs/threading.md)."""
    max_tool_workers: int = 32
    """How many tool calls of one parallel batch run at the same time."""
    tool_abort_grace: float = DEFAULT_TOOL_ABORT_GRACE
    """Seconds an aborted run waits for a stream or tools that ignore the signal before it gives
    up on them and ends."""
    reasoning: ThinkingLevel | None = None
    """The thinking level of each request (``None`` is off); the Agent fills it from its state."""
    stream_options: StreamOptions = field(default_factory=StreamOptions)
    """The request options (session id, token limit, headers, ...). Each request gets a copy with
    its ``api_key``, ``signal`` and ``reasoning``, and nothing else of this config: hooks never
    reach a provider. A dict is accepted."""
    deps: Any = None
    """The application's object for tools, handed to them through
    :class:`~agentkit.RunContext`."""
    tool_executor: Executor | None = None
    """The executor parallel tool batches run on; ``None`` = agentkit's own daemon threads,
    bounded by ``max_tool_workers``. A user's ``ThreadPoolExecutor`` is never shut down by
    agentkit, and ``concurrent.futures`` joins its threads at interpreter exit, so a tool that
    ignores an abort there keeps a script from ending."""
    policies: list[RunPolicy] = field(default_factory=list)
    """The run's policies (:mod:`agentkit.policy`), the first outermost: the whole chain, the
    built-ins included (an :class:`~agentkit.Agent` puts its own first: the interrupt lane,
    typed output, budgets, compaction, approvals). One policy or a list is accepted."""

    def __post_init__(self) -> None:
        # Construction checks every checked field; the loop copies its config with
        # dataclasses.replace, so whatever a run reads has been through the checks.
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name)))


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
