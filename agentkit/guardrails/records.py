"""How a guardrail's action is kept in the transcript: a :class:`GuardrailRecord`, an entry of
role ``"guardrail"`` (outside the roles a model reads: ``convert_to_llm`` never sends it), and
how later requests honour the records of the input (:class:`InputRecords`).

A record says which guardrail acted, where, how (``trip``, ``redact`` or ``error``) and why.
An input record also points back at the user message it is about (``target``: how many
entries before the record it stands), so that every later request, a session's next run
included, sends the model the redacted text (``content``) or, for input that tripped, nothing
of it. The transcript itself keeps what the user wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..types import ImageContent, TextContent, UserMessage, as_model, now_ms, role_of

GUARDRAIL_ROLE = "guardrail"
"""The role of a :class:`GuardrailRecord` in a transcript."""


class GuardrailRecord(BaseModel):
    """A guardrail's action, as the transcript (and so a session) keeps it. ``count`` is how
    many parts one redaction replaced; ``tool_call_id`` the call of a ``tool_call`` or
    ``tool_result`` record; ``target`` and ``content`` those of an input record (see the
    module)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    role: Literal["guardrail"] = "guardrail"
    guardrail: str
    point: str
    action: Literal["trip", "redact", "error"]
    reason: str
    count: int = 1
    tool_call_id: str | None = None
    target: int | None = None
    content: list[TextContent | ImageContent] | None = None
    timestamp: int = Field(default_factory=now_ms)


def as_record(message: Any) -> GuardrailRecord:
    """A guardrail entry as a :class:`GuardrailRecord` (a session loads it back as a dict)."""
    return as_model(GuardrailRecord, message)


class InputRecords:
    """The input records of one run's transcript, read as it grows: which user messages the
    model is sent redacted (their record's ``content``) and which not at all (their input
    tripped a guardrail or failed one). Messages are matched by identity: the request's view
    holds the transcript's own message objects."""

    def __init__(self) -> None:
        self._read = 0  # how much of the transcript has been read
        self._changes: dict[int, tuple[Any, UserMessage | None]] = {}  # id -> (message, view)

    def read(self, transcript: Sequence[Any]) -> None:
        """Take the records added since the last read (the transcript only grows in a run)."""
        for position in range(self._read, len(transcript)):
            entry = transcript[position]
            if role_of(entry) != GUARDRAIL_ROLE:
                continue
            record = as_record(entry)
            if record.point != "input" or record.target is None:
                continue
            index = position - record.target
            if not 0 <= index < position or role_of(transcript[index]) != "user":
                continue
            message = transcript[index]
            if record.action == "redact" and record.content is not None:
                view: UserMessage | None = as_model(UserMessage, message).model_copy(
                    update={"content": list(record.content)}
                )
            else:
                view = None
            self._changes[id(message)] = (message, view)
        self._read = len(transcript)

    @property
    def empty(self) -> bool:
        """Whether no record changes what the model is sent."""
        return not self._changes

    def apply(self, messages: list[Any]) -> list[Any]:
        """``messages`` (a request's view) as the model is to see them; the same list when no
        record applies."""
        changes = self._changes
        if not changes or not any(id(m) in changes for m in messages):
            return messages
        shown = []
        for message in messages:
            change = changes.get(id(message))
            if change is None or change[0] is not message:
                shown.append(message)
            elif change[1] is not None:
                shown.append(change[1])
        return shown
