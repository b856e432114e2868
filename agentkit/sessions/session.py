"""The :class:`Session`: a named, durable, append-only transcript in a :class:`SessionStore`,
and how an :class:`~agentkit.Agent` writes to it and resumes from it.

``Agent(session=Session("chat-42"))`` loads the session, settles tool calls a crash interrupted
(:func:`settle_interrupted`), and appends each message when it ends, before any listener sees
its ``message_end``: what a listener was told about is already durable.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from ..tools import AgentTool, error_result
from ..types import AssistantMessage, ToolCall, ToolResultMessage, role_of
from .base import (
    SessionConflictError,
    SessionError,
    SessionStore,
    check_name,
    decode_message,
    encode_message,
)
from .jsonl import read_jsonl, write_jsonl

if TYPE_CHECKING:
    from ..approvals import ApprovalRequest

INTERRUPTED_TEXT = (
    "Tool call {name} ({id}) was interrupted: the process running it stopped before it "
    "finished. It was not re-run, because the tool is not marked idempotent; it may or may not "
    "have taken effect."
)
"""The error result a non-idempotent tool call interrupted by a crash gets instead of a re-run."""

DEFAULT_PATH = "~/.agentkit/sessions.db"


def open_store(url: str | os.PathLike[str] | None = None) -> SessionStore:
    """The store ``url`` names: ``sqlite:///path.db`` (or a plain path), ``redis://...`` or
    ``postgresql://...``. ``None`` means ``$AGENTKIT_SESSIONS``, else ``~/.agentkit/sessions.db``.
    """
    text = os.fspath(url) if url is not None else os.environ.get("AGENTKIT_SESSIONS", "")
    if not text:
        text = DEFAULT_PATH
    if text.startswith(("redis://", "rediss://", "unix://")):
        from .redis import RedisStore

        return RedisStore(text)
    if text.startswith(("postgresql://", "postgres://")):
        from .postgres import PostgresStore

        return PostgresStore(text)
    from .sqlite import SqliteStore

    if text.startswith("sqlite://"):
        text = text[len("sqlite://") :]  # sqlite:///var/db/sessions.db: an absolute path
    elif "://" in text:
        raise ValueError(
            f"unknown session store {text.split('://')[0]!r}: use sqlite, redis or postgresql"
        )
    return SqliteStore(text)


class Session:
    """A named transcript in ``store`` (a :class:`SessionStore`, a URL, or ``None`` for the
    default store). Messages are appended, never changed; ``fork`` copies, ``delete`` removes.

    The object remembers the version it last read or wrote: an append made after another writer
    changed the session raises :class:`SessionConflictError` and writes nothing.
    """

    def __init__(
        self, name: str, store: SessionStore | str | os.PathLike[str] | None = None
    ) -> None:
        self.name = check_name(name)
        self.store = store if isinstance(store, SessionStore) else open_store(store)
        # Guards _version: appends may come from several threads of one process.
        self._lock = threading.Lock()
        self._version = 0

    @property
    def version(self) -> int:
        """How many messages the session had when this object last read or wrote it."""
        return self._version

    def load(self) -> list[Any]:
        """The session's messages, oldest first (empty for a new session)."""
        records, version = self.store.load(self.name)
        with self._lock:
            self._version = version
        return [decode_message(r) for r in records]

    def append(self, *messages: Any) -> int:
        """Append ``messages`` atomically; return the new version."""
        records = [encode_message(m) for m in messages]
        with self._lock:
            self._version = self.store.append(self.name, records, self._version)
            return self._version

    def pending_approvals(self) -> list[ApprovalRequest]:
        """The tool calls that wait in this session for a decision (see docs/approvals.md),
        read from the store: any process may list them."""
        from ..deferred import pending_approvals

        return pending_approvals(self)

    def approve(
        self,
        tool_call_id: str,
        reason: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
        expires_in: float | None = None,
    ) -> None:
        """Record the approval of a waiting call, durably, from any process; ``arguments``
        runs it with these instead, ``expires_in`` (seconds) denies it if it resumes later.
        A call is decided once: a second decision raises :class:`~agentkit.errors.ApprovalError`."""
        from ..deferred import decide

        decide(self, tool_call_id, approved=True, reason=reason, arguments=arguments,
               expires_in=expires_in)  # fmt: skip

    def deny(self, tool_call_id: str, reason: str | None = None) -> None:
        """Record the denial of a waiting call (the model reads ``reason``), as :meth:`approve`."""
        from ..deferred import decide

        decide(self, tool_call_id, approved=False, reason=reason)

    def fork(self, new_name: str, upto: int | None = None) -> Session:
        """Copy the first ``upto`` messages (all by default) into a new session ``new_name``."""
        records, _ = self.store.load(self.name)
        copy = Session(new_name, self.store)
        _create(copy, records[:upto])
        return copy

    def delete(self) -> bool:
        """Remove the session from its store; return whether it existed."""
        with self._lock:
            self._version = 0
        return self.store.delete(self.name)

    def export_jsonl(self, file: IO[str]) -> int:
        """Write the session as JSONL to ``file``; return the number of messages written."""
        records, _ = self.store.load(self.name)
        return write_jsonl(self.name, records, file)

    def attach(self, initial: Sequence[Any], tools: Sequence[AgentTool]) -> SessionWriter:
        """Bind an agent to this session (what ``Agent(session=...)`` calls).

        A new session starts with ``initial`` (the agent's system message), stored. An existing
        one keeps its own history, and tool calls a crash interrupted are settled first. If its
        history has no leading system message (:func:`agentkit.integrations.celery.submit` makes such
        sessions), the agent's own system message leads the transcript in memory, unstored.
        """
        messages = self.load()
        if not messages:
            if initial:
                self.append(*initial)
            return SessionWriter(self, list(initial))
        settled = settle_interrupted(messages, tools)
        if settled:
            self.append(*settled)
        lead = [m for m in initial[:1] if role_of(m) == "system" != role_of(messages[0])]
        return SessionWriter(self, lead + messages + settled)

    def __repr__(self) -> str:
        return f"Session({self.name!r}, store={self.store.url!r})"


