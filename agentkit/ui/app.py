"""The page's routes: the sessions, one session's transcript, its runs and their timelines,
a live run, and the chat box.

Built on Flask (the ``ui`` extra): plain WSGI on threads, like the rest of
agentkit, with server-rendered pages (Jinja escapes everything a model wrote; an assistant's
Markdown is sanitised, see :mod:`agentkit.ui.render`) and one small script for the live view.
Runs are read from the session store's run logs (:mod:`agentkit.runlog`), so the page shows and
controls a run wherever it runs; a run on a Celery worker that is not in the store is followed
through its ``RunChannel`` (``--redis``). :mod:`agentkit.ui.security` says who may use it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from flask import Flask, Response, abort, jsonify, redirect, render_template, request

from .. import runlog
from .._serialize import dumps
from ..errors import AgentBusyError, AgentError, ApprovalError, RunNotFoundError, SessionError
from ..sessions import Session, SessionStore
from ..sessions.runlog_base import RunInfo
from ..sse_response import sse_response
from .evals import ReportShelf, evals_blueprint
from .live import BuildAgent, LiveRuns
from .security import COOKIE, SAFE_METHODS, Guard
from .spend import ledger_pages, session_spend
from .timeline import run_state, seconds, summary, timeline
from .view import Entry, Totals, transcript, when

if TYPE_CHECKING:
    from ..ledger import Ledger

MAX_LISTED = 500
"""Sessions the list shows at most (the most recently changed first)."""


def create_app(
    store: SessionStore,
    guard: Guard,
    *,
    build_agent: BuildAgent | None = None,
    redis_url: str | None = None,
    reports: str | os.PathLike[str] | None = None,
    ledger: Ledger | None = None,
) -> Flask:
    """The page's WSGI application over ``store``, guarded by ``guard``.

    ``build_agent(session)`` makes the agent the chat box prompts (none: the page only reads);
    ``redis_url`` lets it follow and steer runs on Celery workers by their run id; ``reports``
    is the folder of evaluation reports it shows (:mod:`agentkit.ui.evals`); ``ledger`` adds
    the ``/spend`` page, the spend ledger's totals by key and window.
    """
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20
    live = LiveRuns(build_agent, store)
    app.extensions["agentkit_live"] = live
    leases = _Leases(redis_url) if redis_url is not None else None
    app.register_blueprint(evals_blueprint(ReportShelf(reports) if reports is not None else None))
    if ledger is not None:
        app.register_blueprint(ledger_pages(ledger))

    @app.before_request
    def check() -> Any:
        if not guard.host_ok(request.host):
            abort(403, "this page answers only on its own loopback address")
        token = request.args.get("token")
        if token is not None and request.method in SAFE_METHODS:
            if not guard.secret_ok(token):
                abort(403, "wrong token: open the URL the command printed")
            response = redirect(request.path)
            response.set_cookie(COOKIE, guard.secret, httponly=True, samesite="Strict")
            return response
        if not guard.secret_ok(request.cookies.get(COOKIE)):
            abort(403, "open the URL the command printed (it carries this launch's secret)")
        if request.method not in SAFE_METHODS:
            sent = request.headers.get("X-CSRF-Token") or request.form.get("csrf")
            fetch_site = request.headers.get("Sec-Fetch-Site")
            allowed, why = guard.write_ok(sent, request.headers.get("Origin"), fetch_site)
            if not allowed:
                abort(403, why)
        return None

    @app.after_request
    def harden(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
        )
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        # Not "no-referrer": with it, a form's POST says "Origin: null" and fails its check.
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.context_processor
    def common() -> dict[str, Any]:
        return {
            "csrf": guard.csrf_token,
            "can_chat": build_agent is not None,
            "celery": redis_url is not None,
            "live_runs": live.running(),
            "seconds": seconds,
            "state": run_state,
            "when": _when_s,
            "when_ms": when,
        }

    @app.get("/")
    def sessions() -> str:
        query = request.args.get("q", "").strip()
        infos = sorted(store.list(), key=lambda i: i.updated_ms, reverse=True)
        if query:
            infos = [i for i in infos if query.lower() in i.name.lower()]
        runs: dict[str, list[RunInfo]] = {}  # newest first
        for run in live.runs(limit=5 * MAX_LISTED):
            runs.setdefault(run.session, []).append(run)
        rows = []
        for info in infos[:MAX_LISTED]:
            logged = runs.get(info.name, [])
            try:
                messages = Session(info.name, store).load()
                _, totals = transcript(messages)
                problem = None
            except (SessionError, ValueError) as exc:
                messages, totals, problem = [], Totals(messages=info.messages), str(exc)
            rows.append({"info": info, "totals": totals, "when": when(info.updated_ms),
                         "problem": problem, "run": logged[0] if logged else None,
                         "spend": session_spend(messages, logged)})  # fmt: skip
        return render_template(
            "sessions.html", rows=rows, query=query, more=max(0, len(infos) - MAX_LISTED)
        )

    @app.get("/s/<path:name>")
    def session(name: str) -> str:
        try:
            stored = Session(name, store)
        except ValueError:
            abort(404)
        try:
            messages = stored.load()
        except (SessionError, ValueError) as exc:  # a corrupt record: say so, keep serving
            return render_template("error.html", title=name, problem=str(exc))
        runs = live.runs(name, limit=20)
        if not messages and not runs:
            abort(404)
        entries, totals = transcript(messages)
        _mark_ends(entries, runs)
        running = next((r for r in runs if r.live), None)
        shown = _chosen(runs, request.args.get("run"))
        batch = _waiting_batch(messages)
        waiting = batch.pending() if batch is not None else []
        return render_template(
            "session.html",
            name=name,
            entries=entries,
            totals=totals,
            runs=[summary(r) for r in runs],
            running=running,
            shown=shown,
            timeline=_timeline(store, shown),
            celery_run=_celery_holder(name, running),
            waiting=[(r, _pretty(r.arguments)) for r in waiting],
            can_resume=batch is not None and not waiting and build_agent is not None,
        )

    def _celery_holder(name: str, running: RunInfo | None) -> str | None:
        """A Celery run of the session that is not in the store's run log (an older worker)."""
        holder = leases.holder(name) if leases is not None else None
        return None if running is not None and holder == running.id else holder

    @app.get("/s/<path:name>/events")
    def session_events(name: str) -> Response:
        runs = live.runs(name, limit=1)
        if not runs:
            abort(404)
        return _follow(runs[0].id)

    @app.post("/s/<path:name>/prompt")
    def prompt(name: str) -> Any:
        text = request.form.get("text", "").strip()
        if not text:
            return _answer(name, "say something first", 400)
        return _started(name, lambda: live.prompt(name, text), "started")

    @app.post("/new")
    def new_session() -> Any:
        name = request.form.get("session", "").strip()
        try:
            Session(name, store)
        except ValueError as exc:
            return _back("/", str(exc), 400)
        if store.load(name)[1]:
            return _back("/", f"a session named {name!r} already exists", 409)
        return prompt(name)

    @app.post("/s/<path:name>/steer")
    def steer(name: str) -> Any:
        running = live.live_run(name)
        if running is None:
            return _answer(name, "no run of this session is going on", 409)
        return _command(running.id, "steer", _answer_to(name))

    @app.post("/s/<path:name>/abort")
    def abort_run(name: str) -> Any:
        running = live.live_run(name)
        if running is None:
            return _answer(name, "no run of this session is going on", 409)
        return _command(running.id, "abort", _answer_to(name))

    def _command(run_id: str, kind: str, answer: Callable[[str, int], Any]) -> Any:
        """Send a steer or an abort to a run through the store (any process runs it)."""
        if kind == "steer":
            text = request.form.get("text", "").strip()
            if not text:
                return answer("say something first", 400)
            sent = runlog.steer(store, run_id, text)
        else:
            sent = runlog.abort(store, run_id)
        if not sent:
            return answer("the run has ended", 409)
        return answer("steered" if kind == "steer" else "aborted", 200)

    @app.get("/approvals")
    def approvals() -> str:
        inbox: list[tuple[str, Any, str]] = []
        problems: list[tuple[str, str]] = []
        # Only the sessions the store's approval index names are read, not every session.
        for info in sorted(store.awaiting_approval(), key=lambda i: i.updated_ms, reverse=True):
            try:
                waiting = Session(info.name, store).pending_approvals()
            except (SessionError, ValueError) as exc:
                problems.append((info.name, str(exc)))
                continue
            inbox.extend((info.name, request, _pretty(request.arguments)) for request in waiting)
        return render_template("approvals.html", inbox=inbox, problems=problems, when=_when_s)

    @app.post("/s/<path:name>/approvals/<call_id>")
    def decide(name: str, call_id: str) -> Any:
        decision = request.form.get("decision")
        reason = request.form.get("reason", "").strip() or None
        edited = request.form.get("arguments", "").strip()
        try:
            session = Session(name, store)
            if decision == "approve":
                arguments = json.loads(edited) if edited else None
                session.approve(call_id, reason, arguments=arguments)
            elif decision == "deny":
                session.deny(call_id, reason)
            else:
                return _answer(name, "say approve or deny", 400)
        except json.JSONDecodeError as exc:
            return _answer(name, f"the edited arguments are not JSON: {exc.msg}", 400)
        except ApprovalError as exc:
            return _answer(name, str(exc), 409)
        except (SessionError, ValueError) as exc:
            return _answer(name, str(exc), 400)
        return _back(request.form.get("back") or f"/s/{quote(name, safe='')}", f"{decision}d")

    @app.post("/s/<path:name>/resume")
    def resume(name: str) -> Any:
        return _started(name, lambda: live.resume(name), "resumed")

    @app.get("/runs")
    def runs_page() -> Any:
        run_id = request.args.get("id", "").strip()
        if run_id:
            return redirect(f"/runs/{quote(run_id, safe='')}")
        return render_template("runs.html", runs=[summary(r) for r in live.runs(limit=200)])

    @app.get("/runs/<run_id>")
    def run_page(run_id: str) -> str:
        info = _logged(run_id)
        if info is None:
            if redis_url is None:
                abort(404, "no such run in the store")
            return render_template("run.html", run_id=run_id, info=None,
                                   events_url=f"/runs/{quote(run_id, safe='')}/events")  # fmt: skip
        return render_template("run.html", run_id=run_id, info=info, timeline=_timeline(store, info),
                               events_url=f"/runs/{quote(run_id, safe='')}/events")  # fmt: skip

    @app.get("/runs/<run_id>/events")
    def run_events(run_id: str) -> Response:
        if _logged(run_id) is not None:
            return _follow(run_id)
        channel = _channel(run_id)
        last = request.headers.get("Last-Event-ID") or request.args.get("after") or "0"

        def relay() -> Iterator[str]:
            try:
                yield from _frames(channel.follow(last))
            finally:
                channel.close()

        return Response(relay(), mimetype="text/event-stream")

    @app.post("/runs/<run_id>/steer")
    def run_steer(run_id: str) -> Any:
        back = f"/runs/{quote(run_id, safe='')}"
        if _logged(run_id) is not None:
            return _command(run_id, "steer", lambda said, status: _back(back, said, status))
        text = request.form.get("text", "").strip()
        if not text:
            return jsonify(error="say something first"), 400
        channel = _channel(run_id)
        try:
            channel.steer(text)
        finally:
            channel.close()
        return _back(back, "steered")

    @app.post("/runs/<run_id>/abort")
    def run_abort(run_id: str) -> Any:
        back = f"/runs/{quote(run_id, safe='')}"
        if _logged(run_id) is not None:
            return _command(run_id, "abort", lambda said, status: _back(back, said, status))
        channel = _channel(run_id)
        try:
            channel.abort()
        finally:
            channel.close()
        return _back(back, "aborted")

    def _logged(run_id: str) -> RunInfo | None:
        """The run as the store's run log has it, or ``None`` (not there, or no run log)."""
        try:
            return runlog.run_info(store, run_id)
        except SessionError:
            return None

    def _follow(run_id: str) -> Response:
        """A run's log as server-sent events, after the request's ``Last-Event-ID``."""
        try:
            response: Response = sse_response(request, store=store, run_id=run_id)
        except RunNotFoundError:
            abort(404)
        except SessionError as exc:  # an after past the run's end: the client is confused
            abort(400, str(exc))
        return response

    def _channel(run_id: str) -> Any:
        if redis_url is None:
            abort(404, "start the page with --redis URL to follow runs on Celery workers")
        from ..integrations.celery import RunChannel

        return RunChannel(redis_url, run_id)

    return app


