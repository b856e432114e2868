"""The :class:`Session`: a named, durable, append-only transcript in a :class:`SessionStore`,
and how an :class:`~agentkit.Agent` writes to it and resumes from it.

``Agent(session=Session("chat-42"))`` loads the session, settles tool calls a crash interrupted
(by the agent's ``settle``, or :func:`settle_plainly`), and appends each message when it ends, before any listener sees
its ``message_end``: what a listener was told about is already durable.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

from ..abort import ABORTED_TEXT
from ..events import ToolExecutionEndEvent
from ..transcript import TRUNCATED_TEXT
from ..types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, role_of
from .base import (
    SessionConflictError,
    SessionCorruptError,
    SessionError,
    SessionStore,
    check_name,
    decode_message,
    encode_message,
)
from .decisions import decide, pending_approvals, waiting_call_ids
from .jsonl import read_jsonl, write_jsonl
from .order import MOVABLE, deferral_marker, in_turn_order, read_in_turn_order, release_marker

if TYPE_CHECKING:
    from ..transcript import ApprovalRequest

CRASHED_TEXT = (
    "Tool call {name} ({id}) was interrupted: the process running it stopped before it "
    "finished. It was not re-run, because the tool is not marked idempotent; it may or may not "
    "have taken effect."
)
"""The error result a non-idempotent tool call interrupted by a crash gets instead of a re-run."""

INTERRUPTED_TEXT = CRASHED_TEXT
"""The name :data:`CRASHED_TEXT` had in earlier releases (kept for code that imports it); an
interrupt's own text is :data:`agentkit.interrupts.INTERRUPTED_TEXT`."""

Settle = Callable[[Sequence[Any]], list[ToolResultMessage]]
"""``settle(messages)``: results for the tool calls a crash left without one (see
:meth:`Session.attach`)."""

DEFAULT_PATH = "~/.agentkit/sessions.db"

