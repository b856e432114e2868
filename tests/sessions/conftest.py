"""Fixtures for the session tests: ``store_url`` / ``store`` parametrised over SQLite, Redis and
PostgreSQL (the real servers of ``tests/conftest.py``) so every contract test runs on all."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from agentkit.sessions import SessionStore, open_store
from tests.servers import PostgresServer, RedisServer

STORES = ["sqlite", "redis", "postgres"]
_names = itertools.count()


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The URL of a store of each kind (a fresh SQLite file; the shared servers otherwise)."""
    kind = request.param
    if kind == "sqlite":
        return f"sqlite://{tmp_path_factory.mktemp('sqlite') / 'sessions.db'}"
    if kind == "redis":
        server: RedisServer | PostgresServer = request.getfixturevalue("redis_server")
    else:
        server = request.getfixturevalue("postgres_server")
    return server.url


@pytest.fixture
def open_stores(store_url: str) -> Iterator[Callable[[], SessionStore]]:
    """Opens more connections to the store (like other processes would); closes them after."""
    opened: list[SessionStore] = []

    def make() -> SessionStore:
        store = open_store(store_url)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_stores: Callable[[], SessionStore]) -> SessionStore:
    """A connection to the store under test."""
    return open_stores()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A session name no other test uses (the servers are shared)."""
    return f"{request.node.name}-{next(_names)}"
