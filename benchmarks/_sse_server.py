"""The benchmarks' local model server: answers each POST with a server-sent event body, sent
in HTTP chunks, on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class SSEServer:
    """Answers each POST with ``next_body()`` (or ``answer(request body)``) as
    ``text/event-stream``, in chunks of ``piece_size`` bytes; ``url`` is its base URL,
    ``close()`` stops it. ``nodelay`` sets ``TCP_NODELAY``, so that the last small chunk does
    not wait for a delayed ACK (40 ms on Linux)."""

    def __init__(
        self,
        next_body: Callable[[], bytes] | None = None,
        piece_size: int = 16384,
        answer: Callable[[bytes], bytes] | None = None,
        nodelay: bool = False,
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = nodelay  # small writes go out at once, as a real API's do

            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                request = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = answer(request) if answer is not None else next_body()  # type: ignore[misc]
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(body), piece_size):
                    piece = body[i : i + piece_size]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, args=(0.05,), name="bench-sse-server", daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
