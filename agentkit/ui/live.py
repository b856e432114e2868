"""Runs the page starts, and the runs it follows: every run with a session, wherever it runs.

A run started from the page's chat box runs in this process on the agent the application names
(``agentkit ui --agent module:factory``). Like any run with a session, it writes its events to
the session store's run log (:mod:`agentkit.runlog`), and that log is what every page connection
follows, in this process or another (a reload, a second tab, another worker of a site): the
page itself holds no event. Steer and abort go through the store too, so they reach a run on a
web worker's thread, on a Celery worker or in a notebook alike.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from .. import runlog
from ..agent import Agent
from ..errors import AgentBusyError, AgentError, SessionError
from ..run import Run
from ..sessions import Session, SessionStore
from ..sessions.runlog_base import RunInfo
from ..transcript import user_message

BuildAgent = Callable[[Session], Agent]
"""``build_agent(session) -> Agent``: the application's agent, made with ``session=session``
(the same factory ``agentkit.integrations.celery`` takes)."""


@dataclass
class LiveRun:
    """One run started from this page: its session, its agent and the run."""

    session: str
    agent: Agent
    run: Run

    @property
    def done(self) -> bool:
        """Whether the run has ended."""
        return self.run.done()


class LiveRuns:
    """The runs this page started (at most one running per session here), and what it reads of
    every run from the store."""

    def __init__(self, build_agent: BuildAgent | None, store: SessionStore) -> None:
        self.build_agent = build_agent
        self.store = store
        # Guards _runs.
        self._lock = threading.Lock()
        self._runs: dict[str, LiveRun] = {}

    def get(self, session: str) -> LiveRun | None:
        """The session's latest run started here (running or ended), if any."""
        with self._lock:
            return self._runs.get(session)

    def running(self) -> list[RunInfo]:
        """The runs going on now, in any process (none when the store keeps no run log)."""
        try:
            return runlog.live_runs(self.store)
        except SessionError:
            return []

    def runs(self, session: str | None = None, limit: int = 100) -> list[RunInfo]:
        """The runs of ``session`` (of every session for ``None``), newest first."""
        try:
            return runlog.runs(self.store, session, limit=limit)
        except SessionError:
            return []

    def live_run(self, session: str) -> RunInfo | None:
        """The session's run going on now, in any process."""
        return next((r for r in self.runs(session, limit=20) if r.live), None)

    def prompt(self, session: str, text: str) -> LiveRun:
        """Start a run of ``session`` with ``text`` as the user's next message; return at once.

        Raises :class:`AgentBusyError` while the session already runs (here or elsewhere), and
        :class:`AgentError` when the page was started without an agent (or the run cannot
        start: calls of the session wait for approval, say)."""
        return self._start(session, lambda agent: agent.start(user_message(text)))

    def resume(self, session: str) -> LiveRun:
        """Continue ``session`` (its decided approvals run, then the model goes on); return
        at once. Raises as :meth:`prompt` does."""
        return self._start(session, lambda agent: agent.start_continue())

    def _start(self, session: str, begin: Callable[[Agent], Run]) -> LiveRun:
        if self.build_agent is None:
            raise AgentError("this page has no agent: start it with --agent module:factory")
        with self._lock:
            current = self._runs.get(session)
            if (current is not None and not current.done) or self.live_run(session) is not None:
                raise AgentBusyError(f"session {session!r} is already running")
            if current is not None:
                current.agent.close()
                del self._runs[session]
            agent = self.build_agent(Session(session, self.store))
            try:
                run = begin(agent)
            except BaseException:
                agent.close()
                raise
            live = LiveRun(session, agent, run)
            self._runs[session] = live
        return live

    def close(self) -> None:
        """Abort every run started here, wait for each to end, and close the agents."""
        with self._lock:
            runs, self._runs = list(self._runs.values()), {}
        for live in runs:
            live.agent.close()
