"""How a run with a session keeps its run log (:mod:`agentkit.runlog`).

The Agent calls :func:`record_run` as such a run starts. It registers the run in its session's
store, then attaches to the run three things, each ending with it:

- a listener (:class:`_Recorder`), on the run's thread, that turns each event into its record
  and queues it: nothing on the run's thread waits for the store;
- a writer thread (``agentkit-run-log``) that numbers the records, coalesces the deltas that
  piled up while it wrote, appends them in batches, and beats while the run is quiet; it writes
  the run's end, the last record, when the run has ended;
- a control thread (``agentkit-run-control``) that applies the commands other processes send
  the run (steer, follow-up, interrupt, abort, approval decisions), each once.

Logging serves watchers: a store that fails is logged and the run goes on. A run found ended
by another process (declared ``interrupted`` because its beats stopped reaching the store) is
aborted, so it does what every follower was told.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from .errors import ApprovalError, RunLogError, SessionError
from .runlog import (
    DELTAS,
    MAX_EVENTS,
    compact,
    encode_record,
    log_record,
    take_given_run_id,
)
from .sessions.runlog_base import RunInfo, RunLogStore

if TYPE_CHECKING:
    from .approvals import Approvals
    from .run import Run
    from .sessions import Session

logger = logging.getLogger("agentkit.runlog")


class Agent(Protocol):
    """What a run log uses of an :class:`~agentkit.Agent`, named by its shape rather than
    imported: the Agent calls down into this module, and an import only ever points down."""

    approvals: Approvals | None

    def subscribe(self, listener: Callable[[Any], Any]) -> Callable[[], None]: ...
    def steer(self, message: Any) -> None: ...
    def follow_up(self, message: Any) -> None: ...
    def interrupt(self, message: Any) -> None: ...

BATCH = 500
"""Most records one append writes."""

WINDOW = 0.005
"""Seconds the writer gathers records after the first of a batch before it writes them: a
follower sees an event at most this much later, and a fast run makes a few large writes rather
than one per event (each a round trip to the store, and a wake-up of its thread)."""

COALESCE_OVER = 1000
"""An ended run that logged more deltas than this has them coalesced (:func:`runlog.compact`)."""

RETRIES = (0.2, 1.0)
"""Seconds between the attempts at an append the store refused (then the batch is dropped)."""

JOIN_TIMEOUT = 30.0
"""Longest wait at a run's end for its writer to write the last records (a store that hangs
must not hang the run's caller for ever; its operations have timeouts of their own)."""


def record_run(agent: Agent, run: Run, session: Session) -> None:
    """Give ``run`` (of ``agent``, with ``session``) its run log, before its worker starts:
    registered in the session's store, its events logged, its commands served. A store that
    keeps no run log, or that fails now, leaves the run unlogged (a failure is logged)."""
    given = take_given_run_id()
    if given is not None:
        run.id = given
    try:
        log = session.store.run_log()
        info = log.start(run.id, session.name)
    except RunLogError:
        return  # a store of the application's own, without run logs
    except SessionError:
        logger.warning("agentkit: run %s is not logged: its store failed", run.id, exc_info=True)
        return
    _Recorder(agent, run, session, log, info)


class _Recorder:
    """The run's listener and its end: what ties the writer and the control thread to it."""

    def __init__(self, agent: Agent, run: Run, session: Session, log: RunLogStore,
                 info: RunInfo) -> None:  # fmt: skip
        self._run = run
        self._writer = _Writer(log, run.id, info.last_seq, run.abort)
        self._writer.put({"type": "run_start", "run_id": run.id, "session": session.name,
                          "resumed": info.last_seq > 0, "t": _now()})  # fmt: skip
        self._unsubscribe = agent.subscribe(self)
        self._control = _Control(log, run.id, info.applied,
                                 _Commands(agent, run, session, self._writer))  # fmt: skip
        run.add_done_callback(self.finish)

    def __call__(self, event: Any) -> None:
        try:
            record = log_record(event)
        except Exception:  # noqa: BLE001 - a watcher's record must never fail the run
            logger.warning("agentkit: an event of run %s could not be logged", self._run.id,
                           exc_info=True)  # fmt: skip
            return
        self._writer.put(record)

    def finish(self, run: Run) -> None:
        """The run has ended (a done callback, on its thread): stop serving commands, write
        the rest of its events and its end, and wait for that."""
        self._unsubscribe()
        self._control.stop()
        self._writer.close(end_record(run))


