"""Making and replaying a transcript's messages: the current prompt, its sections and declared
tools, a user message from a string, the assistant message that records a failure, and the view
the model gets of a compacted transcript (:func:`compacted_view`).

The transcript carries the system prompt and the tool declarations as system messages (SPEC 2.10
and 4.3). These functions replay them; :func:`declare_tool_changes` works out the system message
that tells the model when the executable tools differ from what it was told.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._serialize import clean_text, to_serialisable
from .types import (
    AssistantMessage,
    SystemMessage,
    TextContent,
    Tool,
    ToolRef,
    Usage,
    UserMessage,
    as_model,
    now_ms,
    role_of,
    to_tool_declaration,
)

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .types import ToolCall


TRUNCATED_TEXT = (
    'Tool call "{name}" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)
"""The error result of a call from a reply cut off by its token limit: it never runs."""


def user_message(text: str) -> UserMessage:
    """``text`` as a user message of one text block."""
    return UserMessage(content=[TextContent(text=text)])


def exception_text(exc: BaseException) -> str:
    """What a failure message says of ``exc``: its text (JSON-safe), else its class's name (an
    exception whose ``__str__`` fails is recorded too)."""
    try:
        return to_serialisable(str(exc)) or type(exc).__name__
    except Exception:
        return type(exc).__name__


def failure_message(
    reason: Literal["error", "aborted"],
    text: str,
    model: Any = None,
    *,
    partial: AssistantMessage | None = None,
    content: list[Any] | None = None,
) -> AssistantMessage:
    """The assistant message that records a failed (``"error"``) or aborted request or run.

    ``partial``, the message that was streaming, is marked in place (so the events that carried
    it see the end); without one, a new message of ``content`` (none by default) is made for
    ``model`` (``"unknown"`` for what it lacks). ``text`` becomes its ``error_message``, with
    lone surrogates replaced so the transcript still encodes.
    """
    if partial is not None:
        message = partial
    else:
        message = AssistantMessage(
            content=content or [],
            api=str(getattr(model, "api", "unknown")),
            provider=str(getattr(model, "provider", "unknown")),
            model=str(getattr(model, "id", "unknown")),
        )
    message.stop_reason = reason
    message.error_message = clean_text(text)
    return message


def as_system_message(message: Any) -> SystemMessage:
    """A system message as a :class:`SystemMessage` (dicts are validated)."""
    return as_model(SystemMessage, message)


def system_messages(messages: Sequence[Any]) -> list[SystemMessage]:
    """The system messages of ``messages``, in order."""
    return [as_system_message(m) for m in messages if role_of(m) == "system"]


def content_text(content: str | list[TextContent]) -> str:
    """A system message's content as text (a block list is joined with newlines)."""
    if isinstance(content, str):
        return content
    return "\n".join(block.text for block in content)


def _replay(systems: list[SystemMessage]) -> tuple[list[str], dict[str, str], list[Tool]]:
    """System messages replayed, in order: their non-empty texts, the sections left standing,
    and the declared tools (removals, then additions, message by message)."""
    texts = [t for t in (content_text(m.content) for m in systems) if t]
    sections: dict[str, str] = {}
    tools: dict[str, Tool] = {}
    for message in systems:
        for name, value in (message.sections or {}).items():
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = value
        for ref in message.tools_removed or []:
            tools.pop(ref.name, None)
        for decl in message.tools_added or []:
            tools[decl.name] = decl
    return texts, sections, list(tools.values())


def _render(content: str, sections: Mapping[str, str | None] | None) -> str:
    parts = [content]
    parts.extend(v for v in (sections or {}).values() if v)
    return "\n\n".join(p for p in parts if p)


def get_current_tools(messages: Sequence[Any]) -> list[Tool]:
    """The tools the model has been told about: removals then additions, message by message."""
    return _replay(system_messages(messages))[2]


