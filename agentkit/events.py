"""The events of both layers: agent events (what a run is doing) and provider stream events (how
an assistant message arrives). Each is a frozen dataclass with slots and a literal ``type``.

``@dataclass`` writes what differs per class (``__init__`` and the frozen ``__setattr__`` and
``__delattr__``); equality, ``repr`` and hashing, the same for every event, are written once in
:class:`_Event`, because Python 3.11 compiles each generated method from source at import.

Provider events carry ``partial``, the one live :class:`AssistantMessage` being filled in, not a
snapshot. :func:`event_to_dict` turns any event into JSON-ready data (for logs and ``--json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from typing_extensions import dataclass_transform

from ._serialize import event_data, to_jsonable  # noqa: F401 - to_jsonable is public here
from .errors import ProviderError
from .types import (
    AgentToolResult,
    AssistantMessage,
    FieldsEqRepr,
    ToolCall,
    ToolResultMessage,
)

_T = TypeVar("_T")

_dataclass = dataclass(frozen=True, slots=True, repr=False, eq=False)


@dataclass_transform(frozen_default=True)
def _event(cls: type[_T]) -> type[_T]:
    """An event class's decorator: a frozen dataclass with slots (``fields()``, ``replace()``,
    ``asdict()``, copying and pickling work) whose equality and ``repr`` come from
    :class:`_Event`. Type checkers read it as a frozen dataclass, so assigning to an event's
    field is flagged before it raises ``dataclasses.FrozenInstanceError``."""
    return _dataclass(cls)


class _Event(FieldsEqRepr):
    """What every event shares: equality and ``repr`` by fields (:class:`FieldsEqRepr`), and a
    hash by fields, so an event is hashable when its fields are (as a frozen dataclass is)."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())


# --- provider stream events -------------------------------------------------------------------


@_event
class StartEvent(_Event):
    """The stream has begun; ``partial`` is the message that the next events fill in."""

    partial: AssistantMessage
    type: Literal["start"] = "start"


@_event
class TextStartEvent(_Event):
    """A text block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["text_start"] = "text_start"


@_event
class TextDeltaEvent(_Event):
    """More text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["text_delta"] = "text_delta"


@_event
class TextEndEvent(_Event):
    """The text block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["text_end"] = "text_end"


@_event
class ThinkingStartEvent(_Event):
    """A thinking block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["thinking_start"] = "thinking_start"


@_event
class ThinkingDeltaEvent(_Event):
    """More reasoning text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["thinking_delta"] = "thinking_delta"


@_event
class ThinkingEndEvent(_Event):
    """The thinking block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["thinking_end"] = "thinking_end"


@_event
class ToolCallStartEvent(_Event):
    """A tool call begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["toolcall_start"] = "toolcall_start"


@_event
class ToolCallDeltaEvent(_Event):
    """More of the tool call's JSON arguments (``delta`` is raw text)."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["toolcall_delta"] = "toolcall_delta"


@_event
class ToolCallEndEvent(_Event):
    """The tool call at ``content_index`` is complete, with its parsed arguments."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: Literal["toolcall_end"] = "toolcall_end"


@_event
class DoneEvent(_Event):
    """The stream ended normally; ``message`` is the final assistant message."""

    reason: Literal["stop", "length", "tool_use"]
    message: AssistantMessage
    type: Literal["done"] = "done"


@_event
class ErrorEvent(_Event):
    """The stream failed or was aborted; ``error`` is the final message, with ``error_message``.

    ``provider_error`` is the :class:`~agentkit.ProviderError` that ended a failed request (its
    ``status`` and ``retry_after``), when the provider had one."""

    reason: Literal["error", "aborted"]
    error: AssistantMessage
    provider_error: ProviderError | None = None
    type: Literal["error"] = "error"


AssistantMessageEvent = (
    StartEvent
    | TextStartEvent
    | TextDeltaEvent
    | TextEndEvent
    | ThinkingStartEvent
    | ThinkingDeltaEvent
    | ThinkingEndEvent
    | ToolCallStartEvent
    | ToolCallDeltaEvent
    | ToolCallEndEvent
    | DoneEvent
    | ErrorEvent
)
"""Any event of a provider's stream."""


# --- agent events -----------------------------------------------------------------------------