class _Leases:
    """Which Celery run holds a session now: the lease ``agentkit.integrations.celery`` keeps in
    Redis while a run of the session goes (none: no run on a worker)."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self._errors = (redis.RedisError,)
        self._client: Any = redis.Redis.from_url(redis_url, socket_timeout=5)

    def holder(self, session: str) -> str | None:
        """The run id of the session's running Celery run, or ``None`` (also when Redis does
        not answer: the page still shows the stored transcript)."""
        from ..integrations.celery import SessionLease

        key = SessionLease(self._client, session, "").key
        try:
            value = self._client.get(key)
        except self._errors:
            return None
        return value.decode() if value is not None else None


def _answer_to(name: str) -> Callable[[str, int], Any]:
    return lambda message, status: _answer(name, message, status)


def _chosen(runs: list[RunInfo], wanted: str | None) -> RunInfo | None:
    """The run whose timeline the session page shows: the one asked for, else the latest."""
    if wanted:
        return next((r for r in runs if r.id == wanted), None)
    return runs[0] if runs else None


def _timeline(store: SessionStore, info: RunInfo | None) -> Any:
    """The timeline of a run, from its log (``None`` when there is none to read)."""
    if info is None:
        return None
    try:
        return timeline(runlog.logged(store, info.id))
    except SessionError:
        return None


def _mark_ends(entries: list[Entry], runs: list[RunInfo]) -> None:
    """Put each ended run's state after the last message stored before it ended, so the
    transcript says where a run stopped and how (aborted, failed, waiting for approval)."""
    for run in runs:
        if run.live or run.ended_ms is None:
            continue
        before = [e for e in entries if e.timestamp is not None and e.timestamp <= run.ended_ms]
        if before:
            before[-1].ended_runs.append(summary(run))
            before[-1].said_by_run = before[-1].role == "run_end"  # said once, with its run


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _when_s(seconds: float) -> str:
    return when(int(seconds * 1000))


def _waiting_batch(messages: list[Any]) -> Any:
    """The session's batch of calls that wait for approval (decided or not), or ``None``."""
    from ..deferred import may_wait, waiting_batch

    return waiting_batch(messages) if may_wait(messages) else None


