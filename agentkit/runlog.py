"""Runs any process can follow and control: every run of an agent with a session writes its
events, in order and numbered, to a run log its session's store keeps.

    run = agent.start("Summarise the report")          # agent = Agent(..., session=...)
    ...
    # Anywhere else: another thread, another worker process, another machine.
    for event in runlog.attach(store, run.id, after=0):  # live, ends with the run's end
        print(event.seq, event.type)
    runlog.abort(store, run.id)                        # reaches the run through the store

What a follower gets (see docs/runlog.md):

- **Order and exactly once.** Each event has a sequence number, 1, 2, ... in the order the run
  emitted it; ``attach(..., after=n)`` yields every event after ``n`` once, in order, and ends
  with the ``run_end`` event, which says how the run ended (its ``stop_reason``: ``stop``,
  ``aborted``, ``error``, ``approval``, ... or ``interrupted`` when its process died).
- **Crashes.** A live run shows it is alive every :data:`LEASE` / 4 seconds; when its process
  dies, the first follower that sees no sign of it for :data:`LEASE` seconds ends its log as
  ``interrupted``, so no follower waits for ever.
- **Bounded.** Text deltas that pile up while the store is busy are written as one; an event
  larger than :data:`MAX_EVENT_BYTES` is logged as a stub saying its size; past
  :data:`MAX_EVENTS` events a message's deltas are written once it ends; an ended run's log is
  kept :attr:`~agentkit.sessions.runlog_base.RunLogStore.keep` seconds (7 days by default).
  The session's transcript stays the durable record of the messages.

Commands (:func:`steer`, :func:`follow_up`, :func:`interrupt`, :func:`abort`, :func:`approve`,
:func:`deny`) are queued in the store and applied by the process that runs the run: at once on
Redis (a blocking read) and PostgreSQL (``LISTEN``/``NOTIFY``), within
:attr:`~agentkit.sessions.runlog_sqlite.SqliteRunLog.poll` seconds on SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import IO, Any

from ._serialize import dumps, event_data, to_serialisable
from .errors import RunLogError, RunNotFoundError
from .sessions import SessionStore
from .sessions.runlog_base import RunInfo, RunLogStore, check_run_id

__all__ = [
    "LEASE",
    "RunEvent",
    "RunInfo",
    "aattach",
    "abort",
    "approve",
    "attach",
    "compact",
    "deny",
    "end_run",
    "export_jsonl",
    "follow",
    "follow_up",
    "interrupt",
    "live_runs",
    "log_record",
    "logged",
    "new_run_id",
    "run_id",
    "run_info",
    "runs",
    "steer",
]

LEASE = RunLogStore.lease
"""The default lease (seconds): a live run that shows no sign of life for this long is ended as
``interrupted`` by whoever looks (its process beats every quarter of this). Set another on a
store's log (``store.run_log().lease``), alike in every process of a site."""

MAX_EVENT_BYTES = 256 * 1024
"""An event whose JSON is larger is logged as a stub naming its size (the transcript has it)."""

MAX_EVENTS = 200_000
"""Past this many events, a run's text deltas are held and written as one when their message
ends, so a log grows with the number of messages and tool calls, not of tokens."""

SLICE = 1.0
"""Longest single wait of a follower (seconds): how late it notices ``stop`` or a dead run."""

Store = SessionStore | RunLogStore
"""A session store, or its run log (``store.run_log()``): what these functions take."""

DELTAS = frozenset({"text_delta", "thinking_delta", "toolcall_delta"})


# --- what is logged --------------------------------------------------------------------------


