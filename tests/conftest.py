"""Fixtures only; the shared helpers live in ``tests/support.py``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from agentkit import set_default_stream_fn

# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def restore_default_stream_fn() -> Iterable[None]:
    """Put the process-wide default stream function back after the test."""
    yield
    set_default_stream_fn(None)


@pytest.fixture(scope="module")
def embedded_server() -> Any:
    """The embedded model's server (``agentkit.local``); skips the test when its weights are
    not installed."""
    from agentkit import local

    try:
        return local.get_local_server()
    except local.LocalModelNotInstalledError as exc:
        pytest.skip(str(exc))
