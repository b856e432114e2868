"""The Agent's state: :class:`AgentState`, the live view of its transcript, tools, model and
streaming status (SPEC 2.8), updated for each event before any listener sees it; the queues
steering and follow-up messages wait in (:class:`PendingMessageQueue`); and how a model named
as ``"provider:id"`` is found (:func:`resolve_model`).
"""

from __future__ import annotations

import importlib
import threading
from collections import deque
from collections.abc import Sequence
from typing import Any, Literal, cast

from .abort import ABORTED_TEXT
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
from .transcript import get_current_system_prompt
from .types import AgentTool, Model, ThinkingLevel, placeholder_model, role_of

__all__ = ["AgentState", "PendingMessageQueue", "QueueMode", "resolve_model"]

QueueMode = Literal["all", "one-at-a-time"]


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

    def reduce(self, event: AgentEvent, aborted: bool = False) -> None:
        """Update the state for ``event`` (SPEC 5.6), before any listener sees it."""
        state = self
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
