"""A stored transcript as a person reads it: what the page's templates render.

Tool calls are shown with the result that answered them (matched by call id), their duration
and whether they failed, a long result or argument list folded with its size; thinking is kept
apart so the page can fold it; an assistant's text is its Markdown made safe
(:mod:`agentkit.ui.render`); an application's own records (a compaction, an approval, anything
with a role of its own) are shown as records; a system message without text is left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from markupsafe import Markup

from .._serialize import LLM_ROLES, to_jsonable
from ..types import (
    AssistantMessage,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    role_of,
)
from .render import Folded, fold, markdown


@dataclass
class CallView:
    """One tool call and what answered it."""

    id: str
    name: str
    arguments: str
    result: str | None = None
    is_error: bool = False
    duration_ms: float | None = None
    details: str | None = None
    cut: str | None = None
    """``cut: N of M`` when the result was cut to a preview (its whole text kept apart)."""

    @property
    def folded_arguments(self) -> Folded | None:
        """The arguments folded, when they are long."""
        return fold(self.arguments)

    @property
    def folded_result(self) -> Folded | None:
        """The result folded, when it is long (a 120,000-character page, say)."""
        return fold(self.result or "")


@dataclass
class Block:
    """One part of a message: ``text``, ``markdown`` (an assistant's text, with its safe
    ``html``), ``thinking``, ``image`` or ``call``."""

    kind: str
    text: str = ""
    call: CallView | None = None
    html: Markup | None = None

    @property
    def folded(self) -> Folded | None:
        """The text folded, when it is long."""
        return fold(self.text)


@dataclass
class Entry:
    """One message of the transcript, in the order it was stored."""

    index: int
    role: str
    blocks: list[Block] = field(default_factory=list)
    when: str = ""
    model: str = ""
    stop_reason: str = ""
    error: str | None = None
    usage: Usage | None = None
    record: str | None = None
    """An application's own record (any role outside the model's four), as indented JSON."""
    timestamp: int | None = None
    ended_runs: list[Any] = field(default_factory=list)
    """The runs that ended after this message and before the next (their states)."""
    said_by_run: bool = False
    """A ``run_end`` record whose run's end the page shows from the run's log instead."""


@dataclass
class Totals:
    """What a session's model replies used and cost, and how its last one ended."""

    messages: int = 0
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cost: float = 0.0
    stop_reason: str = ""

    def add(self, usage: Usage) -> None:
        """Count one reply's usage."""
        self.input += usage.input
        self.output += usage.output
        self.cache_read += usage.cache_read
        self.cost += usage.cost.total


def when(timestamp_ms: int | None) -> str:
    """A stored millisecond timestamp as UTC text for the page (empty when unknown)."""
    if not timestamp_ms:
        return ""
    moment = datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    """``value`` as indented JSON (what the page shows of arguments, details and records)."""
    return json.dumps(to_jsonable(value), indent=2, ensure_ascii=False, default=str)


def content_text(content: Any) -> list[Block]:
    """The blocks of a user message's or a tool result's content."""
    if isinstance(content, str):
        return [Block("text", content)]
    blocks = []
    for part in content or []:
        if isinstance(part, TextContent):
            blocks.append(Block("text", part.text))
        elif isinstance(part, ImageContent):
            blocks.append(Block("image", part.mime_type))
        else:
            blocks.append(Block("text", pretty(part)))
    return blocks


def _joined(blocks: list[Block]) -> str:
    return "\n".join(b.text if b.kind == "text" else f"[image {b.text}]" for b in blocks)


def transcript(messages: list[Any]) -> tuple[list[Entry], Totals]:
    """The entries of a stored transcript and its totals."""
    entries: list[Entry] = []
    calls: dict[str, CallView] = {}
    totals = Totals(messages=len(messages))
    for index, message in enumerate(messages):
        role = role_of(message) or "?"
        stamp = getattr(message, "timestamp", None)
        entry = Entry(index=index, role=role, when=when(stamp),
                      timestamp=stamp if isinstance(stamp, int) else None)  # fmt: skip
        if isinstance(message, AssistantMessage):
            _assistant(message, entry, calls, totals)
        elif isinstance(message, ToolResultMessage):
            answered = calls.get(message.tool_call_id)
            if answered is not None and answered.result is None:
                answered.result = _joined(content_text(message.content))
                answered.is_error = message.is_error
                answered.duration_ms = message.duration_ms
                answered.details = None if message.details is None else pretty(message.details)
                continue  # shown with its call
            entry.blocks = content_text(message.content)
            entry.error = "failed" if message.is_error else None
        elif role == "tool_output":  # a kept output: its megabytes of text are not shown
            if _cut(message, calls):
                continue  # shown on its call
            entry.blocks = [Block("text", "A tool output kept whole (its call is not here).")]
        elif role in LLM_ROLES:
            entry.blocks = [b for b in content_text(getattr(message, "content", ""))
                            if b.kind != "text" or b.text]  # fmt: skip
            if role == "system":
                entry.blocks += _system_notes(message)
                if not entry.blocks:
                    continue  # a system message that says nothing is no box
        else:
            _record(message, role, entry, totals)
        entries.append(entry)
    return entries, totals


