"""The data agentkit passes around: content blocks, messages, usage and models (pydantic v2).

Every model round-trips through ``model_dump(mode="json")`` and ``model_validate``. Messages are
mutable on purpose: a provider fills one partial :class:`AssistantMessage` in place while it
streams, and the loop stamps ``thinking_level`` on the final one.

No ``from __future__ import annotations`` here, on purpose: pydantic would have to evaluate
every field's annotation from its text when a class is defined, which costs about a twentieth
of ``import agentkit``.
"""

import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import TypedDict

from .abort import AbortSignal

StopReason = Literal["stop", "length", "tool_use", "error", "aborted"]
"""Why an assistant message ended. The loop only looks at ``error``, ``aborted`` and ``length``."""

ThinkingLevel = Literal["off", "minimal", "low", "medium", "high", "xhigh"]
"""How hard a reasoning model should think; ``"off"`` asks for no reasoning."""

def now_ms() -> int:
    """The current time in milliseconds since the epoch, the unit of every ``timestamp``."""
    return int(time.time() * 1000)


class _Data(BaseModel):
    """Base for agentkit's data: plain, mutable pydantic models that ignore unknown keys."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", defer_build=True)


# --- content blocks ---------------------------------------------------------------------------


class TextContent(_Data):
    """A piece of text in a message."""

    type: Literal["text"] = "text"
    text: str
    text_signature: str | None = None


class ImageContent(_Data):
    """An image in a message, as base64 ``data`` with its ``mime_type``."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str


class ThinkingContent(_Data):
    """A model's visible reasoning; ``signature`` is what the vendor needs echoed back."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None
    redacted: bool = False


class ToolCall(_Data):
    """A request from the model to run the tool ``name`` with ``arguments``."""

    type: Literal["tool_call"] = "tool_call"
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    thought_signature: str | None = None


UserContent = Annotated[TextContent | ImageContent, Field(discriminator="type")]
AssistantContent = Annotated[TextContent | ThinkingContent | ToolCall, Field(discriminator="type")]
ToolResultContent = UserContent


# --- usage and cost ---------------------------------------------------------------------------


class Cost(_Data):
    """What a request cost, in US dollars."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    total: float = 0.0


class Usage(_Data):
    """Token counts of one request, and their cost."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: Cost = Field(default_factory=Cost)


# --- tool declarations ------------------------------------------------------------------------


class Tool(_Data):
    """A tool as the model sees it: its name, what it does and its JSON Schema parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolRef(_Data):
    """Names a tool that a system message removes from the declared set."""

    name: str


# --- messages ---------------------------------------------------------------------------------


class SystemMessage(_Data):
    """Instructions and declared tools. The first one is the base prompt; later ones change it.

    ``sections`` replaces named sections (``None`` deletes one); ``tools_removed`` then
    ``tools_added`` change the tools the model is told about.
    """

    role: Literal["system"] = "system"
    content: str | list[TextContent] = ""
    sections: dict[str, str | None] | None = None
    tools_added: list[Tool] | None = None
    tools_removed: list[ToolRef] | None = None
    timestamp: int = Field(default_factory=now_ms)


class UserMessage(_Data):
    """What the user says: text, or a list of text and image blocks."""

    role: Literal["user"] = "user"
    content: str | list[UserContent]
    timestamp: int = Field(default_factory=now_ms)


class AssistantMessage(_Data):
    """One model reply: text, thinking and tool calls, with how and why it ended."""

    role: Literal["assistant"] = "assistant"
    content: list[AssistantContent] = Field(default_factory=list)
    api: str = "unknown"
    provider: str = "unknown"
    model: str = "unknown"
    usage: Usage = Field(default_factory=Usage)
    stop_reason: StopReason = "stop"
    error_message: str | None = None
    thinking_level: ThinkingLevel | None = None
    response_id: str | None = None
    timestamp: int = Field(default_factory=now_ms)

    @property
    def text(self) -> str:
        """The text blocks joined (thinking and tool calls left out); ``""`` when there are none."""
        return "".join(c.text for c in self.content if isinstance(c, TextContent))


class ToolResultMessage(_Data):
    """The outcome of one tool call, as the model will read it."""

    role: Literal["tool_result"] = "tool_result"
    tool_call_id: str
    tool_name: str
    content: list[ToolResultContent] = Field(default_factory=list)
    details: Any = None
    usage: Usage | None = None
    is_error: bool = False
    duration_ms: float | None = None
    timestamp: int = Field(default_factory=now_ms)


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
"""A message a model understands."""


AgentMessage = Any
"""A :data:`Message` or an application's own message (any object with a ``role``)."""


def role_of(message: Any) -> str | None:
    """The ``role`` of a message object or dict, or ``None`` when it has none."""
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
    return role if role.__class__ is str else None