def get_current_system_message(messages: Sequence[Any]) -> SystemMessage | None:
    """All system messages replayed into one, or ``None`` when there are none and no tools."""
    systems = system_messages(messages)
    if not systems:
        return None
    texts, sections, tools = _replay(systems)
    return SystemMessage(
        content="\n\n".join(texts),
        sections=sections or None,
        tools_added=tools or None,
        timestamp=systems[0].timestamp,
    )


def render_system_prompt(message: SystemMessage | None) -> str:
    """A replayed system message as prompt text: the content, then the non-empty sections."""
    if message is None:
        return ""
    return _render(content_text(message.content), message.sections)


def get_current_system_prompt(messages: Sequence[Any]) -> str:
    """The system prompt the transcript amounts to (``""`` when it has no system message)."""
    return render_system_prompt(get_current_system_message(messages))


def split_transcript(messages: Sequence[Any]) -> tuple[str, list[Tool], list[Any]]:
    """For providers with one system prompt: the replayed prompt, the declared tools, and the
    messages that are not system messages, in order.

    It runs before every request over the whole transcript, so it reads each message's role
    once and builds no replayed :class:`SystemMessage`."""
    systems: list[SystemMessage] = []
    rest: list[Any] = []
    for message in messages:
        if role_of(message) == "system":
            systems.append(as_system_message(message))
        else:
            rest.append(message)
    texts, sections, tools = _replay(systems)
    return _render("\n\n".join(texts), sections), tools, rest


def create_initial_system_message(
    system_prompt: str, tools: Sequence[Tool]
) -> SystemMessage | None:
    """The system message a new Agent starts with, or ``None`` for no prompt and no tools."""
    if not system_prompt and not tools:
        return None
    return SystemMessage(content=system_prompt or "", tools_added=list(tools) or None, timestamp=0)


def _decl_key(decl: Tool) -> str:
    return json.dumps(decl.model_dump(mode="json"), sort_keys=True)


def declare_tool_changes(
    context_messages: Sequence[Any], tools: Sequence[Any], pending: list[Any]
) -> list[Any]:
    """The pending messages, with a system message declaring any change to the tool set.

    ``tools`` is the executable set (anything with ``name``, ``description``, ``parameters``);
    the declared set is the replay of ``context_messages`` followed by ``pending``. The
    executable set always wins over ``tools_added`` a caller put in a pending system message.
    """
    last_system = _last_system_index(pending)
    if last_system is None:
        added, removed = _tool_changes(context_messages, pending, tools)
        if not added and not removed:
            return pending
        declaration = SystemMessage(
            content="", tools_added=added or None, tools_removed=removed or None, timestamp=now_ms()
        )
        return _before_first_non_system(pending, declaration)

    # The last pending system message carries the declaration: the replay starts from it
    # without its own tool fields, which the executable set replaces.
    original = as_system_message(pending[last_system])
    baseline = list(pending)
    baseline[last_system] = original.model_copy(update={"tools_added": None, "tools_removed": None})
    added, removed = _tool_changes(context_messages, baseline, tools)
    if not added and not removed and not original.tools_added and not original.tools_removed:
        return pending
    baseline[last_system] = original.model_copy(
        update={"tools_added": added or None, "tools_removed": removed or None}
    )
    return baseline


def _last_system_index(messages: Sequence[Any]) -> int | None:
    """The index of the last system message of ``messages``, or ``None``."""
    for index in range(len(messages) - 1, -1, -1):
        if role_of(messages[index]) == "system":
            return index
    return None


