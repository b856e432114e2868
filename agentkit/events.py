"""The events of both layers: agent events (what a run is doing) and provider stream events (how
an assistant message arrives). Each is a frozen dataclass with a literal ``type``.

The methods ``@dataclass(frozen=True)`` would generate for each class (``__init__``, ``__eq__``,
``__hash__``, ``__repr__``, the frozen ``__setattr__``) are written here instead: once in
:class:`_Event`, and a plain ``__init__`` in each class. Python 3.11 compiles generated methods
from source at import, which for these 22 classes was about a tenth of ``import agentkit``.

Provider events carry ``partial``, the one live :class:`AssistantMessage` being filled in, not a
snapshot. :func:`event_to_dict` turns any event into JSON-ready data (for logs and ``--json``).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field
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

_set = object.__setattr__  # how an event's own __init__ sets its fields (assignment raises)

_dataclass = dataclass(slots=True, init=False, repr=False, eq=False)


@dataclass_transform(frozen_default=True)
def _event(cls: type[_T]) -> type[_T]:
    """An event class's decorator: a dataclass (``fields()``, ``replace()``, ``asdict()`` work)
    with slots, whose methods come from :class:`_Event` and its own ``__init__``. Type checkers
    read it as a frozen dataclass, so assigning to an event's field is flagged before it raises."""
    return _dataclass(cls)


