"""Fixtures of the provider tests; the replay server itself lives in ``replay_server.py``."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def full_listener_socket() -> Iterator[socket.socket]:
    """A listening socket whose accept queue is full: a new connect() to it hangs until its
    timeout (closing the socket makes such a connect fail at its next SYN retry)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=1)
    try:
        yield listener
    finally:
        filler.close()
        listener.close()


@pytest.fixture
def full_listener(full_listener_socket: socket.socket) -> int:
    """The port of :func:`full_listener_socket`."""
    return int(full_listener_socket.getsockname()[1])