def _int(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        return 0


def _frames(events: Iterator[tuple[str | None, dict[str, Any] | None]]) -> Iterator[str]:
    """Events as server-sent-event frames; a quiet spell sends a comment, which is how the
    server notices a reader that left (its write fails and the generator is closed)."""
    yield "retry: 2000\n\n"
    for event_id, event in events:
        if event is None:
            yield ": keep-alive\n\n"
            continue
        yield f"id: {event_id}\nevent: {event.get('type', 'message')}\ndata: {dumps(event)}\n\n"
    yield "event: end\ndata: {}\n\n"


def _started(name: str, start: Callable[[], Any], said: str) -> Any:
    """Start a run of session ``name`` from the page and say how it went: 409 while it runs
    already, 400 for a bad name, no agent, or a session that cannot take a run now."""
    try:
        start()  # a bad name raises ValueError where the run's Session is made
    except AgentBusyError as exc:
        return _answer(name, str(exc), 409)
    except (AgentError, ValueError) as exc:
        return _answer(name, str(exc), 400)
    return _answer(name, said, 200)


def _answer(name: str, message: str, status: int) -> Any:
    return _back(f"/s/{quote(name, safe='')}", message, status)


def _back(location: str, message: str, status: int = 200) -> Any:
    """A script's ``fetch`` gets JSON; a plain form post goes back to the page."""
    if request.headers.get("Accept", "").startswith("application/json"):
        return jsonify(ok=status == 200, message=message), status
    if status != 200:
        return render_template("error.html", title="not done", problem=message), status
    return redirect(location, 303)