class _Event(FieldsEqRepr):
    """What every event shares: equality and ``repr`` by fields (:class:`FieldsEqRepr`),
    frozen (assigning or deleting a field raises ``dataclasses.FrozenInstanceError``), hashable
    when its fields are, and copyable and picklable."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(self._values())

    def __getstate__(self) -> tuple[Any, ...]:
        return self._values()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__match_args__, state, strict=True):
            _set(self, name, value)


# --- provider stream events -------------------------------------------------------------------


@_event
class StartEvent(_Event):
    """The stream has begun; ``partial`` is the message that the next events fill in."""

    partial: AssistantMessage
    type: Literal["start"] = "start"

    def __init__(self, partial: AssistantMessage, type: Literal["start"] = "start") -> None:
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class TextStartEvent(_Event):
    """A text block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["text_start"] = "text_start"

    def __init__(
        self,
        content_index: int,
        partial: AssistantMessage,
        type: Literal["text_start"] = "text_start",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class TextDeltaEvent(_Event):
    """More text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["text_delta"] = "text_delta"

    def __init__(
        self,
        content_index: int,
        delta: str,
        partial: AssistantMessage,
        type: Literal["text_delta"] = "text_delta",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "delta", delta)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class TextEndEvent(_Event):
    """The text block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["text_end"] = "text_end"

    def __init__(
        self,
        content_index: int,
        content: str,
        partial: AssistantMessage,
        type: Literal["text_end"] = "text_end",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "content", content)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ThinkingStartEvent(_Event):
    """A thinking block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["thinking_start"] = "thinking_start"

    def __init__(
        self,
        content_index: int,
        partial: AssistantMessage,
        type: Literal["thinking_start"] = "thinking_start",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ThinkingDeltaEvent(_Event):
    """More reasoning text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["thinking_delta"] = "thinking_delta"

    def __init__(
        self,
        content_index: int,
        delta: str,
        partial: AssistantMessage,
        type: Literal["thinking_delta"] = "thinking_delta",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "delta", delta)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ThinkingEndEvent(_Event):
    """The thinking block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["thinking_end"] = "thinking_end"

    def __init__(
        self,
        content_index: int,
        content: str,
        partial: AssistantMessage,
        type: Literal["thinking_end"] = "thinking_end",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "content", content)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ToolCallStartEvent(_Event):
    """A tool call begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["toolcall_start"] = "toolcall_start"

    def __init__(
        self,
        content_index: int,
        partial: AssistantMessage,
        type: Literal["toolcall_start"] = "toolcall_start",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ToolCallDeltaEvent(_Event):
    """More of the tool call's JSON arguments (``delta`` is raw text)."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["toolcall_delta"] = "toolcall_delta"

    def __init__(
        self,
        content_index: int,
        delta: str,
        partial: AssistantMessage,
        type: Literal["toolcall_delta"] = "toolcall_delta",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "delta", delta)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class ToolCallEndEvent(_Event):
    """The tool call at ``content_index`` is complete, with its parsed arguments."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: Literal["toolcall_end"] = "toolcall_end"

    def __init__(
        self,
        content_index: int,
        tool_call: ToolCall,
        partial: AssistantMessage,
        type: Literal["toolcall_end"] = "toolcall_end",
    ) -> None:
        _set(self, "content_index", content_index)
        _set(self, "tool_call", tool_call)
        _set(self, "partial", partial)
        _set(self, "type", type)


@_event
class DoneEvent(_Event):
    """The stream ended normally; ``message`` is the final assistant message."""

    reason: Literal["stop", "length", "tool_use"]
    message: AssistantMessage
    type: Literal["done"] = "done"

    def __init__(
        self,
        reason: Literal["stop", "length", "tool_use"],
        message: AssistantMessage,
        type: Literal["done"] = "done",
    ) -> None:
        _set(self, "reason", reason)
        _set(self, "message", message)
        _set(self, "type", type)


@_event
class ErrorEvent(_Event):
    """The stream failed or was aborted; ``error`` is the final message, with ``error_message``.

    ``provider_error`` is the :class:`~agentkit.ProviderError` that ended a failed request (its
    ``status`` and ``retry_after``), when the provider had one."""

    reason: Literal["error", "aborted"]
    error: AssistantMessage
    provider_error: ProviderError | None = None
    type: Literal["error"] = "error"

    def __init__(
        self,
        reason: Literal["error", "aborted"],
        error: AssistantMessage,
        provider_error: ProviderError | None = None,
        type: Literal["error"] = "error",
    ) -> None:
        _set(self, "reason", reason)
        _set(self, "error", error)
        _set(self, "provider_error", provider_error)
        _set(self, "type", type)


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

    def __init__(self, type: Literal["agent_start"] = "agent_start") -> None:
        _set(self, "type", type)


@_event
class AgentEndEvent(_Event):
    """A run has ended; ``messages`` are the messages it added."""

    messages: list[Any] = field(default_factory=list)
    type: Literal["agent_end"] = "agent_end"

    def __init__(
        self, messages: list[Any] | None = None, type: Literal["agent_end"] = "agent_end"
    ) -> None:
        _set(self, "messages", [] if messages is None else messages)
        _set(self, "type", type)


@_event
class TurnStartEvent(_Event):
    """A turn (one model request and the tools it asks for) begins."""

    type: Literal["turn_start"] = "turn_start"

    def __init__(self, type: Literal["turn_start"] = "turn_start") -> None:
        _set(self, "type", type)


@_event
class TurnEndEvent(_Event):
    """A turn has ended with the assistant ``message`` and its ``tool_results``, in call order."""

    message: Any
    tool_results: list[ToolResultMessage] = field(default_factory=list)
    type: Literal["turn_end"] = "turn_end"

    def __init__(
        self,
        message: Any,
        tool_results: list[ToolResultMessage] | None = None,
        type: Literal["turn_end"] = "turn_end",
    ) -> None:
        _set(self, "message", message)
        _set(self, "tool_results", [] if tool_results is None else tool_results)
        _set(self, "type", type)


@_event
class MessageStartEvent(_Event):
    """A message enters the transcript (for a streamed assistant: a copy of the partial)."""

    message: Any
    type: Literal["message_start"] = "message_start"

    def __init__(self, message: Any, type: Literal["message_start"] = "message_start") -> None:
        _set(self, "message", message)
        _set(self, "type", type)


@_event
class MessageUpdateEvent(_Event):
    """The streaming assistant message changed; ``assistant_message_event`` says how."""

    message: Any
    assistant_message_event: AssistantMessageEvent
    type: Literal["message_update"] = "message_update"

    def __init__(
        self,
        message: Any,
        assistant_message_event: AssistantMessageEvent,
        type: Literal["message_update"] = "message_update",
    ) -> None:
        _set(self, "message", message)
        _set(self, "assistant_message_event", assistant_message_event)
        _set(self, "type", type)


@_event
class MessageEndEvent(_Event):
    """A message is complete and stored (for the assistant: the final object itself)."""

    message: Any
    type: Literal["message_end"] = "message_end"

    def __init__(self, message: Any, type: Literal["message_end"] = "message_end") -> None:
        _set(self, "message", message)
        _set(self, "type", type)


@_event
class ToolExecutionStartEvent(_Event):
    """A tool call is about to be prepared and run; ``args`` are the raw arguments."""

    tool_call_id: str
    tool_name: str
    args: Any
    type: Literal["tool_execution_start"] = "tool_execution_start"

    def __init__(
        self,
        tool_call_id: str,
        tool_name: str,
        args: Any,
        type: Literal["tool_execution_start"] = "tool_execution_start",
    ) -> None:
        _set(self, "tool_call_id", tool_call_id)
        _set(self, "tool_name", tool_name)
        _set(self, "args", args)
        _set(self, "type", type)


@_event
class ToolExecutionUpdateEvent(_Event):
    """A running tool reported progress."""

    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any
    type: Literal["tool_execution_update"] = "tool_execution_update"

    def __init__(
        self,
        tool_call_id: str,
        tool_name: str,
        args: Any,
        partial_result: Any,
        type: Literal["tool_execution_update"] = "tool_execution_update",
    ) -> None:
        _set(self, "tool_call_id", tool_call_id)
        _set(self, "tool_name", tool_name)
        _set(self, "args", args)
        _set(self, "partial_result", partial_result)
        _set(self, "type", type)


@_event
class ToolExecutionEndEvent(_Event):
    """A tool call finished; ``duration_ms`` is ``None`` when it never executed."""

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool
    duration_ms: float | None = None
    type: Literal["tool_execution_end"] = "tool_execution_end"

    def __init__(
        self,
        tool_call_id: str,
        tool_name: str,
        result: AgentToolResult,
        is_error: bool,
        duration_ms: float | None = None,
        type: Literal["tool_execution_end"] = "tool_execution_end",
    ) -> None:
        _set(self, "tool_call_id", tool_call_id)
        _set(self, "tool_name", tool_name)
        _set(self, "result", result)
        _set(self, "is_error", is_error)
        _set(self, "duration_ms", duration_ms)
        _set(self, "type", type)


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
)
"""Any event of an agent run."""


def event_to_dict(event: AgentEvent | AssistantMessageEvent) -> dict[str, Any]:
    """An event as a JSON-ready dict, its ``type`` first."""
    return event_data(event)  # strict JSON: no NaN, no lone surrogate
