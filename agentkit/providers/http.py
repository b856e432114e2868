"""The HTTP side every provider shares: one streaming POST on a pooled, kept-alive connection.

A :class:`StreamingRequest` is one attempt: :meth:`~StreamingRequest.open` sends the request once
and returns the 2xx response or raises :class:`~agentkit.errors.ProviderError` (with the HTTP
``status`` when the server answered; the response's headers stay readable as
:attr:`~StreamingRequest.response_headers`). Whether and when to try again (the retryable
statuses, ``Retry-After``, backoff with jitter, ``max_retries``) is the runner's policy
(:mod:`.runner`), and only the runner's.

Connections come from one process-wide urllib3 pool manager (thread-safe), so the TCP connection
and TLS session of one turn are reused by the next turn and the next run. A host's pool grows
with the load (up to :data:`POOL_SIZE` connections kept alive) and closes connections left idle
for :data:`IDLE_TIMEOUT` seconds, so many runs at once do not open a connection per request. A
response read to its end gives its connection back to the pool; one left early is closed. While
a request lives, an abort callback shuts down the socket of that request's own connection only
(other requests on the same pool are untouched), so a read stalled on the network returns at
once. The request keeps each socket it used, not only the connection: a response that says
``Connection: close`` takes the socket over from its connection (``http.client`` sets
``connection.sock`` to ``None`` and the response reads on), and the abort must reach that read
too. A connect to an IP address is made on the request's own thread (shutting its socket down
also ends a ``connect()`` in progress); one that must resolve a name first (which nothing can
interrupt) is made on a short-lived thread that the request waits for or, on abort, gives up
on at once. A chunked body is read as it
arrives, each read taking everything that is there (:mod:`.chunked`), never one chunk at a time.
Every message that leaves this module has the API key scrubbed out of it, before it is cut to
length.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from ..errors import ProviderError
from ..errors import RequestAbortedError as _RequestAborted
from ..types import StreamOptions
from .chunked import ChunkDecoder
from .response_head import FastHeadResponse
from .table import is_local_url

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a connection when ``options.timeout`` is not given."""

DEFAULT_READ_TIMEOUT = 600.0
"""Seconds to wait between two reads of the body when ``options.timeout`` is not given."""

_MAX_ERROR_BODY = 64 * 1024
_MAX_DETAIL = 1000
_SCRUBBED = "[REDACTED]"

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "StreamingRequest",
    "error_detail",
    "resolve_timeout",
    "scrub",
]


def scrub(text: str, secrets: Sequence[str | None], limit: int | None = None) -> str:
    """``text`` with every secret (and its URL-encoded form) replaced by a marker, then cut to
    ``limit`` characters: redacting first means a key that straddles the cut cannot leak."""
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue
        text = text.replace(secret, _SCRUBBED)
        encoded = quote(secret, safe="")
        if encoded != secret:
            text = text.replace(encoded, _SCRUBBED)
    return text if limit is None else text[:limit]


def resolve_timeout(value: Any) -> tuple[float, float]:
    """``options.timeout`` as a ``(connect, read)`` pair: a number sets both, ``None`` defaults."""
    if value is None:
        return DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT
    if isinstance(value, (int, float)):
        return float(value), float(value)
    connect, read = value
    return float(connect), float(read)


def error_detail(body: str, secrets: Sequence[str | None] = ()) -> str:
    """The human part of an error body: the vendor's ``error.message`` when there is one,
    with ``secrets`` redacted and then cut to 1,000 characters."""
    return scrub(_error_detail(body.strip()), secrets, _MAX_DETAIL)


