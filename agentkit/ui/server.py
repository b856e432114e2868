"""The page's HTTP server: Werkzeug's threaded server on 127.0.0.1, one thread per request.

:class:`UiServer` runs it on a thread of its own (what tests and notebooks use);
``agentkit ui`` runs it in the foreground until Ctrl-C.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from ..sessions import SessionStore
from .app import create_app
from .live import BuildAgent, LiveRuns
from .security import Guard

if TYPE_CHECKING:
    from ..ledger import Ledger

HOST = "127.0.0.1"
"""The page listens on loopback only: it can approve tool calls."""


class UiServer:
    """The page over ``store``, listening on ``127.0.0.1:port`` (0: a free port).

    ``build_agent``, ``redis_url``, ``reports`` and ``ledger`` are as for
    :func:`agentkit.ui.app.create_app`. The secret is made per launch; :attr:`url` is the
    address to open (it carries the secret).
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        port: int = 0,
        build_agent: BuildAgent | None = None,
        redis_url: str | None = None,
        reports: str | os.PathLike[str] | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        self.store = store
        # Bind first, so the guard knows the port a port of 0 became.
        self._httpd: BaseWSGIServer = make_server(
            HOST, port, _unbound, threaded=True, request_handler=_RequestHandler
        )
        # A reader of a live run's events may hold a request thread: don't wait for it at exit.
        self._httpd.daemon_threads = True  # type: ignore[attr-defined]
        self.guard = Guard(port=self._httpd.server_port)
        self.app = create_app(store, self.guard, build_agent=build_agent, redis_url=redis_url,
                              reports=reports, ledger=ledger)  # fmt: skip
        self._httpd.app = self.app
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The URL to open: it exchanges the launch's secret for a cookie."""
        return self.guard.url()

    @property
    def live(self) -> LiveRuns:
        """The runs started from the page."""
        live: LiveRuns = self.app.extensions["agentkit_live"]
        return live

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`stop` (or Ctrl-C)."""
        self._httpd.serve_forever(poll_interval=0.5)

    def start(self) -> UiServer:
        """Serve on a thread of its own; return ``self``."""
        self._thread = threading.Thread(target=self.serve_forever, name="agentkit-ui", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Abort the runs the page started, stop serving and close the socket."""
        self.live.close()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> UiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _RequestHandler(WSGIRequestHandler):
    """Werkzeug's handler, logging each request's path without its query: the first request
    carries the launch's secret there, and a secret never goes into a log."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = self.path.split("?", 1)[0]
        self.log("info", '"%s %s" %s %s', self.command, path, code, size)


def _unbound(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """What the server answers before its application is set (never, in practice)."""
    start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
    return [b"starting"]