def _tool_changes(
    context_messages: Sequence[Any], pending: Sequence[Any], tools: Sequence[Any]
) -> tuple[list[Tool], list[ToolRef]]:
    """What to add and remove so that the declared tools (the replay of ``context_messages``
    then ``pending``) become ``tools``; a tool whose declaration changed is removed and added."""
    declared = {d.name: d for d in get_current_tools([*context_messages, *pending])}
    current: dict[str, Tool] = {}
    for t in tools:
        current.setdefault(t.name, to_tool_declaration(t))
    # each declaration serialised once (this runs before every request)
    changed = {
        name
        for name, decl in current.items()
        if name in declared and _decl_key(declared[name]) != _decl_key(decl)
    }
    added = [decl for name, decl in current.items() if name not in declared or name in changed]
    removed = [ToolRef(name=name) for name in declared if name not in current or name in changed]
    return added, removed


def _before_first_non_system(messages: list[Any], declaration: SystemMessage) -> list[Any]:
    """A copy of ``messages`` with ``declaration`` after the leading system messages."""
    result = list(messages)
    for index, message in enumerate(result):
        if role_of(message) != "system":
            result.insert(index, declaration)
            return result
    result.append(declaration)
    return result


class ToolDeclarations:
    """:func:`declare_tool_changes` for the requests of one run, without the replay when nothing
    it reads has changed.

    The loop asks before every request, usually with nothing pending. When the last answer
    declared nothing, and the transcript still has the same system message objects and the
    executable tools have the same names, descriptions and parameters, the answer is again
    "nothing to declare", so the transcript is not replayed. Anything else takes the full path.
    A system message changed in place (rather than replaced) is not noticed: the transcript's
    messages are values, replaced when they change.
    """

    def __init__(self) -> None:
        self._systems: list[Any] | None = None
        self._tools: list[tuple[Any, str, str, Any]] = []

    def __call__(
        self, context_messages: Sequence[Any], tools: Sequence[Any], pending: list[Any]
    ) -> list[Any]:
        """What :func:`declare_tool_changes` returns for the same arguments."""
        systems = [m for m in context_messages if role_of(m) == "system"]
        if not pending and self._unchanged(systems, tools):
            return pending
        result = declare_tool_changes(context_messages, tools, pending)
        if pending or result is not pending or any(isinstance(m, dict) for m in systems):
            self._systems = None  # the transcript is about to change, or may change in place
        else:
            self._systems = systems
            self._tools = [(t, t.name, t.description, copy.deepcopy(t.parameters)) for t in tools]
        return result

    def _unchanged(self, systems: list[Any], tools: Sequence[Any]) -> bool:
        known = self._systems
        if known is None or len(known) != len(systems) or len(self._tools) != len(tools):
            return False
        if not all(a is b for a, b in zip(known, systems, strict=True)):
            return False
        return all(
            tool is t
            and tool.name == name
            and tool.description == description
            and tool.parameters == parameters
            for tool, (t, name, description, parameters) in zip(tools, self._tools, strict=True)
        )


# --- the compacted view -----------------------------------------------------------------------

COMPACTION_ROLE = "compaction"
"""The role of a :class:`CompactionRecord` in a transcript (outside the roles a model reads)."""

SUMMARY_TEXT = (
    "The earlier part of this conversation was compacted to fit the context window. "
    "What it said, in summary:\n\n{summary}"
)
"""How the model is shown the latest compaction's summary, as a user message in its place."""


class CompactionRecord(BaseModel):
    """A compaction, as the transcript (and so a session) records it: an entry of role
    ``"compaction"``, appended after the messages it compacts, which stay in the transcript.

    The model sees the transcript's system messages, then ``summary`` (as a user message), then
    the messages from ``first_kept_index`` on (:func:`compacted_view`). ``index`` is where the
    record itself stood when it was made, so the view finds the kept messages again in a
    transcript that gained a leading message since. ``tokens_before`` and ``tokens_after``
    estimate what the model would have seen without it and sees with it; ``usage`` and
    ``requests`` are what making it cost (zero for ``trim``).
    """

    model_config = ConfigDict(extra="ignore", defer_build=True)

    role: Literal["compaction"] = "compaction"
    summary: str
    first_kept_index: int = Field(ge=0)
    index: int = Field(ge=0)
    tokens_before: int = 0
    tokens_after: int = 0
    strategy: str = "summarize"
    reason: str = "threshold"
    usage: Usage = Field(default_factory=Usage)
    requests: int = 0
    timestamp: int = Field(default_factory=now_ms)


