"""The run's configuration: :class:`AgentLoopConfig`, with a contract beside every field, and
the Agent's options, each declared once and checked once, where it is set.

A run's options come in three layers, the nearer winning: a run's own options (``prompt(...,
output_type=...)``), the agent's options (``Agent(budgets=...)``, ``agent.max_tokens = 64``),
and the defaults written on the fields of :class:`AgentLoopConfig` and
:class:`~agentkit.StreamOptions`. :func:`merge_options` lays them over one another, as
requests' ``merge_setting`` lays a request's settings over its session's.

An option is checked where it is set, by :func:`check_option`: an ``output_type`` becomes an
:class:`~agentkit.output.OutputSpec` and a budgets dict :class:`~agentkit.Budgets`, so a bad
value fails where it is given (an Agent's attribute, a run's keyword, an ``AgentLoopConfig``'s
constructor) and the loop trusts what it reads.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ._serialize import LLM_ROLES
from .abort import AbortSignal
from .budgets import Budgets
from .compaction import Compaction
from .errors import NoStreamFunctionError
from .event_stream import AssistantMessageEventStream
from .failover import DEFAULT_COOLDOWN, as_fallback_models
from .hooks import (
    AfterToolCallContext,
    AfterToolCallResult,
    BeforeToolCallContext,
    BeforeToolCallResult,
    RequestContext,
    TurnContext,
    TurnUpdate,
)
from .output import DEFAULT_OUTPUT_RETRIES, OutputSpec
from .types import (
    AnthropicOptions,
    Context,
    FieldsEqRepr,
    GoogleOptions,
    Model,
    OpenAIOptions,
    StreamOptions,
    ThinkingLevel,
    ToolChoice,
    as_stream_options,
    role_of,
)

if TYPE_CHECKING:  # both are imported by the application that passes one
    from concurrent.futures import Executor

    from .approvals import Approvals
    from .interrupts import InterruptLane

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


def _non_negative(name: str, value: int) -> int:
    """``value`` if it is an int of 0 or more; else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more; got {value!r}")
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "convert_to_llm": lambda value: default_convert_to_llm if value is None else value,
    "output_type": OutputSpec.of,
    "output_retries": lambda value: _non_negative("output_retries", value),
    "budgets": lambda value: None if value is None else Budgets.of(value),
    "stream_options": as_stream_options,
    "fallback_models": as_fallback_models,
    "compaction": Compaction.of,
}
"""The options whose value is checked (and put in its working form) when it is set."""


def check_option(name: str, value: Any) -> Any:
    """``value`` checked as option ``name`` is (a bad one raises); unchecked options pass."""
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
    budgets: Budgets | None = None
    """The run's limits (turns, tool calls, tokens, cost, time); ``None`` is the default turn
    cap. A dict of :class:`~agentkit.Budgets` fields is accepted and made one."""
    output_type: Any = None
    """The type the final answer must validate as; set as a type, kept as its
    :class:`~agentkit.output.OutputSpec`, which carries ``output_retries`` (a type that has no
    JSON schema raises ``TypeError``)."""
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    """How many times an answer that fails validation is sent back before the run fails."""
    deps: Any = None
    """The application's object for tools, handed to them through
    :class:`~agentkit.RunContext`."""
    approvals: Approvals | None = None
    """The :class:`~agentkit.Approvals` broker asked about tools that need a decision; a tool
    that needs approval with no broker gets an error result."""
    tool_executor: Executor | None = None
    """The executor parallel tool batches run on; ``None`` = agentkit's own daemon threads,
    bounded by ``max_tool_workers``. A user's ``ThreadPoolExecutor`` is never shut down by
    agentkit, and ``concurrent.futures`` joins its threads at interpreter exit, so a tool that
    ignores an abort there keeps a script from ending."""
    fallback_models: list[Model] = field(default_factory=list)
    """Models that answer, in order, when ``model`` cannot (refused, 5xx or 429 after the
    retries, overloaded), before the first event of its response (:mod:`agentkit.failover`).
    ``"provider:id"`` names are looked up in the catalog."""
    failover_cooldown: float = DEFAULT_COOLDOWN
    """Seconds a model that failed is skipped, by every agent of the process, before it is
    tried again."""
    interrupts: InterruptLane | None = None
    """The lane ``agent.interrupt()`` feeds (:mod:`agentkit.interrupts`): each request and tool
    batch runs under a signal it can abort without ending the run. The Agent fills it; the
    run's steering getter is to take the lane's messages first."""
    compaction: Compaction | None = None
    """When and how the transcript is compacted to fit the context window
    (:class:`~agentkit.compaction.Compaction`; ``"summarize"``, ``"trim"``, a function or
    ``True`` are accepted); ``None``: never, and a context overflow ends the run."""

    def __post_init__(self) -> None:
        # Construction checks every checked field; the loop copies its config with
        # dataclasses.replace, so whatever a run reads has been through the checks.
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name)))
        settle_output_retries(self)