def log_record(event: Any) -> dict[str, Any]:
    """An agent event as the JSON data a run log keeps (``type`` first, ``t`` its time in
    milliseconds). A text update keeps only its delta; the messages a later event carries in
    full (a streamed reply's start, ``turn_end``, ``agent_end``) are left out of it."""
    kind = event.type
    if kind == "message_update":
        update = event.assistant_message_event
        data: dict[str, Any] = {"type": update.type}
        if update.type in DELTAS:
            data.update(content_index=update.content_index, delta=update.delta)
        elif update.type == "toolcall_end":
            data.update(content_index=update.content_index,
                        tool_call=to_serialisable(update.tool_call.model_dump(mode="json")))  # fmt: skip
        elif hasattr(update, "content_index"):
            data["content_index"] = update.content_index
        elif hasattr(update, "reason"):
            data["reason"] = update.reason
        record = {"type": kind, "update": data}
    elif kind == "message_start" and getattr(event.message, "role", None) in ("assistant",
                                                                                "tool_result"):
        record = {"type": kind, "message": _message_head(event.message)}
    elif kind in ("message_start", "message_end") and _is_kept_output(event.message):
        record = {"type": kind, "message": _kept_output_head(event.message)}
    elif kind == "turn_end":
        message = event.message
        record = {"type": kind, "stop_reason": getattr(message, "stop_reason", None),
                  "tool_results": len(event.tool_results)}  # fmt: skip
    elif kind == "agent_end":
        record = {"type": kind, "messages": len(event.messages)}
    else:
        record = event_data(event)
    record["t"] = int(time.time() * 1000)
    return record


KEPT_OUTPUT_ROLE = "tool_output"
"""The role of a tool result's whole text that :mod:`agentkit.context` keeps (megabytes, at
times): the session holds it; a run log, which follows the run, says only what it is."""


def _is_kept_output(message: Any) -> bool:
    role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
    return role == KEPT_OUTPUT_ROLE


def _kept_output_head(message: Any) -> dict[str, Any]:
    """A kept output without its text."""
    get = message.get if isinstance(message, dict) else lambda name: getattr(message, name, None)
    names = ("role", "id", "tool_call_id", "tool_name", "chars", "shown")
    return {name: get(name) for name in names}


def _message_head(message: Any) -> dict[str, Any]:
    """What a message's start says of a message its end gives whole."""
    head = {"role": message.role}
    for name in ("tool_call_id", "tool_name", "provider", "model"):
        value = getattr(message, name, None)
        if value is not None:
            head[name] = value
    return head


def encode_record(record: dict[str, Any]) -> str:
    """``record`` as JSON text, or a stub naming its size when it is larger than
    :data:`MAX_EVENT_BYTES`."""
    text = dumps(record)
    if len(text) <= MAX_EVENT_BYTES // 4 or len(text.encode("utf-8")) <= MAX_EVENT_BYTES:
        return text
    stub = {"type": record.get("type"), "t": record.get("t"), "truncated": len(text.encode())}
    for name in ("tool_call_id", "tool_name"):
        if name in record:
            stub[name] = record[name]
    message = record.get("message")
    if isinstance(message, dict):
        stub["message"] = _message_head_of(message)
    return dumps(stub)


def _message_head_of(message: dict[str, Any]) -> dict[str, Any]:
    keys = ("role", "tool_call_id", "tool_name", "stop_reason", "usage", "is_error")
    return {k: message[k] for k in keys if k in message}


# --- run ids ----------------------------------------------------------------------------------


def new_run_id() -> str:
    """A fresh run id (a random UUID's hex)."""
    return uuid.uuid4().hex


class _Given:
    """A run id :func:`run_id` gives, taken by the first run that starts in its block."""

    def __init__(self, value: str) -> None:
        self.value: str | None = value
        self.lock = threading.Lock()  # guards value: taken once, whichever thread asks

    def take(self) -> str | None:
        with self.lock:
            value, self.value = self.value, None
            return value


_given: ContextVar[_Given | None] = ContextVar("agentkit_run_id", default=None)


@contextlib.contextmanager
def run_id(value: str) -> Iterator[None]:
    """Give the next run started in this block (in this context) the id ``value``: how a Celery
    task's run keeps the task's id, and a run delivered again its log."""
    token = _given.set(_Given(check_run_id(value)))
    try:
        yield
    finally:
        _given.reset(token)


def take_given_run_id() -> str | None:
    """The id :func:`run_id` gives the run starting now, once (``None`` outside its block)."""
    given = _given.get()
    return given.take() if given is not None else None