class SessionWriter:
    """What an :class:`~agentkit.Agent` holds for its session: the messages it starts from,
    and :meth:`message_end`, called for each message before listeners see it end."""

    def __init__(self, session: Session, messages: list[Any]) -> None:
        self.session = session
        self.messages = messages
        self._seen = session.version  # the stored messages the agent's transcript holds

    def message_end(self, message: Any) -> None:
        """Make ``message`` durable; raises :class:`SessionError` (the run then fails)."""
        self._seen = self.session.append(message)

    def catch_up(self, messages: list[Any]) -> None:
        """Add to ``messages`` (the agent's transcript) the approval decisions recorded in the
        session since this agent last wrote (from another process, say).

        Only when decisions are all that was added: anything else (another resumer's claim,
        say) is left for this agent's next append to meet as a conflict, which is what keeps
        a resumed call from running twice."""
        session = self.session
        records, version = session.store.load(session.name)
        added = [decode_message(r) for r in records[self._seen :]]
        if not added or any(role_of(m) != "approval_decision" for m in added):
            return
        with session._lock:
            session._version = version
        messages.extend(added)
        self._seen = version


def _create(session: Session, records: Sequence[str]) -> None:
    try:
        session._version = session.store.append(session.name, records, 0)
    except SessionConflictError:
        raise SessionError(
            f"session {session.name!r} already exists; nothing was written"
        ) from None


def interrupted_tool_calls(
    messages: Sequence[Any],
) -> tuple[AssistantMessage | None, list[ToolCall]]:
    """The last assistant message and those of its tool calls that have no result yet."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if role_of(message) != "assistant":
            continue
        if not isinstance(message, AssistantMessage) or message.stop_reason in ("error", "aborted"):
            return None, []
        answered = {
            m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolResultMessage)
        }
        calls = [c for c in message.content if isinstance(c, ToolCall) and c.id not in answered]
        return message, calls
    return None, []


def settle_interrupted(
    messages: Sequence[Any], tools: Sequence[AgentTool]
) -> list[ToolResultMessage]:
    """Results for the tool calls a crash interrupted, in call order.

    A tool marked ``idempotent`` runs again (on this thread, without the agent's hooks); any
    other gets an :data:`INTERRUPTED_TEXT` error result that the model reads. Nothing that was
    not marked idempotent runs twice.
    """
    from ..loop import AgentContext, run_tool_call

    assistant, calls = interrupted_tool_calls(messages)
    if calls and any(role_of(m) == "approval_request" for m in messages):
        from ..deferred import waiting_call_ids

        waiting = waiting_call_ids(messages)  # durably waiting for a decision: not interrupted
        calls = [call for call in calls if call.id not in waiting]
    results: list[ToolResultMessage] = []
    by_name = {t.name: t for t in tools}
    for call in calls:
        tool = by_name.get(call.name)
        if tool is not None and tool.idempotent and assistant is not None:
            outcome = run_tool_call(
                call,
                tools=tools,
                assistant_message=assistant,
                context=AgentContext(messages=list(messages), tools=list(tools)),
            )
            result, is_error, duration = outcome.result, outcome.is_error, outcome.duration_ms
        else:
            result = error_result(INTERRUPTED_TEXT.format(name=call.name, id=call.id))
            is_error, duration = True, None
        results.append(
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=list(result.content or []),
                details=result.details,
                usage=result.usage,
                is_error=is_error,
                duration_ms=duration,
            )
        )
    return results


def import_jsonl(store: SessionStore, file: IO[str], name: str | None = None) -> Session:
    """Import an export into ``store`` as ``name`` (default: the name in the file) and return
    the new :class:`~agentkit.sessions.Session`. All or nothing: a bad file or an existing
    session of that name writes nothing."""
    header, records = read_jsonl(file.read())
    session = Session(name or str(header.get("name") or ""), store)
    _create(session, records)
    return session