_Model = TypeVar("_Model", bound=BaseModel)


def as_model(cls: type[_Model], message: Any) -> _Model:
    """``message`` as a ``cls``: itself when it is one, else validated from a dict or from
    another object's attributes (a message of another library, say)."""
    if isinstance(message, cls):
        return message
    if isinstance(message, dict):
        return cls.model_validate(message)
    return cls.model_validate(message, from_attributes=True)


# --- models -----------------------------------------------------------------------------------


class ModelCost(_Data):
    """A model's prices in US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


class ModelCompat(BaseModel):
    """Server quirks of a model's server, as typed settings (``Model.compat``).

    A misspelt key raises. Every field is ``None`` by default, meaning "the API's default, or
    the provider's row in the table".
    """

    model_config = ConfigDict(extra="forbid", defer_build=True)

    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] | None = None
    """Chat Completions: the body field that carries ``max_tokens``."""
    supports_developer_role: bool | None = None
    """Chat Completions: send the system prompt as ``developer`` for reasoning models."""
    supports_usage_in_streaming: bool | None = None
    """Chat Completions: ask for usage with ``stream_options.include_usage``."""
    supports_reasoning_effort: bool | None = None
    """Chat Completions: send ``reasoning_effort``."""
    thinking_format: Literal["openai", "openrouter"] | None = None
    """Chat Completions: ``reasoning_effort`` (openai) or ``reasoning: {effort}`` (openrouter)."""
    reasoning_field: str | None = None
    """Chat Completions: the delta field carrying thinking text (others are tried after it)."""
    send_reasoning: bool | None = None
    """Chat Completions: replay our thinking in ``reasoning_field``."""
    supports_store: bool | None = None
    """Chat Completions and Responses: send ``store: false``."""
    supports_include: bool | None = None
    """Responses: ask for ``reasoning.encrypted_content``."""
    supports_tool_search: bool | None = None
    """Responses: the client-executed ``tool_search`` tool (default: OpenAI's ``gpt-5.4`` and
    later, by the model id; other servers speaking Responses do not know it)."""
    sse: bool | None = None
    """Gemini: ``alt=sse`` (the default) or the streamed JSON array when ``False``."""
    structured_output: Literal["response_format", "json_schema", "tool", "prompted"] | None = None
    """How typed output is asked for. Chat Completions: ``response_format`` (OpenAI's
    ``json_schema`` form, which vLLM, Ollama and LM Studio read), ``json_schema`` (llama.cpp's
    top-level field, on every API), and for a server with no native form ``tool`` (a
    ``final_result`` tool whose arguments are the answer) or ``prompted`` (the schema in the
    instructions); the answer is validated the same way whichever form asked for it."""

    def merged(self, *others: "ModelCompat | None") -> "ModelCompat":
        """These settings with every later one's non-``None`` fields laid over them."""
        values = self.model_dump(exclude_none=True)
        for other in others:
            if other is not None:
                values.update(other.model_dump(exclude_none=True))
        return ModelCompat.model_validate(values)


class Model(_Data):
    """A model to talk to: where it lives, which wire API it speaks, and what it can do."""

    id: str
    name: str = ""
    api: str
    provider: str
    base_url: str
    reasoning: bool = False
    input: list[Literal["text", "image"]] = Field(default_factory=lambda: ["text"])  # type: ignore[arg-type]
    cost: ModelCost = Field(default_factory=ModelCost)
    context_window: int = 128000
    max_tokens: int = 4096
    headers: dict[str, str] | None = None
    compat: ModelCompat | None = None
    """Per-server quirks, laid over the provider table's (a dict is validated: a misspelt key
    raises)."""


def placeholder_model() -> Model:
    """The model an Agent has before one is set (SPEC 2.8): everything ``"unknown"`` or zero."""
    return Model(
        id="unknown",
        name="unknown",
        api="unknown",
        provider="unknown",
        base_url="",
        reasoning=False,
        input=[],
        cost=ModelCost(),
        context_window=0,
        max_tokens=0,
    )


# --- provider inputs --------------------------------------------------------------------------


class Context(_Data):
    """What a stream function gets: the converted transcript, and optionally a prompt and tools.

    The loop passes only ``messages``; providers replay the transcript's system messages for the
    system prompt and the declared tools.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    messages: list[Any] = Field(default_factory=list)
    system_prompt: str | None = None
    tools: list[Tool] | None = None


class _Options(BaseModel):
    """Base for request options: a misspelt option raises instead of being ignored."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)


class AnthropicOptions(_Options):
    """Options only Anthropic's Messages API understands."""

    thinking_enabled: bool = False
    """Ask for extended thinking (reasoning models only)."""
    thinking_budget_tokens: int | None = None
    """Tokens the model may think for; the ``medium`` budget when ``None``."""
    cache_retention: Literal["short", "long", "none"] = "short"
    """Prompt-cache breakpoints: five minutes, one hour, or none (Anthropic itself only)."""


