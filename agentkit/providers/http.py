"""The HTTP side every provider shares: one streaming POST with retries, timeouts and abort.

A :class:`StreamingRequest` owns a ``requests`` session for one model request. :meth:`open`
sends it, retrying connection errors and HTTP 408/409/429/5xx with exponential backoff and
jitter (``Retry-After`` and ``retry-after-ms`` honoured up to ``max_retry_delay_ms``); backoff
waits are ``signal.wait()`` so an abort ends them at once. While the request lives, an abort
callback shuts down its socket from the aborting thread, so a read stalled on the network returns
at once. Every message that leaves this module has the API key scrubbed out of it.
"""

from __future__ import annotations

import email.utils
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from ..types import StreamOptions

DEFAULT_CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a connection when ``options.timeout`` is not given."""

DEFAULT_READ_TIMEOUT = 600.0
"""Seconds to wait between two reads of the body when ``options.timeout`` is not given."""

DEFAULT_RETRY_BASE_DELAY_MS = 1000
"""First backoff delay; doubled for every further attempt (``options.retry_base_delay_ms``)."""

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides every 5xx."""

_MAX_ERROR_BODY = 64 * 1024
_SCRUBBED = "[REDACTED]"


class RequestFailed(Exception):
    """The request failed; ``str(self)`` is the readable, key-free message for the transcript."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RequestAborted(Exception):
    """The request was aborted through its signal."""


_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine (local servers need no key and no proxy)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in _LOCAL_HOSTS or host.endswith(".localhost")


def scrub(text: str, secrets: Sequence[str | None]) -> str:
    """``text`` with every secret (and its URL-encoded form) replaced by a marker."""
    for secret in secrets:
        if not secret or len(secret) < 4:
            continue
        text = text.replace(secret, _SCRUBBED)
        encoded = quote(secret, safe="")
        if encoded != secret:
            text = text.replace(encoded, _SCRUBBED)
    return text


def resolve_timeout(value: Any) -> tuple[float, float]:
    """``options.timeout`` as a ``(connect, read)`` pair: a number sets both, ``None`` defaults."""
    if value is None:
        return DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT
    if isinstance(value, (int, float)):
        return float(value), float(value)
    connect, read = value
    return float(connect), float(read)


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """The delay in seconds a response asks for (``retry-after-ms``, then ``Retry-After``)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def error_detail(body: str) -> str:
    """The human part of an error body: the vendor's ``error.message`` when there is one."""
    text = body.strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:1000]
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("error")
            if isinstance(message, str) and message:
                return message[:1000]
        elif isinstance(error, str) and error:
            return error[:1000]
        message = data.get("message")
        if isinstance(message, str) and message:
            return message[:1000]
    return text[:1000]


# --- abort: shut sockets down from the aborting thread ----------------------------------------