def _error_detail(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("error")
            if isinstance(message, str) and message:
                return message
        elif isinstance(error, str) and error:
            return error
        message = data.get("message")
        if isinstance(message, str) and message:
            return message
    return text


# --- the pool: one per process, connections kept alive across turns and runs ------------------

_current = threading.local()
"""The :class:`_ConnectionTracker` of the request the current thread is sending, if any."""


class _ConnectionTracker:
    """The connections one request used, so that its abort shuts down those and no others."""

    def __init__(self) -> None:
        # Guards _connections, _aborted and _detached, and is held while sockets are shut down
        # so that a connection given back to the pool is never shut down by a late abort.
        self._lock = threading.Lock()
        self._connections: list[Any] = []
        # The sockets those connections held, kept here because a response that says
        # "Connection: close" takes its socket from the connection (http.client then sets
        # connection.sock to None) and goes on reading from it: an abort must still reach it.
        self._sockets: list[Any] = []
        self._aborted = False
        self._detached = False
        self._connecting: threading.Event | None = None  # set when a connect ends or is aborted
        self._socket_connecting: socket.socket | None = None  # connect() under way on this thread

    def track(self, connection: Any) -> None:
        """Record a connection taken from the pool; if the request was aborted, shut it."""
        connection._agentkit_tracker = self
        with self._lock:
            if self._detached:
                return
            self._connections.append(connection)
            self._remember(connection)
            if self._aborted:
                _shutdown_socket(getattr(connection, "sock", None))

    def after_connect(self, connection: Any) -> None:
        """A tracked connection just connected: remember its socket, and shut it if the
        request was aborted meanwhile."""
        with self._lock:
            if self._detached:
                return
            self._remember(connection)
            if self._aborted:
                _shutdown_socket(getattr(connection, "sock", None))

    def _remember(self, connection: Any) -> None:
        """Keep ``connection``'s current socket for :meth:`abort` (the lock is held)."""
        sock = getattr(connection, "sock", None)
        if sock is not None and not any(known is sock for known in self._sockets):
            self._sockets.append(sock)

    def connect(self, connection: Any, connect: Callable[[], None]) -> None:
        """Run ``connect()`` (name resolution, TCP, TLS): here for an IP address (an abort shuts
        the socket down, which ends the connect), else on a short-lived thread that this one
        waits for; an abort ends that wait at once, raising ``_RequestAborted``. A connect given
        up on closes its connection when it returns."""
        if _is_ip_address(getattr(connection, "_dns_host", "")):
            connect()
            return
        done = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            try:
                connect()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the waiting thread
                failure.append(exc)
            with self._lock:
                gave_up = self._aborted
            if gave_up:
                connection.close()
            done.set()

        with self._lock:
            if self._aborted:
                raise _RequestAborted()
            self._connecting = done
        threading.Thread(target=run, name="agentkit-http", daemon=True).start()
        done.wait()
        with self._lock:
            self._connecting = None
            if self._aborted:
                raise _RequestAborted()
        if failure:
            raise failure[0]

    def connecting(self, sock: socket.socket | None) -> None:
        """``sock`` is about to ``connect()`` on the request's thread (``None``: forget it);
        an abort shuts it down, which ends the connect. Raises ``_RequestAborted`` if the
        request was already aborted."""
        with self._lock:
            self._socket_connecting = sock
            if sock is not None and self._aborted:
                raise _RequestAborted()

    def abort(self) -> None:
        """Shut down every tracked socket, waking any thread blocked reading from it (or
        waiting for a connect)."""
        with self._lock:
            if self._detached:
                return
            self._aborted = True
            if self._connecting is not None:
                self._connecting.set()
            _shutdown_socket(self._socket_connecting)
            for connection in self._connections:
                _shutdown_socket(getattr(connection, "sock", None))
            for sock in self._sockets:  # the same ones, and any a response took over
                _shutdown_socket(sock)

    def detach(self) -> None:
        """The request is over: its connections belong to the pool again."""
        with self._lock:
            self._detached = True
            self._socket_connecting = None
            for connection in self._connections:
                if getattr(connection, "_agentkit_tracker", None) is self:
                    connection._agentkit_tracker = None
            self._connections = []
            self._sockets = []


def _shutdown_socket(sock: Any) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _hook_connect(connection: Any) -> None:
    """Make ``connection.connect`` go through the tracker it currently belongs to (once)."""
    if getattr(connection, "_agentkit_hooked", False):
        return
    original = connection.connect

    def connect() -> None:
        tracker = getattr(connection, "_agentkit_tracker", None)
        if tracker is None:
            original()
            return
        tracker.connect(connection, original)
        tracker.after_connect(connection)

    connection.connect = connect
    connection._agentkit_hooked = True


def _is_ip_address(host: str) -> bool:
    """Whether ``host`` is an IP address (no name to resolve before connecting)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _tracked_connection(base: type[HTTPConnection]) -> type[HTTPConnection]:
    """``base`` that, connecting to an IP address for a request, shows its socket to the
    request's tracker before ``connect()``, so that an abort can end the connect, and that
    reads a response's head without the email package (:mod:`.response_head`)."""

    class _TrackedConnection(base):  # type: ignore[valid-type,misc]
        response_class = FastHeadResponse  # its head read without the email package

        def _new_conn(self) -> socket.socket:
            tracker = getattr(self, "_agentkit_tracker", None)
            if tracker is None or not _is_ip_address(self._dns_host):
                return super()._new_conn()
            return _connect_here(self, tracker)

    return _TrackedConnection


def _connect_here(connection: Any, tracker: _ConnectionTracker) -> socket.socket:
    """urllib3's connect to an IP address, on this thread, its socket shown to ``tracker``."""
    host = connection._dns_host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        for option in connection.socket_options or ():
            sock.setsockopt(*option)
        timeout = connection.timeout
        if isinstance(timeout, (int, float)) or timeout is None:
            sock.settimeout(timeout)
        if connection.source_address:
            sock.bind(connection.source_address)
        # Shown to the tracker until the request ends (detach), not only while connecting: an
        # abort between the connect and the connection taking the socket (a TLS handshake
        # comes next) must still reach it.
        tracker.connecting(sock)
        try:
            sock.connect((host, connection.port))
        except BaseException:
            tracker.connecting(None)
            raise
    except TimeoutError as exc:
        sock.close()
        raise ConnectTimeoutError(
            connection,
            f"Connection to {connection.host} timed out. (connect timeout={connection.timeout})",
        ) from exc
    except OSError as exc:
        sock.close()
        raise NewConnectionError(
            connection, f"Failed to establish a new connection: {exc}"
        ) from exc
    except BaseException:
        sock.close()
        raise
    sys.audit("http.client.connect", connection, connection.host, connection.port)
    return sock


IDLE_TIMEOUT = 60.0
"""Seconds a pooled connection may stay unused before it is closed (a look at most every
:data:`_REAP_EVERY` seconds, when a connection is given back)."""

_REAP_EVERY = 5.0
_NEVER = float("inf")  # a connection never given back is not idle


def _tracked_pool(
    base: type[HTTPConnectionPool], connection: type[HTTPConnection]
) -> type[HTTPConnectionPool]:
    """``base`` whose connections, as a request takes them, join that request's tracker, and
    which closes connections left idle for :data:`IDLE_TIMEOUT`."""

    class _TrackedPool(base):  # type: ignore[valid-type,misc]
        ConnectionCls = connection

        def _get_conn(self, timeout: float | None = None) -> Any:
            connection = super()._get_conn(timeout)
            _hook_connect(connection)
            tracker = getattr(_current, "tracker", None)
            if tracker is not None:
                tracker.track(connection)
            return connection

        def _put_conn(self, conn: Any) -> None:
            now = time.monotonic()
            if conn is not None:
                conn._agentkit_idle_since = now
            super()._put_conn(conn)
            if now >= getattr(self, "_agentkit_next_reap", 0.0):
                self._agentkit_next_reap = now + _REAP_EVERY
                _close_idle(self, now - IDLE_TIMEOUT)

    return _TrackedPool


def _close_idle(pool: Any, idle_before: float) -> None:
    """Close the pooled connections unused since ``idle_before`` (their slots stay free)."""
    slots = pool.pool
    if slots is None:
        return
    stale: list[Any] = []
    with slots.mutex:  # the pool's LIFO queue: the least recently used are at the bottom
        for index, conn in enumerate(slots.queue):
            if conn is not None and getattr(conn, "_agentkit_idle_since", _NEVER) < idle_before:
                stale.append(conn)
                slots.queue[index] = None
    for conn in stale:
        conn.close()


_POOL_CLASSES = {
    "http": _tracked_pool(HTTPConnectionPool, _tracked_connection(HTTPConnection)),
    "https": _tracked_pool(HTTPSConnectionPool, _tracked_connection(HTTPSConnection)),
}

# Guards _managers (created on first use, one per proxy; None is "no proxy").
_managers_lock = threading.Lock()
_managers: dict[str | None, urllib3.PoolManager] = {}

POOL_SIZE = 1024
"""Most kept-alive connections per host: the pool grows to it with the number of requests at
once (parallel requests beyond it open extra, unpooled connections), and closes connections
idle for :data:`IDLE_TIMEOUT`."""


def _manager(proxy: str | None) -> urllib3.PoolManager:
    with _managers_lock:
        manager = _managers.get(proxy)
        if manager is None:
            if proxy is None:
                manager = urllib3.PoolManager(num_pools=32, maxsize=POOL_SIZE, retries=False)
            else:
                manager = urllib3.ProxyManager(
                    proxy, num_pools=32, maxsize=POOL_SIZE, retries=False
                )
            manager.pool_classes_by_scheme = _POOL_CLASSES
            _managers[proxy] = manager
        return manager


def _forget_pools_in_child() -> None:
    # A forked child (a Celery or gunicorn worker) must not talk over its parent's sockets:
    # two processes writing to one TLS connection corrupt both. Drop the pools without closing
    # them (closing would send a TLS close_notify on the parent's behalf).
    global _managers_lock
    _managers_lock = threading.Lock()
    _managers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


def _proxy_for(url: str) -> str | None:
    """The proxy the environment sets for ``url`` (``HTTPS_PROXY``, ``NO_PROXY``...), if any;
    never one for this machine."""
    if is_local_url(url):
        return None
    from urllib.request import getproxies, proxy_bypass

    parts = urlsplit(url)
    proxies = getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or proxy_bypass(parts.hostname or ""):
        return None
    return proxy


def _ca_bundle() -> str | None:
    """The CA bundle to verify TLS with: ``REQUESTS_CA_BUNDLE``, ``SSL_CERT_FILE`` or
    ``CURL_CA_BUNDLE`` when set (as ``requests`` does), else certifi's."""
    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        value = os.environ.get(name)
        if value:
            return value
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with requests
        return None
    return str(certifi.where())


# --- the request ----------------------------------------------------------------------------


class StreamingRequest:
    """One attempt at a streaming POST to a model API, from sending to the last byte of the body.

    Use it as a context manager on the worker thread: ``open()``, then ``iter_bytes()``; leaving
    the block gives the connection back to the pool (or closes it if the body was not read to
    its end) and removes the abort callback.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        body: bytes,
        options: StreamOptions,
        provider_label: str,
        secrets: Sequence[str | None] = (),
    ) -> None:
        self.url = url
        self.headers = {"Accept-Encoding": "gzip, deflate", **headers}
        self.body = body
        self.provider_label = provider_label
        self.secrets = list(secrets)
        self.signal = options.signal
        connect, read = resolve_timeout(options.timeout)
        self._timeout = urllib3.Timeout(connect=connect, read=read)
        self._tracker = _ConnectionTracker()
        self._response: Any = None
        self._complete = False  # the body was read to its end: the connection may be reused
        self._remove_callback: Callable[[], None] | None = None
        if self.signal is not None:
            self._remove_callback = self.signal.add_callback(self._on_abort)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> StreamingRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give the connection back (or close it), drop the abort callback (idempotent)."""
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        self._tracker.detach()
        response, self._response = self._response, None
        if response is None:
            return
        try:
            if self._complete:
                response.release_conn()
            else:
                response.close()
                response.release_conn()
        except Exception:  # already half-closed by an abort
            pass

    @property
    def response_headers(self) -> Any:
        """The headers of the response :meth:`open` received (a 2xx or not), while the request
        is open; empty before."""
        return self._response.headers if self._response is not None else {}

    @property
    def aborted(self) -> bool:
        """Whether the request's signal has fired."""
        return self.signal is not None and bool(self.signal.aborted)

    def _on_abort(self) -> None:
        # Runs on the aborting thread. Shutting the socket down is what wakes a read blocked on
        # the network (closing alone does not interrupt a recv() in another thread); a connect
        # in progress is given up on. The reader then sees the failure, finds the signal set
        # and reports "aborted".
        self._tracker.abort()

    def _check_abort(self) -> None:
        if self.aborted:
            raise _RequestAborted()

    # --- sending ---------------------------------------------------------------------------

    def open(self) -> Any:
        """Send the request once; return the 2xx response whose body is an event stream.

        Raises :class:`ProviderError` (message scrubbed; ``status`` set when the server
        answered, ``retryable`` only where the transport knows: a connection that failed may
        be tried again, a web page in place of the API may not) or the internal
        :class:`_RequestAborted`.
        """
        self._check_abort()
        proxy = _proxy_for(self.url)
        manager = _manager(proxy)
        pool_kwargs = {"ca_certs": _ca_bundle()} if self.url.startswith("https:") else {}
        _current.tracker = self._tracker
        try:
            pool = manager.connection_from_url(self.url, pool_kwargs=pool_kwargs)
            # A plain-HTTP proxy takes the absolute URL; HTTPS goes through a CONNECT tunnel,
            # inside which the request names the path, as without a proxy.
            forwarded = proxy is not None and not self.url.startswith("https:")
            target = self.url if forwarded else _path_of(self.url)
            response = pool.urlopen(
                "POST",
                target,
                body=self.body,
                headers=self.headers,
                retries=False,
                redirect=False,
                timeout=self._timeout,
                preload_content=False,
                decode_content=True,
                assert_same_host=False,
            )
        except Exception as exc:
            self._check_abort()
            raise ProviderError(self._connection_message(exc), retryable=True) from None
        finally:
            _current.tracker = None
        self._response = response
        status = response.status
        if 200 <= status < 300:
            self._check_html(response)
            return response
        detail = self._read_error_body(response)
        self._check_abort()
        raise ProviderError(self._status_message(status, detail), status=status)

    def _check_html(self, response: Any) -> None:
        """A 2xx that is a web page (a proxy or captive portal) is not the API: say so, and do
        not retry it."""
        content_type = str(response.headers.get("content-type") or "")
        if "html" not in content_type.lower():
            return
        head = b""
        try:
            head = response.read(2048, decode_content=True)
        except Exception:
            pass
        title = _html_title(head.decode("utf-8", errors="replace"))
        where = urlsplit(self.url).netloc
        what = f" (page title {title!r})" if title else ""
        raise ProviderError(
            scrub(
                f"{self.provider_label} answered with a web page, not a model stream: HTTP"
                f" {response.status}, content type {content_type!r}{what}. A proxy or captive"
                f" portal between this machine and {where} may be in the way.",
                self.secrets,
                _MAX_DETAIL,
            ),
            status=response.status,
            retryable=False,
        )

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives (chunk by chunk; never waits to fill a buffer)."""
        response = self._response
        if response is None:
            raise RuntimeError("open() the request first")
        try:
            if response.chunked and response.supports_chunked_reads():
                complete = yield from _chunked_body(response)
            else:
                while True:
                    chunk = response.read1(65536, decode_content=True)
                    if not chunk:
                        break
                    yield chunk
                if self.aborted:  # the abort's shutdown ended the body: that is not its end
                    raise _RequestAborted()
                complete = True
        except _RequestAborted:
            raise
        except Exception as exc:
            if self.aborted:
                raise _RequestAborted() from None
            raise ProviderError(
                scrub(
                    f"{self.provider_label} stream was interrupted: {_describe(exc)}",
                    self.secrets,
                    _MAX_DETAIL,
                ),
                retryable=True,
            ) from None
        self._complete = complete

    # --- helpers -----------------------------------------------------------------------------

    def _read_error_body(self, response: Any) -> str:
        try:
            data = response.read(_MAX_ERROR_BODY, decode_content=True)
            self._complete = response.length_remaining == 0
            text = data.decode("utf-8", errors="replace")
        except Exception:
            text = ""
        if not text:
            return scrub(str(response.reason or ""), self.secrets, _MAX_DETAIL)
        return error_detail(text, self.secrets)

    def _status_message(self, status: int, detail: str) -> str:
        label = self.provider_label
        suffix = f": {detail}" if detail else ""
        if status in (401, 403):
            return f"{label} rejected the API key (HTTP {status}){suffix}"
        if status == 404:
            return f"{label} API error (HTTP 404, check the model id and base URL){suffix}"
        if status == 429:
            return f"{label} rate limit or quota exceeded (HTTP 429){suffix}"
        return f"{label} API error (HTTP {status}){suffix}"

    def _connection_message(self, exc: BaseException) -> str:
        parts = urlsplit(self.url)
        where = f"{parts.scheme}://{parts.netloc}"
        timed_out = isinstance(exc, (TimeoutError, urllib3.exceptions.TimeoutError))
        # urllib3's NewConnectionError (refused, unreachable) derives from its timeout error
        if isinstance(exc, urllib3.exceptions.NewConnectionError):
            timed_out = False
        what = "timed out" if timed_out else "failed"
        return scrub(
            f"Connection to {_mid_sentence(self.provider_label)} at {where} {what}: "
            f"{_describe(exc)}",
            self.secrets,
            _MAX_DETAIL,
        )


def _chunked_body(response: Any) -> Generator[bytes, None, bool]:
    """A chunked body as it arrives: each piece is everything one read found (see
    :mod:`.chunked`), not one chunk. Returns whether the connection may be reused.

    The bytes come from the buffered socket reader of ``http.client``'s response, as urllib3's
    own chunked reader takes them; a compressed body is left to urllib3, which decodes it.
    """
    original = response._fp  # http.client's response, whose ``fp`` reads the socket
    reader = getattr(original, "fp", None)
    encoding = str(response.headers.get("content-encoding") or "identity").strip().lower()
    if encoding != "identity" or reader is None or not hasattr(reader, "read1"):
        for chunk in response.read_chunked(None, decode_content=True):
            if chunk:
                yield chunk
        return True
    decoder = ChunkDecoder()
    while not decoder.done:
        data = reader.read1(65536)
        if not data:
            raise ConnectionError("the connection closed before the end of the body")
        body = decoder.feed(data)
        if body:
            yield body
    if decoder.extra:  # bytes past the end: the connection is out of step, never reuse it
        return False
    original.close()  # the body is read: as urllib3's reader does, so the pool may reuse it
    return True


def _path_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


def _html_title(text: str) -> str:
    lower = text.lower()
    start = lower.find("<title")
    if start < 0:
        return ""
    start = lower.find(">", start)
    end = lower.find("</title", start)
    if start < 0 or end < 0:
        return ""
    return " ".join(text[start + 1 : end].split())[:100]


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _mid_sentence(label: str) -> str:
    """A provider label placed inside a sentence ("The local model server" -> "the ...")."""
    return "the" + label[3:] if label.startswith("The ") else label
