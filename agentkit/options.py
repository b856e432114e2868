"""The Agent's options: each declared once and checked once, where it is set, and turned into
a run's loop config and policy chain when a run starts.

A run's options come in three layers, the nearer winning: a run's own options (``prompt(...,
output_type=...)``), the agent's options (``Agent(budgets=...)``, ``agent.max_tokens = 64``),
and the defaults written on the fields of :class:`~agentkit.config.AgentLoopConfig`,
:class:`Envelope` and :class:`~agentkit.StreamOptions`. :func:`merge_options` lays them over one
another, as requests' ``merge_setting`` lays a request's settings over its session's.

An option is checked where it is set, by :func:`check_option`: an ``output_type`` becomes an
:class:`~agentkit.output.OutputSpec` and a budgets dict :class:`~agentkit.Budgets`, so a bad
value fails where it is given (an Agent's attribute, a run's keyword) and the loop trusts what
it reads. :func:`run_policies` turns the envelope into the built-in policies, in their order:
the interrupt lane, typed output, budgets, compaction, approvals; then the user's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .budgets import BudgetPolicy, Budgets
from .compaction import Compaction, CompactionPolicy
from .config import (
    AfterToolCall,
    AgentLoopConfig,
    BeforeToolCall,
    ConvertToLlm,
    FinishTurn,
    GetApiKey,
    PrepareNextTurn,
    PrepareRequest,
    StreamFn,
    ToolExecution,
    TransformContext,
)
from .config import check_option as check_loop_option
from .failover import DEFAULT_COOLDOWN, as_fallback_models, failover_stream_fn
from .interrupts import InterruptLane
from .output import DEFAULT_OUTPUT_RETRIES, OutputPolicy, OutputSpec
from .policy import RunPolicy, check_policies, ordered
from .types import (
    AnthropicOptions,
    FieldsEqRepr,
    GoogleOptions,
    Model,
    OpenAIOptions,
    StreamOptions,
    ToolChoice,
)

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from .approvals import Approvals


def _non_negative(name: str, value: int) -> int:
    """``value`` if it is an int of 0 or more; else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more; got {value!r}")
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "output_type": OutputSpec.of,
    "output_retries": lambda value: _non_negative("output_retries", value),
    "budgets": lambda value: None if value is None else Budgets.of(value),
    "fallback_models": as_fallback_models,
    "compaction": Compaction.of,
    "policies": check_policies,
}
"""The envelope options whose value is checked (and put in its working form) when set."""


def check_option(name: str, value: Any) -> Any:
    """``value`` checked as option ``name`` is (a bad one raises); unchecked options pass."""
    check = _CHECKS.get(name)
    return check_loop_option(name, value) if check is None else check(value)


@dataclass(eq=False, repr=False)
class Envelope(FieldsEqRepr):
    """The Agent's options that become policies (and the failover wrapper of the stream
    function) when a run starts; the contracts are on the Agent's attributes."""

    budgets: Budgets | None = None
    output_type: OutputSpec | None = None
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    approvals: Approvals | None = None
    fallback_models: list[Model] = field(default_factory=list)
    failover_cooldown: float = DEFAULT_COOLDOWN
    compaction: Compaction | None = None
    policies: list[RunPolicy] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            object.__setattr__(self, name, check(getattr(self, name)))
        settle_output_retries(self)


def settle_output_retries(envelope: Envelope) -> None:
    """Make ``output_type`` carry ``output_retries``: the run reads one count."""
    if envelope.output_type is not None:
        envelope.output_type = OutputSpec.of(envelope.output_type, retries=envelope.output_retries)


ENVELOPE_OPTIONS = frozenset(f.name for f in dataclasses.fields(Envelope))
"""The Agent options that are envelope options (each an :class:`Envelope` field)."""


def run_policies(envelope: Envelope, interrupts: InterruptLane | None = None) -> list[RunPolicy]:
    """A run's policy chain: the built-ins the envelope asks for, in their order (the
    interrupt lane outermost, then typed output, budgets (the default turn cap when none are
    set), compaction, approvals), with the user's policies around or after them."""
    builtins: list[RunPolicy] = []
    if interrupts is not None:
        builtins.append(interrupts)
    if envelope.output_type is not None:
        builtins.append(OutputPolicy(envelope.output_type))
    builtins.append(BudgetPolicy(envelope.budgets or Budgets()))
    if envelope.compaction is not None:
        builtins.append(CompactionPolicy(envelope.compaction))
    from .deferred import ApprovalsPolicy  # the approvals load with the first run, not before

    builtins.append(ApprovalsPolicy(envelope.approvals))
    return ordered(builtins, envelope.policies)


def run_stream_fn(envelope: Envelope, stream_fn: StreamFn) -> StreamFn:
    """The run's stream function: with ``fallback_models``, one that fails over to them."""
    if not envelope.fallback_models:
        return stream_fn
    return failover_stream_fn(stream_fn, envelope.fallback_models, envelope.failover_cooldown)


_FIELDS = tuple(f.name for f in dataclasses.fields(AgentLoopConfig))

# --- the Agent's options ------------------------------------------------------------------------