class _SocketTracker:
    """Remembers the connections a request's session opened, so an abort can shut them down."""

    def __init__(self) -> None:
        # Guards _connections and _closed against the worker and the aborting thread.
        self._lock = threading.Lock()
        self._connections: list[Any] = []
        self._closed = False

    def track(self, connection: Any) -> None:
        """Record a new connection; if the request was already aborted, it is shut at once."""
        original_connect = connection.connect

        def connect() -> None:
            original_connect()
            with self._lock:
                closed = self._closed
            if closed:
                _shutdown_socket(getattr(connection, "sock", None))

        connection.connect = connect
        with self._lock:
            self._connections.append(connection)
            closed = self._closed
        if closed:
            _shutdown_socket(getattr(connection, "sock", None))

    def shutdown_all(self) -> None:
        """Shut down every tracked socket, waking any thread blocked reading from it."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
        for connection in connections:
            _shutdown_socket(getattr(connection, "sock", None))


def _shutdown_socket(sock: Any) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _tracking_pool(base: type[Any], tracker: _SocketTracker) -> type[Any]:
    class _Pool(base):
        def _new_conn(self) -> Any:
            connection = super()._new_conn()
            tracker.track(connection)
            return connection

    return _Pool


class _TrackingAdapter(HTTPAdapter):
    """An adapter whose pools report each new connection to a :class:`_SocketTracker`."""

    def __init__(self, tracker: _SocketTracker) -> None:
        self._tracker = tracker
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _tracking_pool(HTTPConnectionPool, self._tracker),
            "https": _tracking_pool(HTTPSConnectionPool, self._tracker),
        }


# --- the request ----------------------------------------------------------------------------


class StreamingRequest:
    """One streaming POST to a model API, from sending to the last byte of the body.

    Use it as a context manager on the worker thread: ``open()`` (with retries), then
    ``iter_bytes()``; leaving the block releases the connection and the abort callback.
    """

    def __init__(
        self,
        *,
        url: str,
        headers: dict[str, str],
        body: Any,
        options: StreamOptions,
        provider_label: str,
        secrets: Sequence[str | None] = (),
        retries_used: int = 0,
        on_abort_while_connecting: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.headers = headers
        self.body = body
        self.options = options
        self.provider_label = provider_label
        self.secrets = list(secrets)
        self.signal = options.signal
        self.timeout = resolve_timeout(options.timeout)
        self.retries_used = retries_used
        """Retries spent so far, this request's included (shared across re-sent requests)."""
        self._tracker = _SocketTracker()
        self._session = requests.Session()
        adapter = _TrackingAdapter(self._tracker)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        # A proxy from the environment must never see calls to this machine.
        self._session.trust_env = not is_local_url(url)
        self._response: requests.Response | None = None
        self._on_abort_while_connecting = on_abort_while_connecting
        self._remove_callback: Callable[[], None] | None = None
        if self.signal is not None:
            self._remove_callback = self.signal.add_callback(self._on_abort)

    # --- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> StreamingRequest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the response, the session and the abort callback (idempotent)."""
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        response, self._response = self._response, None
        self._release(response)

    @property
    def aborted(self) -> bool:
        """Whether the request's signal has fired."""
        return self.signal is not None and bool(self.signal.aborted)

    def _on_abort(self) -> None:
        # Runs on the aborting thread. Shutting the sockets down is what wakes a read blocked on
        # the network (closing alone does not interrupt a recv() in another thread); closing
        # the response and the session then releases them. The worker sees the failure, finds
        # the signal set and reports "aborted".
        self._tracker.shutdown_all()
        response = self._response
        if response is None and self._on_abort_while_connecting is not None:
            # Name resolution and connect() cannot be interrupted: end the stream from here
            # rather than after the connect timeout (the worker ends when connect() returns).
            try:
                self._on_abort_while_connecting()
            except Exception:
                pass
        if response is not None:
            raw = getattr(response, "raw", None)
            shutdown = getattr(raw, "shutdown", None)
            if shutdown is not None:
                try:
                    shutdown()
                except Exception:
                    pass
        self._release(response)

    def _release(self, response: Any) -> None:
        """Close ``response`` (if any) and the session, ignoring errors: both may already be
        half-closed by the other thread."""
        if response is not None:
            try:
                response.close()
            except Exception:
                pass
        try:
            self._session.close()
        except Exception:
            pass

    def _check_abort(self) -> None:
        if self.aborted:
            raise RequestAborted()

    # --- sending ---------------------------------------------------------------------------

    @property
    def max_retries(self) -> int:
        """How many times a failed attempt may be retried (``options.max_retries``)."""
        return max(int(self.options.max_retries or 0), 0)

    def backoff(self) -> float:
        """The next backoff delay in seconds (exponential with jitter)."""
        base_ms = getattr(self.options, "retry_base_delay_ms", None)
        base = (DEFAULT_RETRY_BASE_DELAY_MS if base_ms is None else float(base_ms)) / 1000.0
        return _backoff(base, self.retries_used)

    def open(self) -> requests.Response:
        """Send the request, retrying what may be transient; return the 2xx response.

        Raises :class:`RequestFailed` (message scrubbed) or :class:`RequestAborted`.
        """
        max_retries = self.max_retries
        max_delay = max(float(self.options.max_retry_delay_ms), 0.0) / 1000.0
        while True:
            self._check_abort()
            attempt = self.retries_used
            try:
                response = self._session.post(
                    self.url,
                    data=self.body,
                    headers=self.headers,
                    stream=True,
                    timeout=self.timeout,
                )
            except requests.RequestException as exc:
                self._check_abort()
                message = self._connection_message(exc)
                if attempt >= max_retries:
                    raise RequestFailed(message) from None
                self.sleep(self.backoff())
                self.retries_used += 1
                continue
            self._response = response
            if 200 <= response.status_code < 300:
                return response
            status = response.status_code
            detail = self._read_error_body(response)
            response.close()
            self._response = None
            self._check_abort()
            retryable = status in RETRYABLE_STATUS or status >= 500
            if not retryable or attempt >= max_retries:
                raise RequestFailed(self._status_message(status, detail), status)
            asked = parse_retry_after(response.headers)
            if asked is not None and asked > max_delay:
                raise RequestFailed(
                    f"{self.provider_label} asked to retry after {asked:.1f} s (HTTP {status}),"
                    f" more than max_retry_delay_ms allows ({max_delay * 1000:.0f} ms): {detail}",
                    status,
                )
            delay = asked if asked is not None else self.backoff()
            self.sleep(min(delay, max_delay))
            self.retries_used += 1

    def iter_bytes(self) -> Iterator[bytes]:
        """The body as it arrives (chunk by chunk; never waits to fill a buffer)."""
        response = self._response
        if response is None:
            raise RuntimeError("open() the request first")
        raw = response.raw
        try:
            if getattr(raw, "chunked", False) and raw.supports_chunked_reads():
                for chunk in raw.read_chunked(None, decode_content=True):
                    if chunk:
                        yield chunk
                return
            read1 = getattr(raw, "read1", None)
            while True:
                if read1 is not None:
                    chunk = read1(65536, decode_content=True)
                else:
                    chunk = raw.read(1024, decode_content=True)
                if not chunk:
                    return
                yield chunk
        except Exception as exc:
            if self.aborted:
                raise RequestAborted() from None
            raise RequestFailed(
                f"{self.provider_label} stream was interrupted: "
                + scrub(_describe(exc), self.secrets)
            ) from None

    # --- helpers -----------------------------------------------------------------------------

    def sleep(self, seconds: float) -> None:
        """Wait between attempts; an abort ends the wait at once (raises RequestAborted)."""
        seconds = max(seconds, 0.0)
        if self.signal is not None:
            if self.signal.wait(seconds):
                raise RequestAborted()
        else:
            time.sleep(seconds)

    def _read_error_body(self, response: requests.Response) -> str:
        try:
            data = b""
            for chunk in response.iter_content(chunk_size=8192):
                data += chunk
                if len(data) >= _MAX_ERROR_BODY:
                    break
            text = data.decode("utf-8", errors="replace")
        except Exception:
            text = ""
        detail = error_detail(text) if text else (response.reason or "")
        return scrub(detail, self.secrets)

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
        if isinstance(exc, requests.Timeout):
            what = "timed out"
        else:
            what = "failed"
        return scrub(
            f"Connection to {_mid_sentence(self.provider_label)} at {where} {what}: "
            f"{_describe(exc)}",
            self.secrets,
        )


def _backoff(base: float, attempt: int) -> float:
    """Exponential backoff with jitter: ``base * 2**attempt``, scaled by 0.75 to 1.25."""
    return base * (2**attempt) * (0.75 + random.random() / 2)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:500]


def _mid_sentence(label: str) -> str:
    """A provider label placed inside a sentence ("The local model server" -> "the ...")."""
    return "the" + label[3:] if label.startswith("The ") else label