# --- following a run -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunEvent:
    """One logged event: its sequence number, its type and its data (the JSON record, with
    ``seq`` and ``t``, its time in milliseconds)."""

    seq: int
    type: str
    data: dict[str, Any] = field(repr=False)

    @property
    def time_ms(self) -> int | None:
        """When the run emitted the event (milliseconds since the epoch)."""
        t = self.data.get("t")
        return t if isinstance(t, int) else None


def _event(seq: int, record: str, after: int) -> RunEvent:
    data = json.loads(record)
    first = data.pop("from", None)
    cuts = data.pop("cuts", None)
    if isinstance(first, int) and isinstance(cuts, list) and first <= after < seq:
        update = data["update"]  # coalesced deltas, partly seen: the rest of them
        update["delta"] = update["delta"][cuts[after - first]:]
    data["seq"] = seq
    return RunEvent(seq, str(data.get("type", "")), data)


def _log(store: Store) -> RunLogStore:
    return store if isinstance(store, RunLogStore) else store.run_log()


def run_info(store: Store, run_id: str) -> RunInfo:
    """The run as the store keeps it: its session, whether it is live, how it ended. Raises
    :class:`~agentkit.errors.RunNotFoundError` for a run the store does not know."""
    log = _log(store)
    info = log.info(check_run_id(run_id))
    if info is None:
        raise RunNotFoundError(run_id, log.url)
    return info


def attach(store: Store, run_id: str, after: int = 0) -> Iterator[RunEvent]:
    """The run's events after sequence number ``after``, in order, each once: those logged so
    far at once, then the rest as the run emits them, until its ``run_end`` event (yielded
    last). A run that has ended gives its log and ends at once.

    Raises :class:`~agentkit.errors.RunNotFoundError` at once for an unknown run, and
    :class:`~agentkit.errors.RunLogError` for an ``after`` past the run's last event."""
    events = follow(store, run_id, after)
    return (event for event in events if event is not None)


def logged(store: Store, run_id: str, after: int = 0, limit: int = 50_000) -> list[RunEvent]:
    """The run's events logged so far after ``after`` (at most ``limit``), at once: what a
    page shows of a run, live or not. Raises as :func:`run_info` does."""
    log = _log(store)
    run_info(log, run_id)
    events: list[RunEvent] = []
    position = after
    while len(events) < limit:
        entries = log.read(run_id, position, min(2000, limit - len(events)))
        if not entries:
            break
        for seq, record in entries:
            events.append(_event(seq, record, position))
            position = seq
    return events


def follow(
    store: Store,
    run_id: str,
    after: int = 0,
    *,
    keepalive: float | None = None,
    stop: threading.Event | None = None,
) -> Generator[RunEvent | None, None, None]:
    """:func:`attach` for relays: also yields ``None`` after each ``keepalive`` seconds without
    an event (an SSE relay writes a comment then, which is how it notices a reader that left),
    and ends early, within :data:`SLICE` seconds, once ``stop`` is set."""
    log = _log(store)
    info = run_info(log, run_id)
    if not isinstance(after, int) or after < 0:
        raise RunLogError(f"after must be a sequence number (0 or more), not {after!r}")
    if after > info.last_seq:
        raise RunLogError(
            f"after={after} is past the last event of run {run_id!r} ({info.last_seq})"
        )
    return _follow(log, info, after, keepalive, stop)


def _follow(log: RunLogStore, info: RunInfo, after: int, keepalive: float | None,
            stop: threading.Event | None) -> Generator[RunEvent | None, None, None]:  # fmt: skip
    run_id, position = info.id, after
    quiet_since = time.monotonic()
    while info.live or position < info.last_seq:
        if stop is not None and stop.is_set():
            return
        entries = log.read(run_id, position, 500, wait=SLICE)
        for seq, record in entries:
            event = _event(seq, record, position)
            position = seq
            yield event
            if event.type == "run_end":
                return
        if entries:
            quiet_since = time.monotonic()
            continue
        if keepalive is not None and time.monotonic() - quiet_since >= keepalive:
            quiet_since = time.monotonic()
            yield None
        info = run_info(log, run_id)
        if info.live and info.heartbeat_age_ms >= log_lease_ms(log):
            declare_interrupted(log, run_id)


