"""Agents on Celery (the ``celery`` extra): runs that survive a dead worker.

A run lives in a :class:`~agentkit.sessions.Session`, not in the task's arguments. The client
appends the user's message to the session and sends a task that names only the session
(:func:`submit`); the task loads the session and continues it (:func:`run_session`). That makes
the task idempotent by construction: a redelivered task, after its worker died, resumes from
what the session holds, re-running only idempotent tools (see docs/sessions.md).

Tasks made by :func:`agent_task` use ``acks_late`` and ``reject_on_worker_lost``: the message is
acknowledged when the run ends, and a pool process that dies mid-run puts it back in the queue.
One run per session at a time (:class:`SessionLease`); a user's message stored while a run goes
is taken by that run after its turn (see :class:`~agentkit.sessions.SessionWriter`).

A run's events go to its session store's run log under the task's id (:mod:`agentkit.runlog`),
which any process follows and controls as it does a web worker's run; they also go to a Redis
stream (:class:`RunChannel`, the older way), which any process can follow, relay as server-sent
events (:func:`sse_events`), or write steering and abort commands to.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from .._extras import needs_extra
from .._serialize import dumps, to_serialisable
from ..agent import Agent
from ..errors import AgentRunFailedError, SessionConflictError
from ..events import AgentEvent, event_to_dict, to_jsonable
from ..runlog import end_run, run_id
from ..sessions import Session, SessionStore, open_store, settle_aborted
from ..transcript import last_said, user_message
from ..types import TextContent, role_of

logger = logging.getLogger("agentkit.celery")

BuildAgent = Callable[[Session], Agent]
"""``build_agent(session) -> Agent``: the application's agent, made with ``session=session``."""

SUBMIT_RETRIES = 20
"""How often :func:`submit` reloads and appends again when a run appended in between."""

LEASE_SECONDS = 30.0
"""How long a session's run lease lasts without renewal: a run holds it (renewed every third
of this) while it goes; another run on the session waits for it, at most this long after the
holder's worker died."""

EVENTS_TTL = 24 * 3600
"""Seconds a finished run's event and command streams are kept for late followers."""

AgentRunFailed = AgentRunFailedError
"""Deprecated name of :class:`~agentkit.errors.AgentRunFailedError`, for code that catches it."""


# --- the run's Redis streams ------------------------------------------------------------------


def wire_event(event: AgentEvent) -> dict[str, Any]:
    """An agent event as JSON for followers. A ``message_update`` carries only its delta (not
    the whole partial message again), so a long answer costs linear, not quadratic, traffic."""
    data = event_to_dict(event)
    if data["type"] == "message_update":
        update = to_jsonable(getattr(event, "assistant_message_event", None)) or {}
        update.pop("partial", None)
        update.pop("message", None)
        return {"type": "message_update", "update": to_serialisable(update)}
    return data


