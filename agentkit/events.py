"""The events of both layers: agent events (what a run is doing) and provider stream events (how
an assistant message arrives). Each is a frozen dataclass with a literal ``type``.

Provider events carry ``partial``, the one live :class:`AssistantMessage` being filled in, not a
snapshot. :func:`event_to_dict` turns any event into JSON-ready data (for logs and ``--json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

from pydantic import BaseModel

from .types import (
    AgentToolResult,
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    to_serialisable,
)

# --- provider stream events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartEvent:
    """The stream has begun; ``partial`` is the message that the next events fill in."""

    partial: AssistantMessage
    type: Literal["start"] = "start"


@dataclass(frozen=True, slots=True)
class TextStartEvent:
    """A text block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["text_start"] = "text_start"


@dataclass(frozen=True, slots=True)
class TextDeltaEvent:
    """More text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class TextEndEvent:
    """The text block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["text_end"] = "text_end"


@dataclass(frozen=True, slots=True)
class ThinkingStartEvent:
    """A thinking block begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["thinking_start"] = "thinking_start"


@dataclass(frozen=True, slots=True)
class ThinkingDeltaEvent:
    """More reasoning text for the block at ``content_index``."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True)
class ThinkingEndEvent:
    """The thinking block at ``content_index`` is complete; ``content`` is its whole text."""

    content_index: int
    content: str
    partial: AssistantMessage
    type: Literal["thinking_end"] = "thinking_end"


@dataclass(frozen=True, slots=True)
class ToolCallStartEvent:
    """A tool call begins at ``content_index``."""

    content_index: int
    partial: AssistantMessage
    type: Literal["toolcall_start"] = "toolcall_start"


@dataclass(frozen=True, slots=True)
class ToolCallDeltaEvent:
    """More of the tool call's JSON arguments (``delta`` is raw text)."""

    content_index: int
    delta: str
    partial: AssistantMessage
    type: Literal["toolcall_delta"] = "toolcall_delta"


@dataclass(frozen=True, slots=True)
class ToolCallEndEvent:
    """The tool call at ``content_index`` is complete, with its parsed arguments."""

    content_index: int
    tool_call: ToolCall
    partial: AssistantMessage
    type: Literal["toolcall_end"] = "toolcall_end"


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The stream ended normally; ``message`` is the final assistant message."""

    reason: Literal["stop", "length", "tool_use"]
    message: AssistantMessage
    type: Literal["done"] = "done"


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The stream failed or was aborted; ``error`` is the final message, with ``error_message``."""

    reason: Literal["error", "aborted"]
    error: AssistantMessage
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


@dataclass(frozen=True, slots=True)
class AgentStartEvent:
    """A run has begun."""

    type: Literal["agent_start"] = "agent_start"


@dataclass(frozen=True, slots=True)
class AgentEndEvent:
    """A run has ended; ``messages`` are the messages it added."""

    messages: list[Any] = field(default_factory=list)
    type: Literal["agent_end"] = "agent_end"


@dataclass(frozen=True, slots=True)
class TurnStartEvent:
    """A turn (one model request and the tools it asks for) begins."""

    type: Literal["turn_start"] = "turn_start"


@dataclass(frozen=True, slots=True)
class TurnEndEvent:
    """A turn has ended with the assistant ``message`` and its ``tool_results``, in call order."""

    message: Any
    tool_results: list[ToolResultMessage] = field(default_factory=list)
    type: Literal["turn_end"] = "turn_end"


@dataclass(frozen=True, slots=True)
class MessageStartEvent:
    """A message enters the transcript (for a streamed assistant: a copy of the partial)."""

    message: Any
    type: Literal["message_start"] = "message_start"


@dataclass(frozen=True, slots=True)
class MessageUpdateEvent:
    """The streaming assistant message changed; ``assistant_message_event`` says how."""

    message: Any
    assistant_message_event: AssistantMessageEvent
    type: Literal["message_update"] = "message_update"


@dataclass(frozen=True, slots=True)
class MessageEndEvent:
    """A message is complete and stored (for the assistant: the final object itself)."""

    message: Any
    type: Literal["message_end"] = "message_end"


@dataclass(frozen=True, slots=True)
class ToolExecutionStartEvent:
    """A tool call is about to be prepared and run; ``args`` are the raw arguments."""

    tool_call_id: str
    tool_name: str
    args: Any
    type: Literal["tool_execution_start"] = "tool_execution_start"


@dataclass(frozen=True, slots=True)
class ToolExecutionUpdateEvent:
    """A running tool reported progress."""

    tool_call_id: str
    tool_name: str
    args: Any
    partial_result: Any
    type: Literal["tool_execution_update"] = "tool_execution_update"


@dataclass(frozen=True, slots=True)
class ToolExecutionEndEvent:
    """A tool call finished; ``duration_ms`` is ``None`` when it never executed."""

    tool_call_id: str
    tool_name: str
    result: AgentToolResult
    is_error: bool
    duration_ms: float | None = None
    type: Literal["tool_execution_end"] = "tool_execution_end"


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


def to_jsonable(value: Any) -> Any:
    """Turn events, pydantic models and containers of them into JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    role = getattr(value, "role", None)
    if isinstance(role, str):  # an application's own message object
        data = {k: v for k, v in vars(value).items() if not k.startswith("_")}
        return to_jsonable(data)
    return repr(value)


def event_to_dict(event: AgentEvent | AssistantMessageEvent) -> dict[str, Any]:
    """An event as a JSON-ready dict, its ``type`` first."""
    data = to_serialisable(to_jsonable(event))  # strict JSON: no NaN, no lone surrogate
    assert isinstance(data, dict)
    return {"type": data.pop("type"), **data}
