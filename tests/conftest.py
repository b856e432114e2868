"""Fixtures only; the shared helpers live in ``tests/support.py``."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import set_default_stream_fn
from tests.providers.replay_server import ReplayServer
from tests.servers import PostgresServer, RedisServer

# --- markers: what a test needs beyond its own process (setup.cfg lists them) ------------------

_FIXTURE_MARKERS = {
    "redis_server": "stores",
    "postgres_server": "stores",
    "embedded_server": "embedded",
}
"""The fixtures that bring a marker's need with them: a test using one gets the marker."""

_STORE_KINDS = frozenset({"redis", "postgres"})
"""A test parameter with one of these values runs on that store's real server (the session
tests' ``store_url``, ``kind``...), which its fixtures start through ``getfixturevalue``."""


_COMMAND_MODULES = frozenset(
    {"test_local_server.py", "test_main_job.py", "test_console_samples.py", "test_local_models.py"}
)
"""The modules whose embedded tests run the ``agentkit`` command and its kept server."""


@pytest.hookimpl(tryfirst=True)  # before the -m selection of setup.cfg reads the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test for the servers its fixtures and parameters need, so that a plain
    ``pytest`` (``-m "not (...)"`` in setup.cfg) leaves it to ``scripts/test``."""
    for item in items:
        needs = {_FIXTURE_MARKERS[name] for name in item.fixturenames if name in _FIXTURE_MARKERS}
        callspec = getattr(item, "callspec", None)
        if callspec is not None and _STORE_KINDS & {
            value for value in callspec.params.values() if isinstance(value, str)
        }:
            needs.add("stores")
        for marker in sorted(needs):
            item.add_marker(marker)
        if item.get_closest_marker("embedded") is not None:
            # scripts/test runs the suite on pytest-xdist workers (--dist loadgroup). The
            # embedded model's tests make two groups, each on one worker, one test after another
            # (each of them takes the machine's cores): the command's, on the default model, and
            # the protocol's, on the smaller one. Each worker keeps its servers in a folder of its
            # own (kept_servers_stay_in_the_suite), so the two groups never share one.
            group = "embedded-command" if item.path.name in _COMMAND_MODULES else "embedded"
            item.add_marker(pytest.mark.xdist_group(group))


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 for the whole test run."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on 127.0.0.1 for the whole test run."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def fresh_store_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """The URL of an empty session store of each kind that no other test shares: for tests of
    what a whole store holds (the shared servers' default databases hold every test's)."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path_factory.mktemp('sqlite') / 'sessions.db'}"
    server: RedisServer | PostgresServer = request.getfixturevalue(f"{request.param}_server")
    return server.fresh_url()


@pytest.fixture
def server() -> Iterator[ReplayServer]:
    """A replay server of recorded provider streams on 127.0.0.1 for one test (tests in a
    folder with a ``server`` fixture of its own get that one instead)."""
    replay = ReplayServer()
    replay.start()
    try:
        yield replay
    finally:
        replay.stop()


@pytest.fixture
def quota_server() -> Iterator[Any]:
    """Start quota servers (:class:`tests.quota_server.QuotaServer`, ``quota_server(per=1.0)``);
    each is stopped after the test."""
    from tests.quota_server import QuotaServer

    servers: list[QuotaServer] = []

    def start(**settings: Any) -> QuotaServer:
        started = QuotaServer(**settings).start()
        servers.append(started)
        return started

    yield start
    for started in servers:
        started.stop()


@pytest.fixture(params=["memory", "redis"])
def quota_backend(request: pytest.FixtureRequest) -> Any:
    """Each rate-limiter backend, its buckets fresh for the test (a prefix of its own on the
    session's Redis)."""
    import uuid

    from agentkit.limits import MemoryBackend, RedisBackend

    if request.param == "memory":
        return MemoryBackend()
    redis: RedisServer = request.getfixturevalue("redis_server")
    return RedisBackend(redis.url, prefix=f"test:{uuid.uuid4().hex}")


@pytest.fixture
def ctrl_c() -> Iterable[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` during the test, as in a terminal, even where the test
    process was started with SIGINT ignored (a shell's background job: ``pytest &``). Python
    raises it on the main thread only, so elsewhere the test is skipped."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("KeyboardInterrupt is raised on the main thread only")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def restore_default_stream_fn() -> Iterable[None]:
    """Put the process-wide default stream function back after the test."""
    yield
    set_default_stream_fn(None)


@pytest.fixture(scope="module")
def embedded_server() -> Any:
    """An embedded model's server (``agentkit.local``) for the tests of its protocol (the
    template, the grammar, the wire APIs), which both models share: the smaller, faster one
    (``local-0-5b``), so that the suite stays quick; the command's tests run the default one.
    Skips the test when its weights are not installed."""
    from agentkit import local

    try:
        return local.get_local_server(model_path=local.prepare_weights(weights=local.CODER_0_5B))
    except local.LocalModelNotInstalledError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session", autouse=True)
def kept_servers_stay_in_the_suite(tmp_path_factory: pytest.TempPathFactory) -> Iterable[Path]:
    """A kept local server that a test starts (``agentkit run`` keeps one by default) lives in
    a folder of the suite's own, never the user's, and is stopped when the suite ends."""
    directory = tmp_path_factory.mktemp("kept-server")
    before = os.environ.get("AGENTKIT_SERVER_DIR")
    os.environ["AGENTKIT_SERVER_DIR"] = str(directory)
    try:
        yield directory
    finally:
        from agentkit.local.kept import stop_kept_servers

        stop_kept_servers()
        left = [
            entry.name
            for entry in Path("/proc").glob("[0-9]*")
            if _runs_kept_server_in(entry / "cmdline", directory)
        ]
        assert not left, f"kept local servers outlived the test suite: pids {left}"
        if before is None:
            os.environ.pop("AGENTKIT_SERVER_DIR", None)
        else:
            os.environ["AGENTKIT_SERVER_DIR"] = before


def _runs_kept_server_in(cmdline: Path, directory: Path) -> bool:
    try:
        argv = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"agentkit.local.kept" in argv and str(directory).encode() in argv
