"""What an agent once did, as evaluations read it: the turns a case sends (:data:`Turn`), a
:class:`Recording` of the messages that followed, its tool calls with their results
(:class:`ToolCallRecord`), and where a replay left a recording (:class:`Divergence`).

This is the data at the bottom of :mod:`agentkit.evals`: the evaluators, the cases, the replay,
the report and the runner all read it, and it reads none of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..results import RunUsage
from ..types import AssistantMessage, Message, TextContent, ToolCall, ToolResultMessage, UserMessage

Turn = str | UserMessage | list[UserMessage]
"""What one user turn says: a text, a user message (images too), or several messages sent as
one prompt."""


def turn_messages(turn: Turn) -> list[UserMessage]:
    """The user messages a turn sends, as ``agent.prompt()`` makes them."""
    if isinstance(turn, str):
        return [UserMessage(content=[TextContent(text=turn)])]
    if isinstance(turn, UserMessage):
        return [turn]
    return list(turn)


@dataclass
class ToolCallRecord:
    """One tool call of a run, with its result: what the trajectory checks read."""

    id: str
    name: str
    arguments: dict[str, Any]
    result: str = ""
    is_error: bool = False


def tool_calls_of(messages: Iterable[Any]) -> list[ToolCallRecord]:
    """The tool calls of ``messages`` in the order the model made them, each with the text of
    its result (``""`` when it has none)."""
    calls: list[ToolCallRecord] = []
    by_id: dict[str, list[ToolCallRecord]] = {}
    for message in messages:
        if isinstance(message, AssistantMessage):
            for block in message.content:
                if isinstance(block, ToolCall):
                    record = ToolCallRecord(block.id, block.name, dict(block.arguments))
                    calls.append(record)
                    by_id.setdefault(block.id, []).append(record)
        elif isinstance(message, ToolResultMessage):
            waiting = by_id.get(message.tool_call_id)
            if waiting:
                record = waiting.pop(0)
                record.result = "".join(getattr(c, "text", "") for c in message.content)
                record.is_error = message.is_error
    return calls


class Recording(BaseModel):
    """What an agent once did for a case: the messages that followed the case's first prompt
    (its replies, tool results and, for a whole session, the later prompts), and the system
    prompt it ran with (``None`` when the session did not store one)."""

    messages: list[Message] = Field(default_factory=list)
    system_prompt: str | None = None

    @property
    def assistant_messages(self) -> list[AssistantMessage]:
        """The recorded model replies, in order: what a replay plays back."""
        return [m for m in self.messages if isinstance(m, AssistantMessage)]

    @property
    def answer(self) -> str:
        """The text of the last recorded reply that has any."""
        for message in reversed(self.assistant_messages):
            if message.text:
                return message.text
        return ""

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """The recorded tool calls, with their recorded results."""
        return tool_calls_of(self.messages)

    @property
    def stop_reason(self) -> str | None:
        """Why the last recorded reply ended."""
        replies = self.assistant_messages
        return replies[-1].stop_reason if replies else None

    @property
    def usage(self) -> RunUsage:
        """The recorded replies' usage added up (their cost included)."""
        total = RunUsage()
        for message in self.assistant_messages:
            total.add(message.usage)
            total.requests += 1
        total.tool_calls = len(self.tool_calls)
        return total


DivergenceKind = Literal["tool_result", "refused", "unrecorded_request", "prompt",
                         "system_prompt", "messages"]  # fmt: skip


@dataclass
class Divergence:
    """Where a replay left its recording: at model request ``request`` (1-based), of
    ``kind``, as ``detail`` says."""

    request: int
    kind: DivergenceKind
    detail: str

    def __str__(self) -> str:
        return f"request {self.request}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {"request": self.request, "kind": self.kind, "detail": self.detail}