def settle_output_retries(config: AgentLoopConfig) -> None:
    """Make ``config.output_type`` carry ``config.output_retries``: the loop reads one count."""
    if config.output_type is not None:
        config.output_type = OutputSpec.of(config.output_type, retries=config.output_retries)


_FIELDS = tuple(f.name for f in dataclasses.fields(AgentLoopConfig))

# --- the Agent's options ------------------------------------------------------------------------

_STATE_FIELDS = frozenset(
    {"model", "reasoning", "get_steering_messages", "get_follow_up_messages", "stream_options"}
    | {"interrupts"}
)
LOOP_OPTIONS = frozenset(name for name in _FIELDS if name not in _STATE_FIELDS)
"""The Agent options that are loop options: each an ``AgentLoopConfig`` field (the other fields
the agent fills from its state and queues when a run starts)."""

REQUEST_OPTIONS = frozenset(
    {
        "api_key",
        "session_id",
        "headers",
        "max_tokens",
        "temperature",
        "max_retries",
        "max_retry_delay_ms",
        "retry_base_delay_ms",
        "timeout",
        "on_payload",
        "thinking_budgets",
        "tool_choice",
        "anthropic",
        "openai",
        "google",
        "rate_limiter",
    }
)
"""The Agent options that are request options: each a ``StreamOptions`` field (``signal`` and
``reasoning`` come from the run)."""

RUN_OPTIONS = frozenset({"output_type", "output_retries", "budgets", "deps", "tool_choice"})
"""What ``prompt()``, ``start()``, ``stream()`` and their asyncio twins accept per run."""


def check_run_options(run_options: Mapping[str, Any]) -> dict[str, Any]:
    """A run's options, checked (an unknown name or a bad value raises before the run starts)."""
    unknown = sorted(set(run_options) - RUN_OPTIONS)
    if unknown:
        raise TypeError(
            f"unknown run option(s) {', '.join(unknown)}; a run takes "
            f"{', '.join(sorted(RUN_OPTIONS))}"
        )
    return {name: check_option(name, value) for name, value in run_options.items()}


def merge_options(
    config: AgentLoopConfig, run_options: Mapping[str, Any], **state: Any
) -> AgentLoopConfig:
    """The config of one run: ``run_options`` over the agent's options (``config``, which lies
    over the fields' defaults), with the fields the agent fills from its state (``state``).

    A run option that is given wins, ``None`` included (``output_type=None`` runs without one);
    ``config`` is not changed. ``tool_choice`` is a request option, laid over
    ``config.stream_options``.
    """
    loop = {name: value for name, value in run_options.items() if name not in REQUEST_OPTIONS}
    request = {name: value for name, value in run_options.items() if name in REQUEST_OPTIONS}
    stream_options = state.pop("stream_options", config.stream_options)
    if request:
        stream_options = stream_options.model_copy(update=request)
    return dataclasses.replace(config, **state, **loop, stream_options=stream_options)


