"""The MCP test servers as processes: this project's own (``fault_server``, ``auth_server``)
and the third-party reference servers ``scripts/test`` installs from npm into ``.venv/npm``
(``@modelcontextprotocol/server-everything``; the MCP Inspector's command-line client).

Where npm's packages are missing, :func:`npm_bin` says so and the tests that need them skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..servers import free_port

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FAULT_SERVER = str(HERE / "fault_server.py")
AUTH_SERVER = str(HERE / "auth_server.py")
LOOPBACK = str(HERE / "loopback.cjs")
NPM_BIN = ROOT / ".venv" / "npm" / "node_modules" / ".bin"
START_TIMEOUT = 60.0


def npm_bin(name: str) -> str | None:
    """The path of an npm package's command installed by ``scripts/test``, or ``None``."""
    path = NPM_BIN / name
    if path.exists() and shutil.which("node"):
        return str(path)
    return None


def npm_skip_reason(name: str) -> str:
    return f"{name} is not installed (scripts/test installs it with npm into .venv/npm)"


class HttpServerProcess:
    """A server subprocess listening on 127.0.0.1:``port``; ready once it accepts connections."""

    def __init__(self, argv: list[str], port: int, path: str = "/mcp", env: dict[str, str] | None = None) -> None:
        self.port = port
        self.path = path
        self.process = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        self.log: list[bytes] = []
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._accepts():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("server did not start:\n" + b"".join(self.log).decode(errors="replace"))
            time.sleep(0.05)  # polling a port that is not open yet; nothing to wait on

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def _read_log(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(START_TIMEOUT)
        self._drain.join(START_TIMEOUT)


def auth_server(mode: str) -> HttpServerProcess:
    """``auth_server.py`` in ``mode`` ("bearer" or "oauth") on a free port."""
    port = free_port()
    return HttpServerProcess([sys.executable, AUTH_SERVER, str(port), mode], port)


def everything_stdio() -> list[str]:
    """The command line of server-everything over stdio (skip first if it is missing)."""
    path = npm_bin("mcp-server-everything")
    assert path is not None
    return [path, "stdio"]


def everything_http(port: int | None = None) -> HttpServerProcess:
    """server-everything over streamable HTTP on 127.0.0.1 (on ``port``, else a free one)."""
    path = npm_bin("mcp-server-everything")
    node = shutil.which("node")
    assert path is not None and node is not None
    port = port or free_port()
    # It listens on every interface; the preload keeps it to the loopback one.
    return HttpServerProcess(
        [node, "--require", LOOPBACK, path, "streamableHttp"], port, env={"PORT": str(port)}
    )