class OpenAIOptions(_Options):
    """Options of OpenAI's Chat Completions and Responses APIs (and compatible servers)."""

    reasoning_effort: Literal["minimal", "low", "medium", "high", "xhigh"] | None = None
    """Reasoning effort for reasoning models (sent as the server's quirks say)."""
    reasoning_summary: Literal["auto", "concise", "detailed"] | None = None
    """Responses only: the reasoning summary to ask for (``"auto"`` when effort is set)."""
    tool_search: str | None = None
    """Responses only: the name of the tool that is the client-executed tool search, so that
    a ``tool_search_call`` in the response becomes a call of it. The tools array and the
    replay are spelt by an ``on_payload`` step, set with it by the policy that owns the search
    (``search_natively`` of :mod:`agentkit.providers.openai_responses`)."""


class GoogleOptions(_Options):
    """Options only Gemini understands."""

    thinking: bool = False
    """Send a ``thinkingConfig`` (reasoning models only)."""
    include_thoughts: bool = True
    """Stream the model's thought summaries as thinking blocks."""
    thinking_level: Literal["minimal", "low", "medium", "high"] | None = None
    """Gemini 3 thinking level (wins over the budget)."""
    thinking_budget_tokens: int | None = None
    """Gemini 2.5 thinking budget (-1: dynamic, 0: off)."""


class OutputSchema(BaseModel):
    """The answer a request asks for, as the core states it; each provider spells it its API's way.

    ``json_schema`` is a JSON schema whose root is an object; ``name`` is what the API shows it
    under; ``strict`` says whether the API may enforce it exactly (every object lists all its
    properties as required and allows no others).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str
    json_schema: dict[str, Any]
    strict: bool = False


ToolChoiceMode = Literal["auto", "none", "required", "any"]
"""Whether the model may call tools (``"auto"``), must not (``"none"``) or must call one
(``"required"``; ``"any"`` is a synonym)."""


class NamedToolChoice(TypedDict):
    """``{"name": "<tool>"}``: the model must call that tool."""

    # Forbidding other keys keeps an API's own dict that has a "name" (Anthropic's
    # {"type": "tool", "name": ...}) whole: it then validates as a plain dict.
    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    name: str


ToolChoice = ToolChoiceMode | NamedToolChoice | dict[str, Any]
"""A portable mode, a named tool, or any other dict: the API's own value, sent as it is."""


class StreamOptions(_Options):
    """Options for one provider request, and nothing else (no callbacks of the loop).

    A misspelt option raises (``extra="forbid"``); options that only one API understands live in
    :attr:`anthropic`, :attr:`openai` and :attr:`google`. ``signal`` is the run's
    :class:`~agentkit.abort.AbortSignal`; ``timeout`` is seconds (one number, or a ``(connect,
    read)`` pair); ``on_payload`` sees (and may replace) the request body. ``tool_choice`` and
    ``output_schema`` say what the request asks for; each provider module spells them for its
    API (an unknown :data:`ToolChoice` dict is sent as it is).
    ``stream_simple`` turns ``reasoning`` (with ``thinking_budgets``) into the per-API options.
    """

    api_key: str | None = None
    signal: Any = None
    reasoning: ThinkingLevel | None = None
    session_id: str | None = None
    headers: dict[str, str] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    max_retries: int = 2
    max_retry_delay_ms: int = 60000
    retry_base_delay_ms: int = 1000
    """The first backoff delay; doubled for every further retry (jittered)."""
    timeout: float | tuple[float, float] | None = None
    on_payload: Any = None
    thinking_budgets: dict[str, int] | None = None
    tool_choice: ToolChoice | None = None
    output_schema: OutputSchema | None = None
    """The structured answer to ask for (the loop sets it from ``output_type``)."""
    rate_limiter: Any = None
    """A :class:`~agentkit.limits.RateLimiter` every attempt takes a permit from first."""
    anthropic: AnthropicOptions | None = None
    openai: OpenAIOptions | None = None
    google: GoogleOptions | None = None


def as_stream_options(options: StreamOptions | dict[str, Any] | None) -> StreamOptions:
    """Accept a :class:`StreamOptions`, a dict or ``None`` where options are taken."""
    if options is None:
        return StreamOptions()
    if isinstance(options, StreamOptions):
        return options
    return StreamOptions.model_validate(options)


def on_payload_before(
    options: StreamOptions, first: Callable[[dict[str, Any], Model], Any]
) -> Callable[[dict[str, Any], Model], Any]:
    """An ``on_payload`` that applies ``first(payload, model)``, then the caller's own
    ``options.on_payload`` the way the providers call one (with one or two arguments)."""

    def on_payload(payload: dict[str, Any], model: Model) -> Any:
        return apply_on_payload(options, first(payload, model), model)

    return on_payload


