"""Runs the page watches as they happen: runs it started itself, and runs on Celery workers.

A run started from the page's chat box runs in this process on the agent the application names
(``agentkit ui --agent module:factory``). Its events are kept, as the JSON a Celery run publishes
(:func:`agentkit.integrations.celery.wire_event`), in a :class:`LiveRun` that any number of page
connections follow, each from where it is; steering and aborting go straight to its agent. A
run on a Celery worker is followed through its :class:`~agentkit.integrations.celery.RunChannel`
instead, which takes the same commands.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..agent import Agent
from ..errors import AgentBusyError, AgentError
from ..events import AgentEvent
from ..run import Run
from ..sessions import Session
from ..transcript import user_message

BuildAgent = Callable[[Session], Agent]
"""``build_agent(session) -> Agent``: the application's agent, made with ``session=session``
(the same factory ``agentkit.integrations.celery`` takes)."""


class LiveRun:
    """One run started from the page: its agent and the events it has sent so far."""

    def __init__(self, session: str, agent: Agent) -> None:
        self.session = session
        self.agent = agent
        # Guards events and done; followers wait on it for the next event.
        self._changed = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self.done = False

    def record(self, event: AgentEvent) -> None:
        """The agent's listener: keep the event and wake the followers (on the run's thread)."""
        from ..integrations.celery import wire_event

        data = wire_event(event)
        with self._changed:
            self.events.append(data)
            self._changed.notify_all()

    def finish(self) -> None:
        """Mark the run over, after its last event (on the run's worker thread, so the agent
        is closed later, by whoever replaces or closes the run)."""
        with self._changed:
            self.done = True
            self._changed.notify_all()

    def follow(
        self, after: int = 0, *, idle: float = 15.0, stop: threading.Event | None = None
    ) -> Iterator[tuple[int, dict[str, Any] | None]]:
        """Yield ``(position, event)`` from position ``after`` on; ``(position, None)`` after
        ``idle`` quiet seconds (the relay sends a keep-alive, which is how it notices that its
        reader left). Ends when the run has ended and every event was yielded, or on ``stop``."""
        position = after
        while stop is None or not stop.is_set():
            with self._changed:
                if position >= len(self.events) and not self.done:
                    self._changed.wait(idle)
                fresh = self.events[position:]
                done = self.done
            if not fresh:
                if done:
                    return
                yield position, None
                continue
            for event in fresh:
                position += 1
                yield position, event


class LiveRuns:
    """The runs this page started, by session name: at most one running per session."""

    def __init__(self, build_agent: BuildAgent | None, store: Any) -> None:
        self.build_agent = build_agent
        self.store = store
        # Guards _runs.
        self._lock = threading.Lock()
        self._runs: dict[str, LiveRun] = {}

    def get(self, session: str) -> LiveRun | None:
        """The session's latest run started here (running or ended), if any."""
        with self._lock:
            return self._runs.get(session)

    def running(self) -> list[str]:
        """The sessions with a run in progress here."""
        with self._lock:
            return sorted(name for name, run in self._runs.items() if not run.done)

    def prompt(self, session: str, text: str) -> LiveRun:
        """Start a run of ``session`` with ``text`` as the user's next message; return at once.

        Raises :class:`AgentBusyError` while the session already runs here, and
        :class:`AgentError` when the page was started without an agent (or the run cannot
        start: calls of the session wait for approval, say)."""
        return self._start(session, lambda agent: agent.start(user_message(text)))

    def _start(self, session: str, begin: Callable[[Agent], Run]) -> LiveRun:
        if self.build_agent is None:
            raise AgentError("this page has no agent: start it with --agent module:factory")
        with self._lock:
            current = self._runs.get(session)
            if current is not None and not current.done:
                raise AgentBusyError(f"session {session!r} is already running")
            if current is not None:
                current.agent.close()
            agent = self.build_agent(Session(session, self.store))
            live = LiveRun(session, agent)
            agent.subscribe(live.record)
            self._runs[session] = live
        try:
            run = begin(agent)
        except BaseException:
            live.finish()
            agent.close()
            raise
        run.add_done_callback(lambda _run: live.finish())
        return live

    def resume(self, session: str) -> LiveRun:
        """Continue ``session`` (its decided approvals run, then the model goes on); return
        at once. Raises as :meth:`prompt` does."""
        return self._start(session, lambda agent: agent.start_continue())

    def steer(self, session: str, text: str) -> bool:
        """Give a running run ``text`` after its current tool batch; whether one was running."""
        live = self.get(session)
        if live is None or live.done:
            return False
        live.agent.steer(user_message(text))
        return True

    def abort(self, session: str) -> bool:
        """Abort the session's running run; whether one was running."""
        live = self.get(session)
        if live is None or live.done:
            return False
        live.agent.abort()
        return True

    def close(self) -> None:
        """Abort every run still going, wait for each to end, and close the agents."""
        with self._lock:
            runs, self._runs = list(self._runs.values()), {}
        for live in runs:
            live.agent.close()
