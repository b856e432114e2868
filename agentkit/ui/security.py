"""Who may drive the page: the per-launch secret, the session cookie, and the CSRF checks.

The page can approve tool calls and start runs, so it trusts nothing it did not hand out:

- It answers only requests whose ``Host`` is this server's own loopback address (a page on
  another site cannot rebind a name of its own to 127.0.0.1 and read ours).
- Every request carries the per-launch secret: once in the URL the command prints (as Jupyter
  does), which swaps it for an ``HttpOnly``, ``SameSite=Strict`` cookie and redirects to a URL
  without it, so it stays out of the history and of ``Referer`` headers.
- Every request that changes something is a ``POST`` that carries a CSRF token in its form or
  its ``X-CSRF-Token`` header, from a page of the same origin (``Origin`` and
  ``Sec-Fetch-Site`` are checked where the browser sends them).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass, field

COOKIE = "agentkit_ui"
"""The name of the cookie that holds the secret after the first visit."""

SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True)
class Guard:
    """The checks of one launch: its secret and the ``host:port`` it answers as."""

    port: int
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def csrf_token(self) -> str:
        """The token every form and ``fetch`` that changes something sends back."""
        return hmac.new(self.secret.encode(), b"csrf", hashlib.sha256).hexdigest()

    @property
    def hosts(self) -> frozenset[str]:
        """The ``Host`` values this server answers to."""
        return frozenset({f"127.0.0.1:{self.port}", f"localhost:{self.port}"})

    @property
    def origins(self) -> frozenset[str]:
        """The origins of its own pages."""
        return frozenset(f"http://{host}" for host in self.hosts)

    def url(self, path: str = "/") -> str:
        """The URL to open: the first visit exchanges its token for the cookie."""
        return f"http://127.0.0.1:{self.port}{path}?token={self.secret}"

    def host_ok(self, host: str | None) -> bool:
        """Whether ``host`` (the request's ``Host`` header) is this server's own."""
        return host in self.hosts

    def secret_ok(self, presented: str | None) -> bool:
        """Whether ``presented`` is the launch's secret (compared in constant time)."""
        return presented is not None and hmac.compare_digest(presented, self.secret)

    def write_ok(
        self, token: str | None, origin: str | None, fetch_site: str | None
    ) -> tuple[bool, str]:
        """Whether a state-changing request may proceed, and why not when it may not."""
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return False, f"cross-site request ({fetch_site})"
        if origin is not None and origin not in self.origins:
            return False, "request from another origin"
        if token is None or not hmac.compare_digest(token, self.csrf_token):
            return False, "missing or wrong CSRF token"
        return True, ""
