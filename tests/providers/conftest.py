"""Fixtures of the provider tests; the replay server itself lives in ``replay_server.py``."""

from __future__ import annotations

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
