"""Fixtures of the provider tests; the replay server itself lives in ``replay_server.py``."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from replay_server import ReplayServer


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    srv = ReplayServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def full_listener() -> Iterator[int]:
    """A port whose accept queue is full: a new connect() to it hangs until its timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)
    try:
        yield port
    finally:
        filler.close()
        listener.close()
