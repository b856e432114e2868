"""Fixtures only; the shared helpers live in ``tests/support.py``."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from agentkit import set_default_stream_fn

# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture
def restore_default_stream_fn() -> Iterable[None]:
    """Put the process-wide default stream function back after the test."""
    yield
    set_default_stream_fn(None)