class AgentOptions:
    """The Agent's options as typed attributes, each read when a run starts.

    Loop options live in ``_loop`` (an :class:`AgentLoopConfig`, which checks them), request
    options in its ``stream_options``. Assigning a public name that is not a writable attribute
    raises ``AttributeError`` naming the valid ones: a misspelt option fails loudly.
    """

    _loop: AgentLoopConfig

    if not TYPE_CHECKING:  # hidden from type checkers, which then flag a misspelt name too

        def __setattr__(self, name: str, value: Any) -> None:
            if not name.startswith("_"):
                attribute = getattr(type(self), name, None)
                if not isinstance(attribute, property) or attribute.fset is None:
                    raise AttributeError(
                        f"{type(self).__name__!r} object has no writable attribute {name!r}; "
                        f"the writable ones are {', '.join(writable_attributes(type(self)))}"
                    )
            object.__setattr__(self, name, value)

    def _set_option(self, name: str, value: Any) -> None:
        """Set one option, checked as its type says: the constructor's path and assignment's."""
        if name in LOOP_OPTIONS:
            setattr(self._loop, name, check_option(name, value))
            if name in ("output_type", "output_retries"):
                settle_output_retries(self._loop)
        elif name in REQUEST_OPTIONS:
            current = dict(self._loop.stream_options)
            self._loop.stream_options = StreamOptions.model_validate({**current, name: value})
        else:
            raise TypeError(
                f"Agent() got an unknown option {name!r}. Loop options: "
                f"{', '.join(sorted(LOOP_OPTIONS))}; request options: "
                f"{', '.join(sorted(REQUEST_OPTIONS))}"
            )

    @property
    def stream_options(self) -> StreamOptions:
        """Every request option at once (a dict is accepted; a misspelt key raises)."""
        return self._loop.stream_options

    @stream_options.setter
    def stream_options(self, value: StreamOptions | dict[str, Any] | None) -> None:
        self._loop.stream_options = check_option("stream_options", value)

    # --- loop options (the contracts are on AgentLoopConfig's fields) ---------------------------

    @property
    def convert_to_llm(self) -> ConvertToLlm:
        """What the model sees of the transcript; ``None`` restores the default."""
        return self._loop.convert_to_llm

    @convert_to_llm.setter
    def convert_to_llm(self, value: ConvertToLlm | None) -> None:
        self._set_option("convert_to_llm", value)

    @property
    def transform_context(self) -> TransformContext | None:
        """Prunes or extends the transcript before each request."""
        return self._loop.transform_context

    @transform_context.setter
    def transform_context(self, value: TransformContext | None) -> None:
        self._set_option("transform_context", value)

    @property
    def get_api_key(self) -> GetApiKey | None:
        """Gives each request's API key for a provider; wins over ``api_key`` when it answers."""
        return self._loop.get_api_key

    @get_api_key.setter
    def get_api_key(self, value: GetApiKey | None) -> None:
        self._set_option("get_api_key", value)

    @property
    def prepare_next_turn(self) -> PrepareNextTurn | None:
        """May change the context, model or thinking level before each later turn."""
        return self._loop.prepare_next_turn

    @prepare_next_turn.setter
    def prepare_next_turn(self, value: PrepareNextTurn | None) -> None:
        self._set_option("prepare_next_turn", value)

    @property
    def prepare_request(self) -> PrepareRequest | None:
        """May change the context, model or thinking level before each request."""
        return self._loop.prepare_request

    @prepare_request.setter
    def prepare_request(self, value: PrepareRequest | None) -> None:
        self._set_option("prepare_request", value)

    @property
    def finish_turn(self) -> FinishTurn | None:
        """Decides after each turn whether the run ends or makes one more request."""
        return self._loop.finish_turn

    @finish_turn.setter
    def finish_turn(self, value: FinishTurn | None) -> None:
        self._set_option("finish_turn", value)

    @property
    def before_tool_call(self) -> BeforeToolCall | None:
        """May block a tool call (or end the run) after its arguments are validated."""
        return self._loop.before_tool_call

    @before_tool_call.setter
    def before_tool_call(self, value: BeforeToolCall | None) -> None:
        self._set_option("before_tool_call", value)

    @property
    def after_tool_call(self) -> AfterToolCall | None:
        """May replace fields of a tool call's result."""
        return self._loop.after_tool_call

    @after_tool_call.setter
    def after_tool_call(self, value: AfterToolCall | None) -> None:
        self._set_option("after_tool_call", value)

    @property
    def tool_execution(self) -> ToolExecution:
        """``"parallel"`` or ``"sequential"``: how a batch's calls run."""
        return self._loop.tool_execution

    @tool_execution.setter
    def tool_execution(self, value: ToolExecution) -> None:
        self._set_option("tool_execution", value)

    @property
    def max_tool_workers(self) -> int:
        """How many calls of one parallel batch run at the same time."""
        return self._loop.max_tool_workers

    @max_tool_workers.setter
    def max_tool_workers(self, value: int) -> None:
        self._set_option("max_tool_workers", value)

    @property
    def tool_abort_grace(self) -> float:
        """Seconds an aborted run waits for what ignores the signal."""
        return self._loop.tool_abort_grace

    @tool_abort_grace.setter
    def tool_abort_grace(self, value: float) -> None:
        self._set_option("tool_abort_grace", value)

    @property
    def budgets(self) -> Budgets | None:
        """The limits of each run (``None``: the default turn cap); a dict is accepted."""
        return self._loop.budgets

    @budgets.setter
    def budgets(self, value: Budgets | dict[str, Any] | None) -> None:
        self._set_option("budgets", value)

    @property
    def output_type(self) -> OutputSpec | None:
        """The type each run's final answer must validate as (kept as its spec)."""
        return self._loop.output_type

    @output_type.setter
    def output_type(self, value: Any) -> None:
        self._set_option("output_type", value)

    @property
    def output_retries(self) -> int:
        """How many times an invalid answer is sent back before the run fails."""
        return self._loop.output_retries

    @output_retries.setter
    def output_retries(self, value: int) -> None:
        self._set_option("output_retries", value)

    @property
    def deps(self) -> Any:
        """The application's object handed to tools through ``RunContext``."""
        return self._loop.deps

    @deps.setter
    def deps(self, value: Any) -> None:
        self._set_option("deps", value)

    @property
    def approvals(self) -> Approvals | None:
        """The broker asked about tools that need a decision."""
        return self._loop.approvals

    @approvals.setter
    def approvals(self, value: Approvals | None) -> None:
        self._set_option("approvals", value)

    @property
    def tool_executor(self) -> Executor | None:
        """The executor parallel tool batches run on (``None``: agentkit's daemon threads)."""
        return self._loop.tool_executor

    @tool_executor.setter
    def tool_executor(self, value: Executor | None) -> None:
        self._set_option("tool_executor", value)

    @property
    def fallback_models(self) -> list[Model]:
        """Models that answer, in order, when the model cannot (see :mod:`agentkit.failover`)."""
        return self._loop.fallback_models

    @fallback_models.setter
    def fallback_models(self, value: list[Model | str] | None) -> None:
        self._set_option("fallback_models", value)

    @property
    def failover_cooldown(self) -> float:
        """Seconds a model that failed is skipped before it is tried again."""
        return self._loop.failover_cooldown

    @failover_cooldown.setter
    def failover_cooldown(self, value: float) -> None:
        self._set_option("failover_cooldown", value)

    @property
    def compaction(self) -> Compaction | None:
        """When and how the transcript is compacted to fit the context window."""
        return self._loop.compaction

    @compaction.setter
    def compaction(self, value: Compaction | str | bool | None) -> None:
        self._set_option("compaction", value)

    # --- request options (each a StreamOptions field) -------------------------------------------

    @property
    def rate_limiter(self) -> Any:
        """The :class:`~agentkit.limits.RateLimiter` each request takes a permit from."""
        return self._loop.stream_options.rate_limiter

    @rate_limiter.setter
    def rate_limiter(self, value: Any) -> None:
        self._set_option("rate_limiter", value)

    @property
    def api_key(self) -> str | None:
        """The API key of each request when ``get_api_key`` gives none."""
        return self._loop.stream_options.api_key

    @api_key.setter
    def api_key(self, value: str | None) -> None:
        self._set_option("api_key", value)

    @property
    def session_id(self) -> str | None:
        """The session id sent with each request (providers use it for caching)."""
        return self._loop.stream_options.session_id

    @session_id.setter
    def session_id(self, value: str | None) -> None:
        self._set_option("session_id", value)

    @property
    def headers(self) -> dict[str, str] | None:
        """Extra HTTP headers of each request."""
        return self._loop.stream_options.headers

    @headers.setter
    def headers(self, value: dict[str, str] | None) -> None:
        self._set_option("headers", value)

    @property
    def max_tokens(self) -> int | None:
        """The output token limit of each request."""
        return self._loop.stream_options.max_tokens

    @max_tokens.setter
    def max_tokens(self, value: int | None) -> None:
        self._set_option("max_tokens", value)

    @property
    def temperature(self) -> float | None:
        """The sampling temperature of each request."""
        return self._loop.stream_options.temperature

    @temperature.setter
    def temperature(self, value: float | None) -> None:
        self._set_option("temperature", value)

    @property
    def max_retries(self) -> int:
        """How many times a failed request is retried."""
        return self._loop.stream_options.max_retries

    @max_retries.setter
    def max_retries(self, value: int) -> None:
        self._set_option("max_retries", value)

    @property
    def max_retry_delay_ms(self) -> int:
        """The longest ``Retry-After`` honoured, in milliseconds."""
        return self._loop.stream_options.max_retry_delay_ms

    @max_retry_delay_ms.setter
    def max_retry_delay_ms(self, value: int) -> None:
        self._set_option("max_retry_delay_ms", value)

    @property
    def retry_base_delay_ms(self) -> int:
        """The first backoff delay, doubled for each further retry."""
        return self._loop.stream_options.retry_base_delay_ms

    @retry_base_delay_ms.setter
    def retry_base_delay_ms(self, value: int) -> None:
        self._set_option("retry_base_delay_ms", value)

    @property
    def timeout(self) -> float | tuple[float, float] | None:
        """Seconds: one number, or a ``(connect, read)`` pair."""
        return self._loop.stream_options.timeout

    @timeout.setter
    def timeout(self, value: float | tuple[float, float] | None) -> None:
        self._set_option("timeout", value)

    @property
    def on_payload(self) -> Any:
        """Sees (and may replace) each request body."""
        return self._loop.stream_options.on_payload

    @on_payload.setter
    def on_payload(self, value: Any) -> None:
        self._set_option("on_payload", value)

    @property
    def thinking_budgets(self) -> dict[str, int] | None:
        """Token budgets per thinking level."""
        return self._loop.stream_options.thinking_budgets

    @thinking_budgets.setter
    def thinking_budgets(self, value: dict[str, int] | None) -> None:
        self._set_option("thinking_budgets", value)

    @property
    def tool_choice(self) -> ToolChoice | None:
        """The API's tool choice for each request (``"auto"``, ``"none"``, ...)."""
        return self._loop.stream_options.tool_choice

    @tool_choice.setter
    def tool_choice(self, value: ToolChoice | None) -> None:
        self._set_option("tool_choice", value)

    @property
    def anthropic(self) -> AnthropicOptions | None:
        """Options only the Anthropic API understands (a dict is accepted)."""
        return self._loop.stream_options.anthropic

    @anthropic.setter
    def anthropic(self, value: AnthropicOptions | dict[str, Any] | None) -> None:
        self._set_option("anthropic", value)

    @property
    def openai(self) -> OpenAIOptions | None:
        """Options only the OpenAI APIs understand (a dict is accepted)."""
        return self._loop.stream_options.openai

    @openai.setter
    def openai(self, value: OpenAIOptions | dict[str, Any] | None) -> None:
        self._set_option("openai", value)

    @property
    def google(self) -> GoogleOptions | None:
        """Options only the Gemini API understands (a dict is accepted)."""
        return self._loop.stream_options.google

    @google.setter
    def google(self, value: GoogleOptions | dict[str, Any] | None) -> None:
        self._set_option("google", value)


def writable_attributes(cls: type) -> list[str]:
    """The public attributes of ``cls`` that can be assigned: its properties with a setter."""
    return sorted(
        name
        for name in dir(cls)
        if not name.startswith("_")
        and isinstance(prop := getattr(cls, name), property)
        and prop.fset is not None
    )


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