def end_record(run: Run) -> dict[str, Any]:
    """The ``run_end`` record of a run that has ended: its stop reason (``aborted`` whenever
    the run was aborted, also inside a tool batch), error, waiting calls and usage."""
    record: dict[str, Any] = {"type": "run_end"}
    try:
        result = run._result_now()
        record.update(stop_reason=result.stop_reason, error=result.error_message,
                      usage=result.usage.model_dump(mode="json"))  # fmt: skip
        if result.pending_approvals:
            record["pending_approvals"] = [r.id for r in result.pending_approvals]
    except BaseException as exc:  # noqa: BLE001 - the run failed outside its loop
        record.update(stop_reason="error", error=str(exc) or type(exc).__name__)
    if run.signal.aborted:
        record["stop_reason"] = "aborted"
    record["t"] = _now()
    return record


def _now() -> int:
    return int(time.time() * 1000)


class _End:
    """Queue item: the run's end record, the last item ever queued."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record


def _delta_key(record: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a delta record must share with the one before it to be merged into it."""
    if record.get("type") != "message_update":
        return None
    update = record["update"]
    return (update["type"], update.get("content_index")) if update["type"] in DELTAS else None


class _Pending:
    """A run of consecutive deltas of one block, merged into its first record."""

    def __init__(self, record: dict[str, Any], key: tuple[Any, ...]) -> None:
        self.record, self.key = record, key
        self.pieces = [record["update"]["delta"]]

    def merged(self) -> dict[str, Any]:
        if len(self.pieces) > 1:
            update = {**self.record["update"], "delta": "".join(self.pieces)}
            return {**self.record, "update": update}
        return self.record


class _Writer:
    """The thread that writes one run's records in order, in batches, and beats meanwhile."""

    def __init__(self, log: RunLogStore, run_id: str, last_seq: int, lost: Any) -> None:
        self._log, self._run_id, self._seq, self._lost = log, run_id, last_seq, lost
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._held: _Pending | None = None  # deltas held back past MAX_EVENTS
        self._written = 0  # records written by this attempt
        self._deltas = 0
        self._ended = False  # the store says the run ended: nothing more is written
        self._thread = threading.Thread(target=self._work, name="agentkit-run-log", daemon=True)
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        self._queue.put(record)

    def close(self, end: dict[str, Any]) -> None:
        """Queue the end, the last record, and wait for the thread to write everything."""
        self._queue.put(_End(end))
        self._thread.join(JOIN_TIMEOUT)
        if self._thread.is_alive():
            logger.warning("agentkit: run %s: its log is still being written", self._run_id)

    def _work(self) -> None:
        beat = self._log.lease / 4
        while True:
            try:
                batch = [self._queue.get(timeout=beat)]
            except queue.Empty:
                self._beat()
                continue
            gathered_by = time.monotonic() + WINDOW
            while len(batch) < BATCH and not isinstance(batch[-1], _End):
                try:  # what comes within the window joins this batch: fewer, larger writes
                    batch.append(self._queue.get(timeout=max(0.0, gathered_by - time.monotonic())))
                except queue.Empty:
                    break
            end = batch.pop() if isinstance(batch[-1], _End) else None
            self._write(self._coalesced(batch, final=end is not None))
            if end is not None:
                self._finish(end.record)
                return

    def _coalesced(self, batch: list[dict[str, Any]], final: bool) -> list[dict[str, Any]]:
        """The batch with each run of consecutive deltas of one block merged into one record
        (past :data:`MAX_EVENTS`, the last run is held for the next batch unless ``final``)."""
        out: list[dict[str, Any]] = []
        pending, self._held = self._held, None
        for record in batch:
            key = _delta_key(record)
            if key is not None and pending is not None and pending.key == key:
                pending.pieces.append(record["update"]["delta"])
                continue
            if pending is not None:
                out.append(pending.merged())
                pending = None
            if key is not None:
                pending = _Pending(record, key)
            else:
                out.append(record)
        if pending is not None:
            if not final and self._written + len(out) >= MAX_EVENTS:
                self._held = pending
            else:
                out.append(pending.merged())
        return out

    def _write(self, records: list[dict[str, Any]]) -> None:
        if not records or self._ended:
            return
        entries = []
        for record in records:
            self._seq += 1
            entries.append((self._seq, encode_record(record)))
        for delay in (*RETRIES, None):
            try:
                if not self._log.append(self._run_id, entries):
                    self._gone()
                self._written += len(entries)
                self._deltas += sum(1 for r in records if _delta_key(r) is not None)
                return
            except SessionError:
                if delay is None:
                    logger.warning("agentkit: run %s: %d events could not be logged",
                                   self._run_id, len(entries), exc_info=True)  # fmt: skip
                    return
                time.sleep(delay)

    def _beat(self) -> None:
        if self._ended:
            return
        try:
            if not self._log.beat(self._run_id):
                self._gone()
        except SessionError:
            logger.warning("agentkit: run %s: its heartbeat failed", self._run_id, exc_info=True)

    def _gone(self) -> None:
        """Another process ended the run's log (it took the run for dead): stop writing, and
        abort the run, which every follower was told has ended."""
        if not self._ended:
            self._ended = True
            logger.warning("agentkit: run %s was declared interrupted; aborting it", self._run_id)
            self._lost()

    def _finish(self, end: dict[str, Any]) -> None:
        if self._ended:
            return
        try:
            self._log.end(self._run_id, encode_record(end))
            if self._deltas > COALESCE_OVER:
                compact(self._log, self._run_id)
        except SessionError:
            logger.warning("agentkit: run %s: its end could not be logged", self._run_id,
                           exc_info=True)  # fmt: skip