@_event
class AgentStartEvent(_Event):
    """A run has begun."""

    type: Literal["agent_start"] = "agent_start"


@_event
class AgentEndEvent(_Event):
    """A run has ended; ``messages`` are the messages it added."""

    messages: list[Any] = field(default_factory=list)
    type: Literal["agent_end"] = "agent_end"


@_event
class TurnStartEvent(_Event):
    """A turn (one model request and the tools it asks for) begins."""

    type: Literal["turn_start"] = "turn_start"


@_event
class TurnEndEvent(_Event):
    """A turn has ended with the assistant ``message`` and its ``tool_results``, in call order."""

    message: Any
    tool_results: list[ToolResultMessage] = field(default_factory=list)
    type: Literal["turn_end"] = "turn_end"


@_event
class MessageStartEvent(_Event):
    """A message enters the transcript (for a streamed assistant: a copy of the partial)."""

    message: Any
    type: Literal["message_start"] = "message_start"


@_event
class MessageUpdateEvent(_Event):
    """The streaming assistant message changed; ``assistant_message_event`` says how."""

    message: Any
    assistant_message_event: AssistantMessageEvent
    type: Literal["message_update"] = "message_update"


@_event
class MessageEndEvent(_Event):
    """A message is complete and stored (for the assistant: the final object itself)."""

    message: Any
    type: Literal["message_end"] = "message_end"


@_event
class ToolExecutionStartEvent(_Event):
    """A tool call is about to be prepared and run; ``args`` are the raw arguments."""

    tool_call_id: str
    tool_name: str
    args: Any
    type: Literal["tool_execution_start"] = "tool_execution_start"


@_event
class ToolExecutionUpdateEvent(_Event):
    """A running tool reported progress."""

    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any
    type: Literal["tool_execution_update"] = "tool_execution_update"


@_event
class ToolExecutionEndEvent(_Event):
    """A tool call finished; ``duration_ms`` is ``None`` when it never executed."""

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool
    duration_ms: float | None = None
    type: Literal["tool_execution_end"] = "tool_execution_end"


@_event
class CompactionStartEvent(_Event):
    """The transcript is about to be compacted (:mod:`agentkit.compaction`): ``reason`` is
    ``"threshold"`` (the next request neared the context window), ``"overflow"`` (the provider
    refused a request as too long) or ``"manual"`` (``agent.compact()``); ``tokens_before`` is
    the estimate of what the model would see, ``context_window`` the window it must fit."""

    reason: str
    strategy: str
    tokens_before: int
    context_window: int
    type: Literal["compaction_start"] = "compaction_start"


@_event
class CompactionEndEvent(_Event):
    """A compaction ended: ``compaction`` is the record it added to the transcript (a
    :class:`~agentkit.compaction.CompactionRecord`), or ``None`` with ``error`` saying why
    nothing was compacted (the transcript is then unchanged)."""

    reason: str
    compaction: Any = None
    error: str | None = None
    type: Literal["compaction_end"] = "compaction_end"


@_event
class SpendEvent(_Event):
    """A model request of the run was counted in a spend ledger
    (:class:`~agentkit.ledger.SpendPolicy`), after it ended: what it cost (``usd`` at the
    catalog's prices, ``tokens`` of every kind) under each of ``keys``. ``settled`` is
    ``False`` when the ledger could not record it (its reservation counts until it expires).
    A sub-agent's requests are its own run's events (the parent's listeners see them inside
    ``tool_execution_update``)."""

    keys: tuple[str, ...]
    usd: float
    tokens: int
    settled: bool = True
    type: Literal["spend"] = "spend"


AgentEvent = (
    AgentStartEvent
    | AgentEndEvent
    | TurnStartEvent
    | TurnEndEvent
    | MessageStartEvent
    | MessageUpdateEvent
    | MessageEndEvent
    | ToolExecutionStartEvent
    | ToolExecutionUpdateEvent
    | ToolExecutionEndEvent
    | CompactionStartEvent
    | CompactionEndEvent
    | SpendEvent
)
"""Any event of an agent run."""


def event_to_dict(event: AgentEvent | AssistantMessageEvent) -> dict[str, Any]:
    """An event as a JSON-ready dict, its ``type`` first."""
    return event_data(event)  # strict JSON: no NaN, no lone surrogate
