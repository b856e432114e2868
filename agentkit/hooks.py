"""What the loop's hooks receive and may return, with each hook's contract next to its types.

A hook may return one of these objects or a plain dict with the same keys (or ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .types import (
    AgentContext,
    AgentToolResult,
    AssistantMessage,
    FieldsEqRepr,
    Model,
    ThinkingLevel,
    ToolCall,
    ToolResultMessage,
    Usage,
)


@dataclass(eq=False, repr=False)
class BeforeToolCallContext(FieldsEqRepr):
    """For ``before_tool_call(ctx, signal)``, called after a call's arguments were validated.

    ``args`` is the validated dict; changes to it are executed without re-validation.
    Raising turns the call into an error result carrying the message.
    """

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    context: AgentContext


@dataclass(eq=False, repr=False)
class BeforeToolCallResult(FieldsEqRepr):
    """``block`` stops the call with ``reason`` (or "Tool execution was blocked") as its error;
    ``terminate`` on a blocked call asks the loop to stop after the batch."""

    block: bool = False
    reason: str | None = None
    terminate: bool = False


@dataclass(eq=False, repr=False)
class AfterToolCallContext(FieldsEqRepr):
    """For ``after_tool_call(ctx, signal)``, called after a tool ran, before its end event."""

    assistant_message: AssistantMessage
    tool_call: ToolCall
    args: Any
    result: AgentToolResult
    is_error: bool
    context: AgentContext


@dataclass(eq=False, repr=False)
class AfterToolCallResult(FieldsEqRepr):
    """Field-level replacements of the tool's result; ``None`` keeps a field.

    Replacing ``content`` without giving ``structured_content`` drops the old one.
    Raising replaces the whole result with an error carrying the message.
    """

    content: list[Any] | None = None
    details: Any = None
    structured_content: Any = None
    is_error: bool | None = None
    usage: Usage | None = None
    terminate: bool | None = None


@dataclass(eq=False, repr=False)
class TurnContext(FieldsEqRepr):
    """A finished turn, for ``finish_turn(turn, signal)`` and ``prepare_next_turn(turn)``."""

    message: AssistantMessage
    tool_results: list[ToolResultMessage]
    context: AgentContext
    new_messages: list[Any]


@dataclass(eq=False, repr=False)
class RequestContext(FieldsEqRepr):
    """For ``prepare_request(request, signal)``, called before every model request."""

    context: AgentContext
    model: Model
    thinking_level: ThinkingLevel


@dataclass(eq=False, repr=False)
class TurnUpdate(FieldsEqRepr):
    """What ``prepare_next_turn`` or ``prepare_request`` may change; ``None`` keeps a value.

    A ``context`` replaces the loop context for this request and every later one;
    ``thinking_level="off"`` turns reasoning off; ``messages`` (``prepare_next_turn`` only) are
    injected before any pending steering or follow-up messages.
    """

    context: AgentContext | None = None
    messages: list[Any] | None = None
    model: Model | None = None
    thinking_level: ThinkingLevel | None = None


@dataclass(eq=False, repr=False)
class ToolCallOutcome(FieldsEqRepr):
    """One call's final result; ``duration_ms`` is ``None`` for a call that never executed."""

    tool_call: ToolCall
    result: AgentToolResult
    is_error: bool
    duration_ms: float | None = None


def coerce_hook_result(value: Any, cls: type[Any]) -> Any:
    """A hook's return value as ``cls``: the object itself, a dict of its fields, or ``None``."""
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, dict):
        return cls(**value)
    raise TypeError(
        f"hook returned {type(value).__name__}; expected {cls.__name__}, a dict or None"
    )