def as_compaction(message: Any) -> CompactionRecord:
    """A compaction entry as a :class:`CompactionRecord` (a session loads it back as a dict)."""
    return as_model(CompactionRecord, message)


def latest_compaction(messages: Sequence[Any]) -> tuple[int, CompactionRecord] | None:
    """Where the transcript's latest compaction stands, and the record; ``None`` if it has none."""
    for position in range(len(messages) - 1, -1, -1):
        if role_of(messages[position]) == COMPACTION_ROLE:
            return position, as_compaction(messages[position])
    return None


def first_kept(position: int, record: CompactionRecord) -> int:
    """The index, in the transcript as it is now, of the first message ``record`` keeps (the
    record stands at ``position``)."""
    return min(max(record.first_kept_index + position - record.index, 0), position)


def compacted_view(messages: list[Any]) -> list[Any]:
    """What the model sees of ``messages``: the list itself when it holds no compaction; else
    its system messages before the latest compaction's first kept message, that compaction's
    summary as a user message, and the messages from the first kept one on (compaction entries
    and failed requests left out). The transcript itself is never changed: it stays the whole
    record.
    """
    found = latest_compaction(messages)
    if found is None:
        return messages
    position, record = found
    start = first_kept(position, record)
    head = [m for m in messages[:start] if role_of(m) == "system"]
    tail = [m for m in messages[start:] if role_of(m) != COMPACTION_ROLE and not _failed(m)]
    return [*head, user_message(SUMMARY_TEXT.format(summary=record.summary)), *tail]


def _failed(message: Any) -> bool:
    """A failed or aborted request's message (an overflow refused, say): the providers never
    send one, and a compacted view leaves it out for every stream function."""
    return isinstance(message, AssistantMessage) and message.stop_reason in ("error", "aborted")


# --- approvals: the requests, the decisions and the entries that keep them in a transcript -----

APPROVAL_ROLES = frozenset({"approval_request", "approval_decision", "approval_resume"})
"""The roles of the approval entries: never sent to the model."""


@dataclass(frozen=True)
class ApprovalRequest:
    """A tool call waiting for a decision: ``id`` is the tool call's id, ``arguments`` the
    validated arguments it would run with, ``requested_at`` when it was asked (seconds since the
    epoch), ``signal`` the run's abort signal (an ``on_request`` that asks someone can stop
    asking when it fires; ``None`` for a request read from a session)."""

    id: str
    tool_name: str
    arguments: dict[str, Any]
    requested_at: float = field(default_factory=time.time)
    signal: AbortSignal | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ApprovalDecision:
    """The outcome of a request: ``approved`` or not, with the decider's ``reason``.

    ``arguments``, on an approval, replaces the call's arguments (an edited call; they are
    validated again). ``deferred`` means nobody decided yet: the call waits in the session and
    the run ends. ``decided_at`` and ``expires_at`` (seconds since the epoch) date a recorded
    decision; one resumed after it expired denies the call.
    """

    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    deferred: bool = False
    decided_at: float | None = None
    expires_at: float | None = None


DEFERRED = ApprovalDecision(False, "waiting for approval", deferred=True)
"""The decision of a request nobody waits for: the call waits for a decision recorded later."""


class _Entry(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)


class ApprovalRequestEntry(_Entry):
    """A call that waits: its id, tool and arguments (as validated, the ones it would run
    with), when it was asked (seconds since the epoch); ``held`` for a call that needs no
    decision but waits for the calls before it (a sequential batch)."""

    role: Literal["approval_request"] = "approval_request"
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    requested_at: float = Field(default_factory=time.time)
    held: bool = False
    timestamp: int = Field(default_factory=now_ms)

    def request(self) -> ApprovalRequest:
        """The request as the broker's API shows it."""
        return ApprovalRequest(
            self.tool_call_id, self.tool_name, dict(self.arguments), self.requested_at
        )