CONFLICT_RETRIES = 20
"""How many times one append defers other writers' new messages and tries again before it
gives up with :class:`SessionConflictError` (only a flood of writers gets there)."""


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
    changed the session raises :class:`SessionConflictError` and writes nothing. One agent at a
    time may be attached to a ``Session`` object (``Agent(session=...)``); give each agent its
    own object (they then conflict, rather than interleave, if both write).
    """

    def __init__(
        self, name: str, store: SessionStore | str | os.PathLike[str] | None = None
    ) -> None:
        self.name = check_name(name)
        self.store = store if isinstance(store, SessionStore) else open_store(store)
        # Guards _version and _writer: appends and attaches may come from several threads.
        self._lock = threading.Lock()
        self._version = 0
        self._writer: weakref.ref[SessionWriter] | None = None
        self._attaching = False  # an agent is being attached (its writer not made yet)

    @property
    def version(self) -> int:
        """How many records the session had when this object last read or wrote it."""
        return self._version

    def load(self) -> list[Any]:
        """The session's messages in the order a run reads them (see
        :mod:`agentkit.sessions.order`): oldest first, each tool result right after its call.
        A record that is not a message raises :class:`SessionCorruptError` naming it."""
        return self._read()[0]

    def _read(self) -> tuple[list[Any], bool]:
        """:meth:`load`, and whether deferred messages wait for a turn (see ``order``)."""
        records, version = self.store.load(self.name)
        messages = decode_records(self.store, self.name, records)
        with self._lock:
            self._version = version
        return read_in_turn_order(messages)

    def append(self, *messages: Any) -> int:
        """Append ``messages`` atomically; return the new version."""
        records = [encode_message(m) for m in messages]
        with self._lock:
            self._version = self.store.append(self.name, records, self._version)
            return self._version

    def pending_approvals(self) -> list[ApprovalRequest]:
        """The tool calls that wait in this session for a decision (see docs/approvals.md),
        read from the store: any process may list them."""
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
        decide(self, tool_call_id, approved=True, reason=reason, arguments=arguments,
               expires_in=expires_in)  # fmt: skip

    def deny(self, tool_call_id: str, reason: str | None = None) -> None:
        """Record the denial of a waiting call (the model reads ``reason``), as :meth:`approve`."""
        decide(self, tool_call_id, approved=False, reason=reason)

    def fork(self, new_name: str, upto: int | None = None) -> Session:
        """Copy the first ``upto`` stored records (all by default) into a new session
        ``new_name``."""
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
        """Write the session as JSONL to ``file``: its messages as stored, in the order
        :meth:`load` reads them, without the store's markers; return how many were written."""
        records, _ = self.store.load(self.name)
        messages = decode_records(self.store, self.name, records)
        stored = {id(message): record for message, record in zip(messages, records, strict=True)}
        return write_jsonl(self.name, [stored[id(m)] for m in in_turn_order(messages)], file)

    def attach(self, initial: Sequence[Any], settle: Settle | None = None) -> SessionWriter:
        """Bind an agent to this session (what ``Agent(session=...)`` calls).

        A new session starts with ``initial`` (the agent's system message), stored. An existing
        one keeps its own history, and tool calls a crash interrupted are settled first, by
        ``settle(messages)`` (the agent's: idempotent tools run again, see
        :mod:`agentkit.settle`), or, without one, by :func:`settle_plainly`. If its history has no leading
        system message (:func:`agentkit.integrations.celery.submit` makes such sessions), the
        agent's own system message leads the transcript in memory, unstored.

        Raises :class:`SessionError` if another live agent is attached to this object: two
        agents sharing one remembered version would interleave their turns unnoticed.
        """
        with self._lock:
            current = self._writer() if self._writer is not None else None
            if self._attaching or (current is not None and not current.detached):
                raise SessionError(
                    f"session {self.name!r}: this Session object is already attached to an "
                    "agent; give each agent its own Session(name, store), or close the first "
                    "agent"
                )
            self._attaching = True
        try:
            writer = self._attach(initial, settle or settle_plainly)
            with self._lock:
                self._writer = weakref.ref(writer)
            return writer
        finally:
            with self._lock:
                self._attaching = False

    def _attach(self, initial: Sequence[Any], settle: Settle) -> SessionWriter:
        for _ in range(CONFLICT_RETRIES):
            messages, waiting = self._read()
            if messages:
                break
            try:
                if initial:
                    self.append(*initial)
                return SessionWriter(self, list(initial), [])
            except SessionConflictError:
                continue  # another writer started the session meanwhile: read it again
        settled = settle(messages)
        if settled:
            self._append_past_inputs(settled)
        if waiting:  # the run that deferred them is gone: they stay where they are read
            self._append_past_inputs([release_marker()])
        if settled or waiting:
            messages, _ = self._read()  # in turn order, as any other reader's
        lead = [m for m in initial[:1] if role_of(m) == "system" != role_of(messages[0])]
        return SessionWriter(self, lead + messages, lead)

    def _append_past_inputs(self, messages: list[Any]) -> None:
        """Append ``messages`` (an open turn's settled results, or a release marker). Messages
        another writer stored since this object last read are inputs that reading places after
        the open turn anyway, so the append goes past them; another run's records (an assistant
        message, a tool result) raise :class:`SessionConflictError`."""
        records = [encode_message(m) for m in messages]
        start = self._version
        for _ in range(CONFLICT_RETRIES):
            try:
                with self._lock:
                    self._version = self.store.append(self.name, records, self._version)
                return
            except SessionConflictError as conflict:
                stored, version = self.store.load(self.name)
                foreign = decode_records(self.store, self.name, stored)[start:version]
                if not foreign or any(role_of(m) in MOVABLE for m in foreign):
                    raise conflict from None
                with self._lock:
                    self._version = version
        raise SessionConflictError(self.name, start, self._version)

    def _seen(self, version: int) -> None:
        """An attached writer wrote up to ``version``: what this object last saw."""
        with self._lock:
            self._version = version

    def __repr__(self) -> str:
        return f"Session({self.name!r}, store={self.store.display_url!r})"


def decode_records(store: SessionStore, name: str, records: Sequence[str]) -> list[Any]:
    """The stored ``records`` of session ``name`` as messages; a record that is not one raises
    :class:`SessionCorruptError` naming the store, the session and the position."""
    messages = []
    for position, record in enumerate(records):
        try:
            messages.append(decode_message(record))
        except Exception as exc:  # JSON, shape or field errors: all one corrupt record
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SessionCorruptError(
                store.display_url, name, position, f"is not a valid message ({reason})"
            ) from None
    return messages