class RunChannel:
    """The Redis streams of one run (``run_id``, the Celery task id): its events, published by
    the worker, and its commands (steer, follow up, abort), written by clients.

    Events are for watching, not for keeping: the session is the durable record. A follower
    that connects late reads the stream from its start (``last_id="0"``).
    """

    def __init__(self, redis_url: str, run_id: str, *, prefix: str = "agentkit:") -> None:
        try:
            import redis
        except ImportError as exc:
            raise ImportError(needs_extra("RunChannel (redis)", "celery")) from exc

        self._redis_errors = (redis.RedisError,)
        self.client: Any = redis.Redis.from_url(redis_url, socket_timeout=30)
        self.run_id = run_id
        self.events_key = f"{prefix}run:{run_id}:events"
        self.commands_key = f"{prefix}run:{run_id}:commands"
        self.applied_key = f"{prefix}run:{run_id}:applied"
        self.attempts_key = f"{prefix}run:{run_id}:attempts"
        self.aborted_key = f"{prefix}run:{run_id}:aborted"
        self.prefix = prefix
        self._publisher: _Publisher | None = None
        self.abort_requested = False
        """Whether a client asked this run to abort (possibly before it started)."""

    # worker side

    def publish(self, event: dict[str, Any]) -> None:
        """Append an event to the stream: handed to the publishing thread while one runs
        (:meth:`start_publishing`), else sent at once. A Redis failure is logged, never raised:
        the run must not fail because nobody can watch it."""
        publisher = self._publisher
        if publisher is not None:
            publisher.put(event)
        else:
            self._send([event])

    def start_publishing(self) -> None:
        """Send events from a thread of its own, batching what piles up, so the agent's thread
        never waits for the network."""
        self._publisher = _Publisher(self._send)

    def stop_publishing(self) -> None:
        """Send what is still queued, then stop the publishing thread."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.close()

    def _send(self, events: list[dict[str, Any]]) -> None:
        try:
            pipe = self.client.pipeline(transaction=False)
            for event in events:
                pipe.xadd(self.events_key, {"event": dumps(event)})
            pipe.expire(self.events_key, EVENTS_TTL)
            pipe.execute()
        except self._redis_errors:
            logger.warning("agentkit: could not publish %d run events", len(events), exc_info=True)

    def next_attempt(self) -> int:
        """Count one more attempt at the run (1 for the first delivery, 2 after a redelivery).

        Counted in Redis, since the broker's own ``redelivered`` flag is also set for messages
        that were only restored unstarted (a cancelled consumer's prefetch, say)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(self.attempts_key)
        pipe.expire(self.attempts_key, EVENTS_TTL)
        attempt, _ = pipe.execute()
        return int(attempt)

    def serve_commands(self, agent: Agent) -> Callable[[], None]:
        """Apply clients' commands to ``agent``: those already waiting at once, on this thread
        (before the run starts), the rest on a thread of its own. Return the function that stops
        that thread (and waits for it).

        Each command is applied once per run: the id of the last one applied is kept in Redis,
        so a redelivered task does not steer twice. An abort that arrived before the run started
        sets :attr:`abort_requested`. The thread blocks in one ``XREAD`` on the commands and on
        a wake-up stream of its own, which the stop function writes to.
        """
        last = self._get(self.applied_key) or "0"
        while True:  # what is waiting already
            batches = self.client.xread({self.commands_key: last}, count=100)
            if not batches:
                break
            last = self._apply_entries(agent, batches[0][1])
        wake_key = f"{self.commands_key}:wake:{uuid.uuid4().hex}"
        stopping = threading.Event()
        thread = threading.Thread(target=self._serve, args=(agent, last, wake_key, stopping),
                                  name="agentkit-run-commands", daemon=True)  # fmt: skip
        thread.start()

        def stop() -> None:
            stopping.set()
            try:
                self.client.xadd(wake_key, {"wake": "1"})
            except self._redis_errors:  # the thread sees `stopping` when its XREAD times out
                pass
            thread.join()

        return stop

    def _serve(self, agent: Agent, last: str, wake_key: str, stopping: threading.Event) -> None:
        try:
            while not stopping.is_set():
                try:
                    streams = {self.commands_key: last, wake_key: "0"}
                    batches = self.client.xread(streams, block=1000, count=100)
                    for key, entries in batches or []:
                        if key.decode() == wake_key:
                            return
                        last = self._apply_entries(agent, entries)
                except self._redis_errors:
                    logger.warning("agentkit: could not read run commands", exc_info=True)
                    if stopping.wait(1.0):
                        return
        finally:
            try:
                self.client.delete(wake_key)
            except self._redis_errors:
                pass

    def _apply_entries(self, agent: Agent, entries: list[Any]) -> str:
        last = ""
        for entry_id, fields in entries:
            last = entry_id.decode()
            self._apply(agent, json.loads(fields[b"command"]))
            self.client.set(self.applied_key, last, ex=EVENTS_TTL)
        return last

    def _apply(self, agent: Agent, command: dict[str, Any]) -> None:
        kind = command.get("type")
        if kind == "abort":
            # Durable before it takes effect: a worker killed inside the abort grace leaves a
            # redelivered attempt that must end aborted too, not carry on (aborted_before()).
            self.client.set(self.aborted_key, "1", ex=EVENTS_TTL)
            self.abort_requested = True
            agent.abort()
        elif kind == "steer":
            agent.steer(str(command["text"]))
        elif kind == "follow_up":
            agent.follow_up(str(command["text"]))
        else:
            logger.warning("agentkit: unknown run command %r", kind)

    def aborted_before(self) -> bool:
        """Whether an earlier attempt at this run applied a client's abort."""
        return bool(self.client.exists(self.aborted_key))

    def _get(self, key: str) -> str | None:
        value = self.client.get(key)
        return value.decode() if value is not None else None

    # client side

    def steer(self, text: str) -> None:
        """Ask the run to take ``text`` after its current tool batch."""
        self._command({"type": "steer", "text": text})

    def follow_up(self, text: str) -> None:
        """Ask the run to take ``text`` once it would otherwise stop."""
        self._command({"type": "follow_up", "text": text})

    def abort(self) -> None:
        """Ask the run to stop; it ends as aborted, and the task fails with AgentRunFailedError."""
        self._command({"type": "abort"})

    def _command(self, command: dict[str, Any]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(self.commands_key, {"command": dumps(command)})
        pipe.expire(self.commands_key, EVENTS_TTL)
        pipe.execute()

    def follow(
        self,
        last_id: str = "0",
        *,
        stop: threading.Event | None = None,
        idle: float = 15.0,
    ) -> Iterator[tuple[str | None, dict[str, Any] | None]]:
        """Yield ``(id, event)`` as the run publishes them, from after ``last_id``; yield
        ``(None, None)`` after ``idle`` seconds without one (an SSE relay sends a keep-alive
        then). Ends after the ``run_end`` event, or when ``stop`` is set (checked every 0.25 s).
        """
        waited = 0.0
        while stop is None or not stop.is_set():
            batches = self.client.xread({self.events_key: last_id}, block=250, count=500)
            if not batches:
                waited += 0.25
                if waited >= idle:
                    waited = 0.0
                    yield None, None
                continue
            waited = 0.0
            for _key, entries in batches:
                for entry_id, fields in entries:
                    last_id = entry_id.decode()
                    event = json.loads(fields[b"event"])
                    yield last_id, event
                    if event.get("type") == "run_end":
                        return

    def close(self) -> None:
        """Close the Redis connection."""
        self.client.close()


class _Publisher:
    """The thread that sends a run's events, in order, in batches of what has piled up."""

    _STOP = object()

    def __init__(self, send: Callable[[list[dict[str, Any]]], None]) -> None:
        self._send = send
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="agentkit-run-events", daemon=True)
        self._thread.start()

    def put(self, event: dict[str, Any]) -> None:
        self._queue.put(event)

    def close(self) -> None:
        self._queue.put(self._STOP)  # the last item ever put: everything before it is sent
        self._thread.join()

    def _work(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 500 and batch[-1] is not self._STOP:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            done = batch[-1] is self._STOP
            if done:
                batch.pop()
            if batch:
                self._send(batch)
            if done:
                return


def sse_events(channel: RunChannel, last_event_id: str | None = None) -> Iterator[str]:
    """A run's events as server-sent event frames, for a Flask or Django streaming response.

    Pass the browser's ``Last-Event-ID`` header back as ``last_event_id`` to resume without
    gaps. Quiet periods send a comment line, so a closed connection is noticed and the
    generator closed by the server::

        return Response(sse_events(RunChannel(url, run_id), request.headers.get("Last-Event-ID")),
                        mimetype="text/event-stream")
    """
    for entry_id, event in channel.follow(last_event_id or "0"):
        if event is None:
            yield ": keep-alive\n\n"
            continue
        yield f"id: {entry_id}\nevent: {event['type']}\ndata: {dumps(event)}\n\n"


# --- one run per session at a time -------------------------------------------------------------

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
redis.call('RPUSH', KEYS[2], '1')
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
"""


class SessionLease:
    """One run per session at a time, across workers: a Redis key naming the run that holds it.

    A second task for a session (a user's second :func:`submit` while the first run goes)
    waits in :meth:`acquire` until the first run releases the lease, or until it expires
    (``seconds`` after its worker died: a live holder renews it from a thread of its own). The
    same run delivered again (its worker died) takes its own lease over at once.
    """

    def __init__(self, client: Any, session_name: str, run_id: str, *,
                 prefix: str = "agentkit:", seconds: float = LEASE_SECONDS) -> None:  # fmt: skip
        self._client, self.run_id = client, run_id
        self.key = f"{prefix}lease:{session_name}"
        self._released_key = f"{prefix}lease-released:{session_name}"
        self._ms = int(seconds * 1000)
        self._stopping = threading.Event()  # set when the lease is released: stop renewing
        self._renewer: threading.Thread | None = None

    def acquire(self) -> None:
        """Block until this run holds the lease (woken by a release; re-checked each second
        for a lease that expired), then keep renewing it until :meth:`release`."""
        client = self._client
        while not client.set(self.key, self.run_id, nx=True, px=self._ms):
            holder = client.get(self.key)
            if holder is not None and holder.decode() == self.run_id:
                client.set(self.key, self.run_id, px=self._ms)  # our own earlier attempt's
                break
            client.blpop([self._released_key], timeout=1)
        self._renewer = threading.Thread(target=self._renew, name="agentkit-session-lease",
                                         daemon=True)  # fmt: skip
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stopping.wait(self._ms / 3000):
            try:
                self._client.eval(_RENEW, 1, self.key, self.run_id, self._ms)
            except Exception:  # the next renewal tries again; expiry is the fallback
                logger.warning("agentkit: could not renew a session lease", exc_info=True)

    def release(self) -> None:
        """Stop renewing, give the lease up and wake a run waiting for it."""
        self._stopping.set()
        if self._renewer is not None:
            self._renewer.join()
        self._client.eval(_RELEASE, 2, self.key, self._released_key, self.run_id, self._ms)


# --- running a session ------------------------------------------------------------------------


def run_session(session: Session, build_agent: BuildAgent, channel: RunChannel | None = None,
                *, attempt: int = 1) -> dict[str, Any]:  # fmt: skip
    """Continue ``session`` with the agent ``build_agent`` makes, until the run ends.

    Safe to call again for the same session after a crash: the agent settles interrupted tool
    calls as it loads, and a session that already ends in a final answer is not run again.
    Returns ``{"session", "answer", "messages"}`` (the number of messages stored); raises
    :class:`AgentRunFailedError` for a run that ended in an error or was aborted.
    """
    if channel is not None and channel.aborted_before():
        _end_aborted(session, channel, attempt)
    agent = build_agent(session)
    stop_commands: Callable[[], None] | None = None
    try:
        if channel is not None:
            channel.publish({"type": "run_start", "session": session.name, "attempt": attempt})
            channel.start_publishing()
            agent.subscribe(lambda event: channel.publish(wire_event(event)))
            stop_commands = channel.serve_commands(agent)
        aborted = threading.Event()

        def note_abort(event: AgentEvent) -> None:  # an abort may end a run on a tool result
            signal = agent.signal
            if event.type == "agent_end" and signal is not None and signal.aborted:
                aborted.set()

        agent.subscribe(note_abort)
        history = [m for m in agent.state.messages if role_of(m) != "system"]
        if not history:
            raise AgentRunFailedError(f"session {session.name!r} is empty: there is nothing to run")
        if channel is not None and channel.abort_requested:
            raise AgentRunFailedError("aborted: a client aborted the run before it started")
        waiting: list[Any] = []
        if role_of(last_said(history)) != "assistant":
            # The run keeps the task's id in the session store's run log, so any process
            # follows and controls it there as it would a web worker's run (agentkit.runlog),
            # and an attempt delivered again goes on with the same log.
            given = run_id(channel.run_id) if channel is not None else contextlib.nullcontext()
            with given:
                waiting = agent.continue_().pending_approvals
        if aborted.is_set():
            raise AgentRunFailedError("aborted: the run was aborted")
        result = _waiting(session, waiting) if waiting else _outcome(session, agent.state.messages)
    except BaseException as exc:
        if channel is not None:
            channel.stop_publishing()
            channel.publish({"type": "run_end", "ok": False, "error": str(exc)})
        raise
    finally:
        if stop_commands is not None:
            stop_commands()
        agent.close()
        if channel is not None:
            channel.stop_publishing()
    if channel is not None:  # after every event of the run: the publisher has stopped
        channel.publish({"type": "run_end", "ok": True, "answer": result["answer"]})
    return result


def _end_aborted(session: Session, channel: RunChannel, attempt: int) -> None:
    """A redelivered attempt at a run an earlier attempt aborted (its worker died inside the
    abort grace): the calls left without a result end as aborted, nothing runs, and the run
    fails as aborted, as the client asked."""
    settle_aborted(session)
    error = "aborted: a client aborted the run (applied by an earlier attempt)"
    channel.publish({"type": "run_start", "session": session.name, "attempt": attempt})
    channel.publish({"type": "run_end", "ok": False, "error": error})
    end_run(session.store, channel.run_id, "aborted", error)  # its run log says so too
    raise AgentRunFailedError(error)


def _waiting(session: Session, pending: list[Any]) -> dict[str, Any]:
    """The task's value for a run that ended waiting for approval (docs/approvals.md): no
    answer yet, and the calls to decide before the session is submitted again."""
    calls = [
        {"id": r.id, "tool_name": r.tool_name, "arguments": r.arguments,
         "requested_at": r.requested_at}
        for r in pending
    ]  # fmt: skip
    return {"session": session.name, "answer": "", "messages": session.version,
            "pending_approvals": calls}  # fmt: skip


def _outcome(session: Session, messages: list[Any]) -> dict[str, Any]:
    ended = messages[-1]  # a run_end record, when the last message does not say how it ended
    stop_reason = getattr(ended, "stop_reason", None)
    if stop_reason in ("error", "aborted"):
        raise AgentRunFailedError(f"{stop_reason}: {getattr(ended, 'error_message', None)}")
    content = getattr(last_said(messages), "content", [])
    answer = "".join(c.text for c in content if isinstance(c, TextContent))
    return {"session": session.name, "answer": answer, "messages": session.version}


# --- Celery wiring ----------------------------------------------------------------------------

# Guards _stores: each worker process opens a store once per URL (after the fork).
_stores_lock = threading.Lock()
_stores: dict[tuple[int, str], SessionStore] = {}


def _store(url: str) -> SessionStore:
    key = (os.getpid(), url)
    with _stores_lock:
        if key not in _stores:
            _stores[key] = open_store(url)
        return _stores[key]


def agent_task(
    app: Any,
    build_agent: BuildAgent,
    *,
    store: str,
    events_url: str | None = None,
    name: str = "agentkit.run_session",
    **options: Any,
) -> Any:
    """Register and return a Celery task ``task(session_name)`` that runs a session.

    ``store`` is the session store's URL (each worker process opens it once); ``events_url``
    the Redis for run events and commands (default: the app's broker). ``options`` go to
    ``app.task`` and may override the defaults: ``acks_late``, ``reject_on_worker_lost`` and
    ``track_started`` on. A task holds its session's :class:`SessionLease` while it runs, so
    a second task for the same session runs after it.
    """
    settings: dict[str, Any] = {
        "bind": True,
        "name": name,
        "acks_late": True,
        "reject_on_worker_lost": True,
        "track_started": True,
        **options,
    }

    @app.task(**settings)
    def run_agent_session(self: Any, session_name: str) -> dict[str, Any]:
        session = Session(session_name, _store(store))
        channel = RunChannel(events_url or app.conf.broker_url, self.request.id)
        try:
            lease = SessionLease(channel.client, session_name, self.request.id,
                                 prefix=channel.prefix)  # fmt: skip
            lease.acquire()  # one run per session: a second submit() runs after this one
            try:
                attempt = channel.next_attempt()
                return run_session(session, build_agent, channel, attempt=attempt)
            finally:
                lease.release()
        finally:
            channel.close()

    return run_agent_session


def submit(task: Any, session: Session, prompt: str | Any, **apply_options: Any) -> Any:
    """Append ``prompt`` (a string or a message) to ``session``, then send ``task`` for it.

    The message is durable before the task exists, so the task never needs it as an argument.
    While a run on the session is under way, that run takes the message like a steering
    message, after its current turn (see docs/sessions.md); the task sent here then runs after
    it (one run per session at a time) and finds the message answered, or answers it.
    Returns the Celery ``AsyncResult``; its id is the run's id for :class:`RunChannel`. A
    session whose tool calls wait for approval takes no new message
    (:class:`~agentkit.errors.ApprovalError`): decide them and send the task again to resume.
    """
    message = user_message(prompt) if isinstance(prompt, str) else prompt
    for attempt in range(SUBMIT_RETRIES):
        messages = session.load()
        if messages and role_of(messages[-1]) not in ("user", "assistant", "system"):
            from ..sessions.decisions import refuse_while_waiting

            refuse_while_waiting(messages)  # a message between calls and their results: refused
        try:
            session.append(message)
            break
        except SessionConflictError:  # a run appended meanwhile: the message goes after it
            if attempt == SUBMIT_RETRIES - 1:
                raise
    return task.apply_async((session.name,), **apply_options)
