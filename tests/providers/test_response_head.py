"""A response's head read without the email package reads as http.client's own reading: the
same header names and values (a head it does not take on its fast path goes to email after
all), the same framing, over real HTTP too."""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator

import pytest

from agentkit.providers.http import StreamingRequest
from agentkit.providers.response_head import parse_head
from agentkit.types import StreamOptions

HEADS = [
    b"Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"Content-Type: text/event-stream\nContent-Length: 12\n\n",  # bare line feeds
    b"Set-Cookie: a=1\r\nSet-Cookie: b=2\r\nX-Empty:\r\nX-Tab:\t tabbed  \r\n\r\n",
    b"X-Latin: caf\xe9\r\nX-Colons: a:b:c\r\n\r\n",
    b"X-Folded: first\r\n  second\r\nX-After: yes\r\n\r\n",  # obsolete line folding
    b"Not a header line\r\nX-After: yes\r\n\r\n",
    b"Name : spaced\r\nX-After: yes\r\n\r\n",
    b"X-Last: no blank line\r\n",  # the stream ended inside the head
    b"\r\n",
]


def lines_of(head: bytes) -> list[bytes]:
    reader = io.BytesIO(head)
    lines: list[bytes] = []
    while True:
        line = reader.readline()
        lines.append(line)
        if line in (b"\r\n", b"\n", b""):
            return lines


@pytest.mark.parametrize("head", HEADS)
def test_headers_read_as_http_client_reads_them(head: bytes) -> None:
    import http.client

    expected = http.client.parse_headers(io.BytesIO(head))
    got = parse_head(lines_of(head))
    assert isinstance(got, http.client.HTTPMessage)
    assert got.items() == expected.items()
    assert got.get("x-after") == expected.get("x-after")
    assert [type(d) for d in got.defects] == [type(d) for d in expected.defects]


def serve_once(raw: bytes) -> Iterator[str]:
    """A server on 127.0.0.1 that answers one request with ``raw`` and closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer() -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(rest) < length:
                rest += conn.recv(65536)
            conn.sendall(raw)
        listener.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v1/chat/completions"
    thread.join(5)


def read(url: str) -> tuple[int, dict[str, str], bytes]:
    request = StreamingRequest(
        url=url, headers={}, body=b"{}", options=StreamOptions(timeout=5), provider_label="X"
    )
    with request:
        response = request.open()
        headers = dict(request.response_headers.items())
        return response.status, headers, b"".join(request.iter_bytes())


def test_a_folded_head_after_100_continue_over_http() -> None:
    body = b"data: {}\n\n"
    raw = (
        b"HTTP/1.1 100 Continue\r\nX-Skipped: yes\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Folded: one\r\n two\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    for url in serve_once(raw):
        status, headers, got = read(url)
    assert status == 200 and got == body
    assert "X-Skipped" not in headers
    assert headers["X-Folded"].split() == ["one", "two"]


def test_a_body_that_ends_with_the_connection_over_http() -> None:
    body = b"data: {}\n\ndata: [DONE]\n\n"
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body
    for url in serve_once(raw):
        status, headers, got = read(url)
    assert status == 200 and got == body
    assert headers["Content-Type"] == "text/event-stream"