class SessionWriter:
    """What an :class:`~agentkit.Agent` holds for its session: the messages it starts from,
    and what makes each of the run's messages durable before listeners hear of it.

    It keeps its own version of the session (what it last wrote or read). When another writer
    stored messages since (a user's second message sent with ``agentkit.celery.submit()`` while
    this run was under way), they are inputs, not a conflict: the writer stores a
    :data:`~agentkit.sessions.order.DEFERRED_ROLE` marker so every reader places them after the
    current turn, and hands the user messages among them to the run like steering messages,
    delivered there (:meth:`take_deferred`); the agent's memory takes the rest when the run
    ends (:meth:`sync`). Only an assistant message or tool result from another writer
    (another run on the session) raises :class:`SessionConflictError`.
    """

    def __init__(self, session: Session, messages: list[Any], lead: list[Any]) -> None:
        self.session = session
        self.messages = messages
        self._lead = lead  # the unstored system message that leads the transcript, if any
        # Guards _version and the lists below: the run's thread writes, others may detach.
        self._lock = threading.Lock()
        self._version = session.version
        # Results stored at their call's end event, by call id (a list: ids may repeat).
        self._results: dict[str, list[ToolResultMessage]] = {}
        self._deferred: list[Any] = []  # other writers' messages, not yet given to the run
        self._delivered: list[Any] = []  # given to the run: their message_end stores nothing
        self._diverged = False  # memory and store may differ in order until sync()
        self.detached = False

    def message_end(self, message: Any) -> None:
        """Make ``message`` durable; raises :class:`SessionError` (the run then fails)."""
        with self._lock:
            if isinstance(message, ToolResultMessage) and message.tool_call_id in self._results:
                waiting = self._results[message.tool_call_id]
                message.timestamp = waiting.pop(0).timestamp  # in memory as in the store
                if not waiting:
                    del self._results[message.tool_call_id]
                return
            for index, delivered in enumerate(self._delivered):
                if _same_input(delivered, message):
                    del self._delivered[index]  # stored already, by its own writer
                    return
            self._append([message])

    def tool_end(self, event: ToolExecutionEndEvent) -> None:
        """A call ended and is about to be announced: store its result now, so it is durable
        even if the run dies before the batch's result messages (which follow in call order)."""
        result = event.result
        message = ToolResultMessage(
            tool_call_id=event.tool_call_id,
            tool_name=event.tool_name,
            content=list(result.content or []),
            details=result.details,
            usage=result.usage,
            is_error=event.is_error,
            duration_ms=event.duration_ms,
        )
        with self._lock:
            self._append([message])
            self._results.setdefault(event.tool_call_id, []).append(message)

    def take_deferred(self) -> list[Any]:
        """Other writers' messages to inject now, like steering (all at once, in order)."""
        with self._lock:
            taken, self._deferred = self._deferred, []
            self._delivered.extend(taken)
            return taken

    def sync(self) -> list[Any] | None:
        """At a run's end: the transcript as stored (lead included) if the run's memory may
        differ from it (messages were deferred, or a failed batch's results were stored
        unannounced), else ``None``. A store that fails now is left for the next run."""
        with self._lock:
            if not (self._diverged or self._results or self._deferred):
                return None
            try:
                records, version = self.session.store.load(self.session.name)
                messages = decode_records(self.session.store, self.session.name, records)
                self._version = version
                ordered, waiting = read_in_turn_order(messages)
                if waiting:  # the run ended before the turn they wait for: place them here
                    self._append([release_marker()])
            except SessionError:
                return None
            self._results, self._deferred, self._delivered = {}, [], []
            self._diverged = False
            return self._lead + ordered

    def reorders(self) -> None:
        """The run about to start keeps its memory in another order than the store reads it
        (user messages stored behind a batch that waited are heard after its results): the
        memory is read again from the store at the run's end."""
        with self._lock:
            self._diverged = True

    def detach(self) -> None:
        """The agent is done with the session: another agent may attach to its object."""
        self.detached = True

    def _append(self, messages: list[Any]) -> None:
        """Append ``messages`` at this writer's version (caller holds the lock); defer other
        writers' messages found in between, or raise the conflict."""
        own = [encode_message(m) for m in messages]
        store, name, start = self.session.store, self.session.name, self._version
        records, known = own, 0  # known: foreign messages already deferred by this append
        for _ in range(CONFLICT_RETRIES):
            try:
                self._version = store.append(name, records, self._version)
                self.session._seen(self._version)
                return
            except SessionConflictError as conflict:
                stored, version = store.load(name)
                foreign = decode_records(store, name, stored)[start:version]
                if not foreign or any(role_of(m) in MOVABLE for m in foreign):
                    raise conflict from None  # another run writes this session
                # A user's message is for the run to answer: it gets it like a steer. Other
                # inputs (an application's own records) are only placed; the agent's memory
                # takes them when the run ends (sync), with no extra turn.
                self._deferred.extend(m for m in foreign[known:] if role_of(m) == "user")
                known = len(foreign)
                records = [encode_message(deferral_marker(len(foreign))), *own]
                self._version = version
                self._diverged = True
        raise SessionConflictError(name, start, self._version)


    def catch_up(self, messages: list[Any]) -> None:
        """Add to ``messages`` (the agent's transcript) the approval decisions recorded in the
        session since this writer last wrote (from another process, say).

        Only when decisions are all that was added: anything else (another resumer's claim,
        say) is left for this writer's next append to meet as a conflict, which is what keeps
        a resumed call from running twice."""
        session = self.session
        with self._lock:
            records, version = session.store.load(session.name)
            added = decode_records(session.store, session.name, records)[self._version :]
            if not added or any(role_of(m) != "approval_decision" for m in added):
                return
            self._version = version
            session._seen(version)
        messages.extend(added)