def log_lease_ms(log: RunLogStore) -> int:
    """The lease, in milliseconds, after which a silent live run of ``log`` is dead."""
    return int(log.lease * 1000)


def end_run(store: Store, run_id: str, stop_reason: str, error: str | None = None) -> bool:
    """End a live run's log with ``stop_reason`` from outside its run (a Celery attempt that
    ends the run without running it); whether this call ended it. A store without run logs, or
    a run it does not know, is no error: there is nothing to end."""
    record = {"type": "run_end", "stop_reason": stop_reason, "error": error,
              "t": int(time.time() * 1000)}  # fmt: skip
    try:
        return _log(store).end(check_run_id(run_id), dumps(record)) is not None
    except RunLogError:
        return False


def declare_interrupted(log: RunLogStore, run_id: str) -> bool:
    """End a live run whose process shows no sign of life as ``interrupted``; whether this
    call ended it (the store makes sure only one does, and never a run that beats again)."""
    record = {"type": "run_end", "stop_reason": "interrupted", "t": int(time.time() * 1000),
              "error": "the process running the run stopped showing it was alive"}  # fmt: skip
    return log.end(run_id, dumps(record), stale_ms=log_lease_ms(log)) is not None


async def aattach(store: Store, run_id: str, after: int = 0) -> AsyncIterator[RunEvent]:
    """:func:`attach` for asyncio callers: the store is read on a thread of its own, which
    ends (within :data:`SLICE` seconds) when the iteration does."""
    items: asyncio.Queue[Any] = asyncio.Queue(maxsize=1000)
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    end = object()

    def put(item: Any) -> None:
        while not stop.is_set():
            future = asyncio.run_coroutine_threadsafe(items.put(item), loop)
            try:
                future.result(timeout=SLICE)
                return
            except TimeoutError:
                future.cancel()  # the reader is slow or gone: look at stop, then try again

    def pump() -> None:
        try:
            for event in follow(store, run_id, after, stop=stop):
                if event is not None:
                    put(event)
            put(end)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
            put(exc)

    threading.Thread(target=pump, name="agentkit-attach", daemon=True).start()
    try:
        while True:
            item = await items.get()
            if item is end:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


# --- listing runs ----------------------------------------------------------------------------


def runs(store: Store, session: str | None = None, *, limit: int = 100) -> list[RunInfo]:
    """The runs of ``session`` (of every session for ``None``), newest first; a live run whose
    process died is ended as ``interrupted`` on the way."""
    log = _log(store)
    return [_settled(log, info) for info in log.runs(session, limit=limit)]


def live_runs(store: Store, *, limit: int = 1000) -> list[RunInfo]:
    """The runs going on now in any process, newest first (dead ones are ended as
    ``interrupted`` and left out)."""
    log = _log(store)
    return [i for i in (_settled(log, info) for info in log.runs(live=True, limit=limit)) if i.live]


def _settled(log: RunLogStore, info: RunInfo) -> RunInfo:
    if info.live and info.heartbeat_age_ms >= log_lease_ms(log):
        declare_interrupted(log, info.id)
        return log.info(info.id) or info
    return info


# --- controlling a run -----------------------------------------------------------------------


def _send(store: Store, run_id: str, command: dict[str, Any]) -> bool:
    log = _log(store)
    if not run_info(log, run_id).live:
        return False
    log.send(run_id, dumps(to_serialisable(command)))
    return True


def steer(store: Store, run_id: str, text: str) -> bool:
    """Give the run ``text`` after its current tool batch (``Agent.steer``), from any process;
    whether the run was live to take it."""
    return _send(store, run_id, {"type": "steer", "text": str(text)})


def follow_up(store: Store, run_id: str, text: str) -> bool:
    """Give the run ``text`` once it would otherwise stop (``Agent.follow_up``)."""
    return _send(store, run_id, {"type": "follow_up", "text": str(text)})


