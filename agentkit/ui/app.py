"""The page's routes: the sessions, one session's transcript, its live run, and the chat box.

Built on Flask (``pip install 'agentkit[ui]'``): plain WSGI on threads, like the rest of
agentkit, with server-rendered pages (Jinja escapes everything a model wrote) and one small
script for the live view. :mod:`agentkit.ui.security` says who may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from flask import Flask, Response, abort, jsonify, redirect, render_template, request

from .._serialize import dumps
from ..errors import AgentBusyError, AgentError, ApprovalError, SessionError
from ..sessions import Session, SessionStore
from .live import BuildAgent, LiveRuns
from .security import COOKIE, SAFE_METHODS, Guard
from .view import Totals, transcript, when

MAX_LISTED = 500
"""Sessions the list shows at most (the most recently changed first)."""


def create_app(
    store: SessionStore,
    guard: Guard,
    *,
    build_agent: BuildAgent | None = None,
    redis_url: str | None = None,
) -> Flask:
    """The page's WSGI application over ``store``, guarded by ``guard``.

    ``build_agent(session)`` makes the agent the chat box prompts (none: the page only reads);
    ``redis_url`` lets it follow and steer runs on Celery workers by their run id.
    """
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20
    live = LiveRuns(build_agent, store)
    app.extensions["agentkit_live"] = live
    leases = _Leases(redis_url) if redis_url is not None else None

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
            "running": live.running(),
        }

    @app.get("/")
    def sessions() -> str:
        query = request.args.get("q", "").strip()
        infos = sorted(store.list(), key=lambda i: i.updated_ms, reverse=True)
        if query:
            infos = [i for i in infos if query.lower() in i.name.lower()]
        rows = []
        for info in infos[:MAX_LISTED]:
            try:
                _, totals = transcript(Session(info.name, store).load())
                problem = None
            except (SessionError, ValueError) as exc:
                totals, problem = Totals(messages=info.messages), str(exc)
            rows.append({"info": info, "totals": totals, "when": when(info.updated_ms),
                         "problem": problem})  # fmt: skip
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
        if not messages and live.get(name) is None:
            abort(404)
        entries, totals = transcript(messages)
        run = live.get(name)
        batch = _waiting_batch(messages)
        waiting = batch.pending() if batch is not None else []
        return render_template(
            "session.html",
            name=name,
            entries=entries,
            totals=totals,
            live=run is not None and not run.done,
            events_url=f"/s/{quote(name, safe='')}/events",
            celery_run=leases.holder(name) if leases is not None else None,
            waiting=[(r, _pretty(r.arguments)) for r in waiting],
            can_resume=batch is not None and not waiting and build_agent is not None,
            when=_when_s,
        )

    @app.get("/s/<path:name>/events")
    def session_events(name: str) -> Response:
        run = live.get(name)
        if run is None:
            abort(404)
        after = request.headers.get("Last-Event-ID") or request.args.get("after") or "0"
        frames = _frames((str(position), event) for position, event in run.follow(_int(after)))
        return Response(frames, mimetype="text/event-stream")

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
        text = request.form.get("text", "").strip()
        if not text:
            return _answer(name, "say something first", 400)
        if not live.steer(name, text):
            return _answer(name, "no run of this session is going on here", 409)
        return _answer(name, "steered", 200)

    @app.post("/s/<path:name>/abort")
    def abort_run(name: str) -> Any:
        if not live.abort(name):
            return _answer(name, "no run of this session is going on here", 409)
        return _answer(name, "aborted", 200)

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
    def follow_form() -> Any:
        run_id = request.args.get("id", "").strip()
        if run_id:
            return redirect(f"/runs/{quote(run_id, safe='')}")
        return render_template("run.html", run_id=None)

    @app.get("/runs/<run_id>")
    def celery_run(run_id: str) -> str:
        if redis_url is None:
            abort(404, "start the page with --redis URL to follow runs on Celery workers")
        return render_template(
            "run.html", run_id=run_id, events_url=f"/runs/{quote(run_id, safe='')}/events"
        )

    @app.get("/runs/<run_id>/events")
    def celery_events(run_id: str) -> Response:
        channel = _channel(run_id)
        last = request.headers.get("Last-Event-ID") or request.args.get("after") or "0"

        def relay() -> Iterator[str]:
            try:
                yield from _frames(channel.follow(last))
            finally:
                channel.close()

        return Response(relay(), mimetype="text/event-stream")

    @app.post("/runs/<run_id>/steer")
    def celery_steer(run_id: str) -> Any:
        text = request.form.get("text", "").strip()
        if not text:
            return jsonify(error="say something first"), 400
        channel = _channel(run_id)
        try:
            channel.steer(text)
        finally:
            channel.close()
        return _back(f"/runs/{quote(run_id, safe='')}", "steered")

    @app.post("/runs/<run_id>/abort")
    def celery_abort(run_id: str) -> Any:
        channel = _channel(run_id)
        try:
            channel.abort()
        finally:
            channel.close()
        return _back(f"/runs/{quote(run_id, safe='')}", "aborted")

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