def apply_on_payload(options: StreamOptions, payload: dict[str, Any], model: Model) -> Any:
    """Let ``options.on_payload(payload, model)`` (or ``(payload)``) see or replace the body."""
    hook = options.on_payload
    if hook is None:
        return payload
    replaced = hook(payload, model) if _takes_two_arguments(hook) else hook(payload)
    return payload if replaced is None else replaced


def _takes_two_arguments(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            positional += 1
    return positional >= 2


# --- tools: the data the loop and hooks share ---------------------------------------------------

ExecutionMode = Literal["sequential", "parallel"]
OnUpdate = Callable[[Any], None]
"""Reports a tool's partial result; it becomes a ``tool_execution_update`` event."""


class AgentToolResult(BaseModel):
    """What a tool returns: content for the model, ``details`` for the application.

    ``is_error`` marks a failure the model should see; ``terminate`` asks the loop not to make
    the automatic follow-up request (it only does so when every result of the batch asks).
    A plain string is accepted for ``content``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    content: list[TextContent | ImageContent] = Field(default_factory=list)
    details: Any = None
    structured_content: Any = None
    usage: Usage | None = None
    is_error: bool = False
    terminate: bool = False

    @field_validator("content", mode="before")
    @classmethod
    def _text_from_str(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [TextContent(text=value)]
        return value

    @property
    def text(self) -> str:
        """The text of every text block, joined by newlines."""
        return "\n".join(c.text for c in self.content if isinstance(c, TextContent))


class FieldsEqRepr:
    """Equality and ``repr`` by a dataclass's fields, for the dataclasses declared
    ``@dataclass(eq=False, repr=False)``: what ``@dataclass`` would generate for each class,
    written once. Python 3.11 compiles every generated method from source at import, which was
    a sizeable part of ``import agentkit``.

    Equal means the same class and equal fields; a class defining ``__eq__`` without
    ``__hash__`` is unhashable, as a mutable dataclass is. The fields are ``__match_args__``,
    which ``@dataclass`` sets to the ``__init__`` fields in order (every field, here).
    """

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, FieldsEqRepr)
        return self._values() == other._values()

    def __repr__(self) -> str:
        fields_ = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({fields_})"


ToolExecute = Callable[[str, dict[str, Any], AbortSignal, OnUpdate], AgentToolResult]
"""``execute(tool_call_id, params, signal, on_update) -> AgentToolResult``."""


@dataclass(eq=False, repr=False)
class AgentTool(FieldsEqRepr):
    """A tool the agent can run: its declaration for the model plus the code that executes it.

    ``execute(tool_call_id, params, signal, on_update)`` runs on a pool thread; it should watch
    ``signal`` (``signal.wait(t)`` instead of ``time.sleep(t)``) and report a failure by raising
    or by returning ``is_error=True``. ``execution_mode="sequential"`` makes any batch containing
    this tool run one call at a time. ``prepare_arguments(raw)`` may reshape raw arguments
    before they are validated. ``timeout`` (seconds) gives a call still running then an error
    result (its signal is aborted) and the run goes on; ``max_retries`` is how many
    ``ToolRetry`` requests a run accepts from this tool; ``requires_approval`` makes each call
    wait for a decision of the agent's :class:`~agentkit.approvals.Approvals`. ``idempotent=True``
    says running a call twice does no harm, so a call a crash interrupted may run again when a
    session resumes (:mod:`agentkit.sessions`).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    execute: ToolExecute
    label: str | None = None
    execution_mode: ExecutionMode | None = None
    prepare_arguments: Callable[[Any], Any] | None = None
    idempotent: bool = False
    timeout: float | None = None
    max_retries: int = 1
    requires_approval: bool = False

    def __post_init__(self) -> None:
        if self.timeout is not None and not self.timeout > 0:
            raise ValueError(f"tool {self.name}: timeout must be above zero, got {self.timeout!r}")
        if self.max_retries < 0:
            raise ValueError(f"tool {self.name}: max_retries must be 0 or more")

    def declaration(self) -> Tool:
        """The tool as the model sees it: name, description and a deep copy of the schema."""
        return to_tool_declaration(self)


def to_tool_declaration(tool: AgentTool | Tool) -> Tool:
    """The declaration of ``tool``: name, description and a JSON copy of its parameters."""
    return Tool(
        name=tool.name,
        description=tool.description,
        parameters=json.loads(json.dumps(tool.parameters)),
    )


@dataclass(eq=False, repr=False)
class AgentContext(FieldsEqRepr):
    """What the loop works on: the transcript and the executable tools."""

    messages: list[Any] = field(default_factory=list)
    tools: list[AgentTool] = field(default_factory=list)