class ApprovalDecisionEntry(_Entry):
    """A recorded decision: approved or denied with a ``reason``; an approval may carry
    edited ``arguments`` and an ``expires_at`` (seconds since the epoch)."""

    role: Literal["approval_decision"] = "approval_decision"
    tool_call_id: str
    approved: bool
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    decided_at: float = Field(default_factory=time.time)
    expires_at: float | None = None
    timestamp: int = Field(default_factory=now_ms)

    def decision(self) -> ApprovalDecision:
        """The decision as the broker's API shows it."""
        return ApprovalDecision(
            self.approved,
            self.reason,
            None if self.arguments is None else dict(self.arguments),
            decided_at=self.decided_at,
            expires_at=self.expires_at,
        )


class ApprovalResumeEntry(_Entry):
    """A resumer's claim on the waiting calls it is about to run or deny."""

    role: Literal["approval_resume"] = "approval_resume"
    tool_call_ids: list[str]
    timestamp: int = Field(default_factory=now_ms)


RUN_END_ROLE = "run_end"


class RunEndEntry(_Entry):
    """How a run ended, kept in the transcript when its last message does not say it (an abort
    during tools, a budget, a guardrail, a policy's own reason, a failed typed output), so that
    every reader of a session (the page, ``agentkit sessions``, an export) sees it. Never sent
    to the model."""

    role: Literal["run_end"] = "run_end"
    stop_reason: str
    error_message: str | None = None
    budget: str | None = None
    detail: dict[str, Any] | None = None
    timestamp: int = Field(default_factory=now_ms)


_ENTRIES: dict[str, type[_Entry]] = {
    "run_end": RunEndEntry,
    "approval_request": ApprovalRequestEntry,
    "approval_decision": ApprovalDecisionEntry,
    "approval_resume": ApprovalResumeEntry,
}


def decode_entry(data: dict[str, Any]) -> Any:
    """A stored approval or run-end entry as its model (a record of another role stays a
    dict)."""
    model = _ENTRIES.get(data.get("role", ""))
    return model.model_validate(data) if model is not None else data


def as_entry(message: Any) -> Any:
    """A transcript message, an approval entry decoded from its stored dict if it is one."""
    return decode_entry(message) if isinstance(message, dict) else message


def last_said(messages: Sequence[Any]) -> Any:
    """The transcript's last message that is part of the conversation: its last one, but for a
    :class:`RunEndEntry` that ends it (the record of how the run ended says nothing to go on
    from); ``None`` for an empty transcript."""
    for message in reversed(messages):
        if role_of(message) != RUN_END_ROLE:
            return message
    return None


def run_end_entry(result: Any) -> RunEndEntry | None:
    """The entry that records how a run ended, or ``None`` when its transcript says it already:
    it stopped, waits for approval (its entries say so), or its last assistant message carries
    the same stop reason (a failed, aborted or cut-off response)."""
    stop_reason = result.stop_reason
    if stop_reason in ("stop", "approval"):
        return None
    last = result.final_message
    if last is not None and last.stop_reason == stop_reason:
        return None
    ending = getattr(result, "ending", None)
    detail = getattr(ending, "detail", None)
    return RunEndEntry(
        stop_reason=stop_reason, error_message=result.error_message, budget=result.budget,
        detail=detail,
    )  # fmt: skip


def request_entry(call: ToolCall, held: bool = False) -> ApprovalRequestEntry:
    """The entry of a call that starts waiting."""
    return ApprovalRequestEntry(
        tool_call_id=call.id, tool_name=call.name, arguments=dict(call.arguments), held=held
    )