_STATE_FIELDS = frozenset(
    {"model", "reasoning", "get_steering_messages", "get_follow_up_messages", "stream_options"}
    | {"policies"}
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

RUN_OPTIONS = frozenset(
    {"output_type", "output_retries", "budgets", "deps", "tool_choice", "policies"}
)
"""What ``prompt()``, ``start()``, ``stream()`` and their asyncio twins accept per run."""


@dataclass(frozen=True)
class RunOptions:
    """The run options one run goes by: its own (``prompt(..., output_type=City)``) over its
    agent's. :attr:`Run.options <agentkit.Run.options>` holds them, and a listener reads the
    active run's from :attr:`Agent.run_options <agentkit.Agent.run_options>`, never the agent's
    own options, which a run may override."""

    output_type: OutputSpec | None
    """The type the final answer must validate as (with its retries), ``None`` for text."""
    output_retries: int
    budgets: Budgets | None
    deps: Any
    tool_choice: ToolChoice | None
    policies: list[RunPolicy]
    """The user's policies (the built-in ones are made from the other options)."""

    @classmethod
    def of(cls, config: AgentLoopConfig, envelope: Envelope) -> RunOptions:
        """The run options of a run's ``config`` and ``envelope``."""
        return cls(
            output_type=envelope.output_type,
            output_retries=envelope.output_retries,
            budgets=envelope.budgets,
            deps=config.deps,
            tool_choice=config.stream_options.tool_choice,
            policies=list(envelope.policies),
        )


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
    config: AgentLoopConfig,
    envelope: Envelope,
    run_options: Mapping[str, Any],
    **state: Any,
) -> tuple[AgentLoopConfig, Envelope]:
    """The loop config and envelope of one run: ``run_options`` over the agent's options
    (``config`` and ``envelope``, which lie over the fields' defaults), with the fields the agent
    fills from its state (``state``).

    A run option that is given wins, ``None`` included (``output_type=None`` runs without one);
    neither ``config`` nor ``envelope`` is changed. ``tool_choice`` is a request option, laid
    over ``config.stream_options``.
    """
    loop, outer, request = {}, {}, {}
    for name, value in run_options.items():
        if name in REQUEST_OPTIONS:
            request[name] = value
        elif name in ENVELOPE_OPTIONS:
            outer[name] = value
        else:
            loop[name] = value
    stream_options = state.pop("stream_options", config.stream_options)
    if request:
        stream_options = stream_options.model_copy(update=request)
    merged = dataclasses.replace(config, **state, **loop, stream_options=stream_options)
    return merged, dataclasses.replace(envelope, **outer) if outer else envelope


class AgentOptions:
    """The Agent's options as typed attributes, each read when a run starts.

    Loop options live in ``_loop`` (an :class:`AgentLoopConfig`, which checks them), request
    options in its ``stream_options``, envelope options in ``_envelope`` (an
    :class:`Envelope`). Assigning a public name that is not a writable attribute
    raises ``AttributeError`` naming the valid ones: a misspelt option fails loudly.
    """

    _loop: AgentLoopConfig
    _envelope: Envelope

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
        if name in ENVELOPE_OPTIONS:
            setattr(self._envelope, name, check_option(name, value))
            if name in ("output_type", "output_retries"):
                settle_output_retries(self._envelope)
        elif name in LOOP_OPTIONS:
            setattr(self._loop, name, check_option(name, value))
        elif name in REQUEST_OPTIONS:
            current = dict(self._loop.stream_options)
            self._loop.stream_options = StreamOptions.model_validate({**current, name: value})
        else:
            raise TypeError(
                f"Agent() got an unknown option {name!r}. Loop options: "
                f"{', '.join(sorted(LOOP_OPTIONS | ENVELOPE_OPTIONS))}; request options: "
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
        return self._envelope.budgets

    @budgets.setter
    def budgets(self, value: Budgets | dict[str, Any] | None) -> None:
        self._set_option("budgets", value)

    @property
    def output_type(self) -> OutputSpec | None:
        """The type each run's final answer must validate as (kept as its spec)."""
        return self._envelope.output_type

    @output_type.setter
    def output_type(self, value: Any) -> None:
        self._set_option("output_type", value)

    @property
    def output_retries(self) -> int:
        """How many times an invalid answer is sent back before the run fails."""
        return self._envelope.output_retries

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
        return self._envelope.approvals

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
        return self._envelope.fallback_models

    @fallback_models.setter
    def fallback_models(self, value: list[Model | str] | None) -> None:
        self._set_option("fallback_models", value)

    @property
    def failover_cooldown(self) -> float:
        """Seconds a model that failed is skipped before it is tried again."""
        return self._envelope.failover_cooldown

    @failover_cooldown.setter
    def failover_cooldown(self, value: float) -> None:
        self._set_option("failover_cooldown", value)

    @property
    def policies(self) -> list[RunPolicy]:
        """The user's run policies (:mod:`agentkit.policy`), after the built-ins unless a
        policy is ``outermost``; one policy or a list is accepted."""
        return self._envelope.policies

    @policies.setter
    def policies(self, value: RunPolicy | list[RunPolicy] | None) -> None:
        self._set_option("policies", value)

    @property
    def compaction(self) -> Compaction | None:
        """When and how the transcript is compacted to fit the context window."""
        return self._envelope.compaction

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