def _same_input(delivered: Any, message: Any) -> bool:
    """Whether ``message`` is the deferred input ``delivered`` coming back from the loop (the
    same object, or the copy the loop made cleaning it: same role and timestamp)."""
    if delivered is message or delivered == message:
        return True
    stamp = getattr(delivered, "timestamp", None)
    return (
        stamp is not None
        and role_of(delivered) == role_of(message)
        and stamp == getattr(message, "timestamp", None)
    )


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


def settle_plainly(messages: Sequence[Any]) -> list[ToolResultMessage]:
    """Results for the tool calls a crash interrupted, running nothing: each gets the
    :data:`CRASHED_TEXT` error result the model reads (a call of a reply cut off by its token
    limit, the result the loop gives such calls). How a session settles when the agent gives
    it no way of its own (the agent re-runs idempotent tools: :mod:`agentkit.settle`)."""
    assistant, calls = interrupted_tool_calls(messages)
    calls = [call for call in calls if call.id not in waiting_call_ids(messages)]
    cut_off = assistant is not None and assistant.stop_reason == "length"
    return [unsettled_result(call, cut_off) for call in calls]


def unsettled_result(call: ToolCall, cut_off: bool = False) -> ToolResultMessage:
    """The result of an interrupted call that does not run again."""
    text = TRUNCATED_TEXT if cut_off else CRASHED_TEXT
    return ToolResultMessage(
        tool_call_id=call.id, tool_name=call.name, details={}, is_error=True,
        content=[TextContent(text=text.format(name=call.name, id=call.id))],
    )  # fmt: skip


def settle_aborted(session: Session) -> None:
    """Settle the tool calls an aborted run left open when its process died (its worker was
    killed inside the abort grace): each gets an "Operation aborted" error result, and nothing
    runs again. Messages another writer stored meanwhile are read after them."""
    _assistant, calls = interrupted_tool_calls(session.load())
    if calls:
        session._append_past_inputs([
            ToolResultMessage(tool_call_id=call.id, tool_name=call.name, is_error=True,
                              content=[TextContent(text=ABORTED_TEXT)])
            for call in calls
        ])  # fmt: skip


def import_jsonl(store: SessionStore, file: IO[str], name: str | None = None) -> Session:
    """Import an export into ``store`` as ``name`` (default: the name in the file) and return
    the new :class:`~agentkit.sessions.Session`. All or nothing: a bad file or an existing
    session of that name writes nothing."""
    header, records = read_jsonl(file.read())
    session = Session(name or str(header.get("name") or ""), store)
    _create(session, records)
    return session