class _Commands:
    """What each command does to the run it reached."""

    def __init__(self, agent: Agent, run: Run, session: Session, writer: _Writer) -> None:
        self._agent, self._run, self._session, self._writer = agent, run, session, writer

    def apply(self, command: dict[str, Any]) -> str:
        """Apply ``command``; return its type."""
        kind = str(command.get("type"))
        text = str(command.get("text", ""))
        if kind == "abort":
            self._run.abort()
        elif kind == "steer":
            self._agent.steer(text)
        elif kind == "follow_up":
            self._agent.follow_up(text)
        elif kind == "interrupt":
            self._agent.interrupt(text)
        elif kind in ("approve", "deny"):
            self._decide(kind == "approve", command)
        else:
            logger.warning("agentkit: run %s: unknown command %r", self._run.id, kind)
            return kind
        self._writer.put({"type": "run_command", "command": kind, "t": _now()})
        return kind

    def _decide(self, approved: bool, command: dict[str, Any]) -> None:
        """A decision on a call the agent's broker waits on, else on one waiting in the
        session (recorded there as any process would)."""
        call_id = str(command.get("call_id"))
        reason = command.get("reason")
        broker = self._agent.approvals
        if broker is not None and any(r.id == call_id for r in broker.pending()):
            if approved:
                broker.approve(call_id, reason, arguments=command.get("arguments"))
            else:
                broker.reject(call_id, reason)
            return
        from .sessions import Session

        session = Session(self._session.name, self._session.store)
        try:
            if approved:
                session.approve(call_id, reason, arguments=command.get("arguments"))
            else:
                session.deny(call_id, reason)
        except (ApprovalError, SessionError) as exc:
            logger.warning("agentkit: run %s: decision on %s not recorded: %s", self._run.id,
                           call_id, exc)  # fmt: skip


class _Control:
    """The thread that waits for a run's commands and applies them, each once: the id of the
    last one applied is kept with the run, so an attempt that resumes it goes on after it. An
    abort is not counted as applied: an attempt resumed after it aborts too."""

    def __init__(self, log: RunLogStore, run_id: str, applied: str, commands: _Commands) -> None:
        self._log, self._run_id, self._commands = log, run_id, commands
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(applied,),
                                        name="agentkit-run-control", daemon=True)  # fmt: skip
        self._thread.start()

    def _serve(self, after: str) -> None:
        kept = after  # what the store says was applied: not past an abort
        aborted = False
        while not self._stop.is_set():
            try:
                found = self._log.commands(self._run_id, after, wait=30.0)
            except SessionError:
                logger.warning("agentkit: run %s: could not read its commands", self._run_id,
                               exc_info=True)  # fmt: skip
                self._stop.wait(1.0)
                continue
            for command_id, text in found:
                if self._stop.is_set():
                    return
                try:
                    kind = self._commands.apply(json.loads(text))
                except Exception:  # noqa: BLE001 - one bad command must not stop the others
                    logger.warning("agentkit: run %s: a command failed", self._run_id,
                                   exc_info=True)  # fmt: skip
                    kind = ""
                after = command_id
                aborted = aborted or kind == "abort"
                if not aborted:
                    kept = command_id
            if found:
                self._keep(kept)

    def _keep(self, command_id: str) -> None:
        try:
            self._log.applied(self._run_id, command_id)
        except SessionError:
            logger.warning("agentkit: run %s: could not keep its command position",
                           self._run_id, exc_info=True)  # fmt: skip

    def stop(self) -> None:
        """Stop applying commands (the run has ended) and wait for the thread."""
        self._stop.set()
        try:
            self._log.wake(self._run_id)
        except SessionError:
            pass  # the thread sees the stop when its wait ends
        if self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT)