def _cut(record: Any, calls: dict[str, CallView]) -> bool:
    """Mark the call whose result a kept output (``agentkit.context``) cut; whether it did."""
    data = record if isinstance(record, dict) else to_jsonable(record)
    call = calls.get(str(data.get("tool_call_id")))
    chars, shown = data.get("chars"), data.get("shown")
    if call is None or not isinstance(chars, int) or not isinstance(shown, int):
        return False
    call.cut = f"cut: {chars - shown:,} of {chars:,} characters"
    return True


def _assistant(message: AssistantMessage, entry: Entry, calls: dict[str, CallView],
               totals: Totals) -> None:  # fmt: skip
    """Fill ``entry`` from an assistant message: its Markdown, thinking and calls (remembered
    in ``calls`` for the results that answer them), its usage counted in ``totals``."""
    entry.model = f"{message.provider}:{message.model}"
    entry.stop_reason = message.stop_reason
    entry.error = message.error_message
    entry.usage = message.usage
    totals.add(message.usage)
    totals.stop_reason = message.stop_reason
    for part in message.content:
        if isinstance(part, TextContent) and part.text:
            entry.blocks.append(Block("markdown", part.text, html=markdown(part.text)))
        elif isinstance(part, ThinkingContent):
            shown = "[redacted]" if part.redacted else part.thinking
            entry.blocks.append(Block("thinking", shown))
        elif isinstance(part, ToolCall):
            call = CallView(part.id, part.name, pretty(part.arguments))
            calls[part.id] = call
            entry.blocks.append(Block("call", call=call))


def _record(message: Any, role: str, entry: Entry, totals: Totals) -> None:
    """Fill ``entry`` from an application's own record (a role outside the model's four)."""
    data = to_jsonable(message)
    entry.record = pretty(message)
    said = record_summary(data)
    if said:
        entry.blocks.append(Block("text", said))
    if role == "run_end" and isinstance(data, dict):  # how the run ended
        entry.stop_reason = totals.stop_reason = str(data.get("stop_reason"))
        entry.error = data.get("error_message")


def _system_notes(message: Any) -> list[Block]:
    """What a system message says besides its text: the tools it declares or withdraws."""
    notes = []
    added = [t.name for t in getattr(message, "tools_added", None) or []]
    removed = [t.name for t in getattr(message, "tools_removed", None) or []]
    if added:
        notes.append(Block("note", "Tools: " + ", ".join(added)))
    if removed:
        notes.append(Block("note", "Tools withdrawn: " + ", ".join(removed)))
    return notes


def record_summary(data: Any) -> str:
    """One line saying what an application's own record is (a compaction's summary, an
    approval asked, decided or resumed); empty for a record the page does not know."""
    if not isinstance(data, dict):
        return ""
    role, call = data.get("role"), data.get("tool_call_id", "")
    if role == "approval_request":
        return f"Approval asked for {data.get('tool_name')} ({call})."
    if role == "approval_decision":
        verdict = "Approved" if data.get("approved") else "Denied"
        reason = f": {data['reason']}" if data.get("reason") else ""
        edited = " (with edited arguments)" if data.get("arguments") is not None else ""
        return f"{verdict} {call}{edited}{reason}"
    if role == "approval_resume":
        return f"Resumed {', '.join(data.get('tool_call_ids') or [])}."
    if role == "run_end":
        limit = f" ({data['budget']})" if data.get("budget") else ""
        said = f": {data['error_message']}" if data.get("error_message") else ""
        return f"The run ended: {data.get('stop_reason')}{limit}{said}"
    if role == "guardrail":
        return guardrail_summary(data)
    summary = data.get("summary")
    return summary if isinstance(summary, str) else ""


_GUARDRAIL_ACTIONS = {"trip": "stopped the run", "redact": "redacted", "error": "failed"}
_GUARDRAIL_POINTS = {
    "input": "the input", "tool_call": "a tool call", "tool_result": "a tool result",
    "output": "the answer",
}  # fmt: skip


def guardrail_summary(data: dict[str, Any]) -> str:
    """A guardrail's record in a line: ``Guardrail secrets stopped the run on the answer: ...``."""
    action = _GUARDRAIL_ACTIONS.get(data.get("action", ""), str(data.get("action")))
    point = _GUARDRAIL_POINTS.get(data.get("point", ""), str(data.get("point")))
    call = f" ({data['tool_call_id']})" if data.get("tool_call_id") else ""
    return f"Guardrail {data.get('guardrail')} {action} on {point}{call}: {data.get('reason')}"
