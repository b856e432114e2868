"""A local replay server for provider tests: real HTTP on 127.0.0.1, scripted replies.

Each test queues :class:`Reply` objects; every request takes the next one and is recorded
(path, query, headers, JSON body) so tests can check what the provider sent. Replies can be
served whole or in odd-sized chunks (each flushed on its own), dropped mid-body, or stalled until
the test releases them.
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentkit.types import Model

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
"""The vendor recordings copied into the repository (see ``tests/fixtures/README.md``)."""


def fixture_bytes(name: str) -> bytes:
    """The bytes of ``tests/fixtures/<name>``, exactly as recorded."""
    return (FIXTURES / name).read_bytes()


@dataclass
class Reply:
    """One scripted HTTP response."""

    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/event-stream"
    chunk: int | None = None  # send the body in pieces of this many bytes, each flushed
    chunked: bool = True  # Transfer-Encoding: chunked; False: close-delimited body
    drop_after: int | None = None  # cut the connection after this many body bytes
    stall_after: int | None = None  # stop after this many body bytes until released
    stall_before_headers: bool = False
    resume: bool = False  # after a stall_after stall is released, send the rest of the body
    trickle: bool = False  # after stall_after, send the rest one byte per trickle_gate release
    one_write: bool = False  # send all the pieces (framing included) in a single write
    framed: bytes | None = None  # the body exactly as sent, chunk framing included (chunked)
    watch_close: bool = False  # during a stall_after stall, notice the client hanging up


@dataclass
class Recorded:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class ReplayServer:
    """A ThreadingHTTPServer on 127.0.0.1 (port 0) that plays queued :class:`Reply` objects."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.replies: list[Reply] = []
        self.connections = 0
        """TCP connections accepted so far."""
        self.closed_early = 0
        """Clients that hung up during a ``watch_close`` stall (their request was aborted)."""
        self.tls = tls
        self.requests: list[Recorded] = []
        self.release = threading.Event()
        self.stall_seconds = 10.0
        """How long a stalled reply waits for :attr:`release` before it gives up."""
        self.trickle_gate = threading.Semaphore(0)
        """Each release lets a ``trickle`` reply send one more byte."""
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)  # notified whenever a request is recorded
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                with server.lock:
                    server.requests.append(
                        Recorded(
                            "POST",
                            parts.path,
                            parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                        )
                    )
                    reply = server.replies.pop(0) if server.replies else None
                    server.arrived.notify_all()
                if reply is None:
                    reply = Reply(status=500, body=b'{"error": "no reply queued"}')
                try:
                    self._play(reply)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    if reply.watch_close:  # the client hung up before the stall began
                        self._count_close()

            def _send(self, reply: Reply, body: bytes) -> None:
                size = reply.chunk or max(len(body), 1)
                pieces = []
                for start in range(0, len(body), size):
                    piece = body[start : start + size]
                    if reply.chunked:
                        piece = f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                    pieces.append(piece)
                for piece in [b"".join(pieces)] if reply.one_write else pieces:
                    self.wfile.write(piece)
                    self.wfile.flush()

            def _client_left(self) -> bool:
                """Stall until released; whether the client hung up first (counted)."""
                ends = time.monotonic() + server.stall_seconds
                while not server.release.is_set() and time.monotonic() < ends:
                    readable, _, _ = select.select([self.connection], [], [], 0.02)
                    if readable and not self.connection.recv(1, socket.MSG_PEEK):
                        self._count_close()
                        self.close_connection = True
                        return True
                return False

            def _count_close(self) -> None:
                with server.lock:
                    server.closed_early += 1
                    server.arrived.notify_all()

            def _play(self, reply: Reply) -> None:
                if reply.stall_before_headers:
                    server.release.wait(server.stall_seconds)
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.flush()
                if reply.framed is not None:
                    self.wfile.write(reply.framed)
                    self.wfile.flush()
                    return
                body = reply.body
                limit = len(body)
                for cut in (reply.drop_after, reply.stall_after):
                    if cut is not None:
                        limit = min(limit, cut)
                self._send(reply, body[:limit])
                if reply.trickle:
                    for index in range(limit, len(body)):
                        if not server.trickle_gate.acquire(timeout=server.stall_seconds):
                            break
                        self.wfile.write(body[index : index + 1])
                        self.wfile.flush()
                    self.close_connection = True
                    return
                if reply.stall_after is not None:
                    if reply.watch_close:
                        if self._client_left():
                            return
                    else:
                        server.release.wait(server.stall_seconds)
                    if not reply.resume:
                        self.close_connection = True
                        return
                    self._send(reply, body[limit:])
                if reply.drop_after is not None:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if reply.chunked:
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                else:
                    self.close_connection = True

        class QuietServer(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                return  # clients that hang up early are part of the tests

            def get_request(self) -> tuple[Any, Any]:
                sock, address = super().get_request()
                with server.lock:
                    server.connections += 1
                if server.tls is not None:
                    # the handshake happens on the handler's thread, at its first read
                    sock = server.tls.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                return sock, address

        self.httpd = QuietServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.01,), name="replay-server", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{host}:{port}"

    def wait_for_close(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``count`` clients hung up during a ``watch_close`` stall."""
        with self.arrived:
            return self.arrived.wait_for(lambda: self.closed_early >= count, timeout)

    def wait_for_requests(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until ``count`` requests have arrived (``False`` if ``timeout`` ran out)."""
        with self.arrived:
            return self.arrived.wait_for(lambda: len(self.requests) >= count, timeout)

    def enqueue(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


API_KEY = "sk-test-SECRET-0123456789abcdef"


def make_model(api: str, base: str, **overrides: Any) -> Model:
    """A model of ``api`` pointing at the replay server ``base``."""
    settings: dict[str, Any] = {
        "openai-completions": {"provider": "openai", "base_url": f"{base}/v1", "id": "gpt-4o-mini"},
        "openai-responses": {"provider": "openai", "base_url": f"{base}/v1", "id": "gpt-5"},
        "anthropic-messages": {
            "provider": "anthropic",
            "base_url": base,
            "id": "claude-sonnet-4-5",
        },
        "google-generative-ai": {
            "provider": "google",
            "base_url": f"{base}/v1beta",
            "id": "gemini-2.5-pro",
        },
    }[api]
    data: dict[str, Any] = {
        "api": api,
        "name": "test",
        "reasoning": True,
        "input": ["text", "image"],
        "cost": {"input": 1.0, "output": 2.0, "cache_read": 0.5, "cache_write": 4.0},
        **settings,
    }
    data.update(overrides)
    return Model.model_validate(data)


def chat_sse(
    *deltas: dict[str, Any], finish: str = "stop", usage: dict[str, Any] | None = None
) -> bytes:
    """A Chat Completions stream: one chunk per delta, the finish chunk, usage, [DONE]."""
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage is not None:
        chunks.append({"choices": [], "usage": usage})
    body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return body.encode()


def call_delta(call_id: str, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions delta that calls ``name`` with ``arguments`` (JSON text as sent, or a
    dict to encode), for :func:`chat_sse`."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    function = {"name": name, "arguments": text}
    return {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": function}]}


def options(**extra: Any) -> dict[str, Any]:
    """Stream options for tests: the fake key and tiny retry delays."""
    base: dict[str, Any] = {"api_key": API_KEY, "retry_base_delay_ms": 1, "timeout": (5, 5)}
    base.update(extra)
    return base


def http_threads() -> list[threading.Thread]:
    """The providers' live request threads."""
    return [t for t in threading.enumerate() if t.name == "agentkit-http" and t.is_alive()]


def wait_no_http_threads(timeout: float = 2.0) -> bool:
    """Wait (by joining them) until no provider request thread is alive."""
    deadline = time.monotonic() + timeout
    for thread in http_threads():
        thread.join(max(deadline - time.monotonic(), 0.0))
    return not http_threads()


def collect(stream: Any, timeout: float = 10.0) -> tuple[list[Any], Any]:
    """All events of a provider stream, and its final message."""
    events = list(stream)
    return events, stream.result(timeout=timeout)


def check_protocol(events: list[Any]) -> None:
    """Assert the stream protocol: start first, balanced blocks, one terminal event, last."""
    from agentkit.events import DoneEvent, ErrorEvent, StartEvent

    assert events, "no events"
    terminal = events[-1]
    assert isinstance(terminal, (DoneEvent, ErrorEvent))
    assert not any(isinstance(e, (DoneEvent, ErrorEvent)) for e in events[:-1])
    if isinstance(terminal, ErrorEvent) and len(events) == 1:
        return
    assert isinstance(events[0], StartEvent)
    partial = events[0].partial
    open_blocks: dict[int, str] = {}
    for event in events[1:-1]:
        assert event.partial is partial, "partial must be the one live message"
        kind, _, phase = event.type.rpartition("_")
        if phase == "start":
            assert event.content_index not in open_blocks
            assert event.content_index == len(partial.content) - 1 or event.content_index < len(
                partial.content
            )
            open_blocks[event.content_index] = kind
        elif phase == "delta":
            assert open_blocks.get(event.content_index) == kind
        elif phase == "end":
            assert open_blocks.pop(event.content_index) == kind
    if isinstance(terminal, DoneEvent):
        assert not open_blocks, f"blocks left open: {open_blocks}"
        assert terminal.message is partial