def interrupt(store: Store, run_id: str, text: str) -> bool:
    """Stop what the run does now and go on with ``text`` (``Agent.interrupt``)."""
    return _send(store, run_id, {"type": "interrupt", "text": str(text)})


def abort(store: Store, run_id: str) -> bool:
    """Abort the run; it ends with stop reason ``aborted``. Whether it was live."""
    return _send(store, run_id, {"type": "abort"})


def approve(store: Store, run_id: str, call_id: str, reason: str | None = None, *,
            arguments: dict[str, Any] | None = None) -> bool:  # fmt: skip
    """Approve a call the run waits on (its agent's :class:`~agentkit.Approvals`), or record
    the approval in its session when the call waits there."""
    return _send(store, run_id, {"type": "approve", "call_id": call_id, "reason": reason,
                                 "arguments": arguments})  # fmt: skip


def deny(store: Store, run_id: str, call_id: str, reason: str | None = None) -> bool:
    """Deny a call the run waits on, as :func:`approve`."""
    return _send(store, run_id, {"type": "deny", "call_id": call_id, "reason": reason})


def export_jsonl(store: Store, run_id: str, file: IO[str]) -> int:
    """Write the run's log to ``file`` as JSONL, the format of session exports: a header line
    (``{"format": "agentkit-runlog", "version": 1, "run_id", "session", "events"}``), then one
    event per line, with its ``seq``. Return the number of events written."""
    info = run_info(store, run_id)
    events = logged(store, run_id, limit=info.last_seq)
    header = {"format": "agentkit-runlog", "version": 1, "run_id": run_id,
              "session": info.session, "events": len(events)}  # fmt: skip
    file.write(dumps(header) + "\n")
    for event in events:  # escaped U+2028/2029 keep one event on one line (as sessions do)
        line = dumps(event.data).replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
        file.write(line + "\n")
    return len(events)


# --- coalescing an ended run's deltas ---------------------------------------------------------


def compact(store: Store, run_id: str) -> int:
    """Coalesce the runs of consecutive deltas of an ended run's log, each into one event;
    return how many events that removed. A follower that resumes from inside a coalesced run
    of deltas still gets exactly the text it had not seen (the event keeps where each delta
    ended). Raises :class:`~agentkit.errors.RunLogError` for a live run."""
    log = _log(store)
    info = run_info(log, run_id)
    if info.live:
        raise RunLogError(f"run {run_id!r} is live: only an ended run's deltas are coalesced")
    removed, position, group = 0, 0, _Group()
    while True:
        entries = log.read(run_id, position, 2000)
        if not entries:
            break
        for seq, record in entries:
            position = seq
            data = json.loads(record)
            if not group.takes(seq, data):
                removed += group.flush(log, run_id)
                group = _Group()
                group.takes(seq, data)
    return removed + group.flush(log, run_id)


class _Group:
    """Consecutive deltas of one block, coalesced into the last one's number."""

    def __init__(self) -> None:
        self.first = self.last = 0
        self.key: tuple[Any, ...] | None = None
        self.head: dict[str, Any] = {}
        self.text: list[str] = []
        self.cuts: list[int] = []

    def takes(self, seq: int, data: dict[str, Any]) -> bool:
        update = data.get("update") if data.get("type") == "message_update" else None
        if not isinstance(update, dict) or update.get("type") not in DELTAS or "from" in data:
            return False
        key = (update["type"], update.get("content_index"))
        if self.key is not None and (key != self.key or seq != self.last + 1):
            return False
        if self.key is None:
            self.key, self.first, self.head = key, seq, data
        self.last = seq
        self.text.append(str(update.get("delta", "")))
        self.cuts.append((self.cuts[-1] if self.cuts else 0) + len(self.text[-1]))
        return True

    def flush(self, log: RunLogStore, run_id: str) -> int:
        if self.key is None or self.last == self.first:
            return 0
        head = dict(self.head)
        head["update"] = {**head["update"], "delta": "".join(self.text)}
        head.update({"from": self.first, "cuts": self.cuts})
        log.replace(run_id, self.first, self.last, [(self.last, dumps(head))])
        return self.last - self.first
