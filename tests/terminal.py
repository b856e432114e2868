"""A child process on a real pseudo-terminal, for the Ctrl-C tests of the ``agentkit`` command
(``test_cli_pty.py``, ``test_main_job.py``, ``test_local_server.py``)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
"""The repository, put on the child's ``PYTHONPATH``."""


_WIPED_FRAME = re.compile(rb"[^\x08]?\x08\x1b\[K")
"""A spinner frame drawn at the cursor, then wiped: what the screen no longer shows."""


def _drawn(output: bytes) -> bytes:
    return _WIPED_FRAME.sub(b"", output)


class Terminal:
    """A child process on its own pseudo-terminal, as a user's shell would run it."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            try:
                # As a shell does for a foreground job: Ctrl-C reaches the child even when this
                # test process was started with SIGINT ignored (a background job).
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.chdir(cwd)
                os.execve(sys.executable, [sys.executable, *argv], env)
            finally:
                os._exit(127)
        self.output = b""

    def read_until(
        self, marker: bytes, timeout: float = 60.0, after: int = 0, drawn: bool = False
    ) -> None:
        """Read until ``marker`` is in the output (past its first ``after`` bytes); with
        ``drawn``, in the output as the screen shows it: a spinner frame drawn at the cursor
        and wiped (a character, a backspace, an erase to the end of the line) left out."""
        deadline = time.monotonic() + timeout
        while marker not in (_drawn(self.output[after:]) if drawn else self.output[after:]):
            left = deadline - time.monotonic()
            assert left > 0, f"{marker!r} never appeared; output so far: {self.output!r}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                assert chunk, f"the terminal closed before {marker!r}: {self.output!r}"
                self.output += chunk

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")  # the terminal turns it into SIGINT for the foreground job

    def wait(self, timeout: float = 10.0) -> int:
        """The exit status; fails if the child is still running after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._drain()
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
                raise AssertionError(f"still running {timeout} s after Ctrl-C: {self.output!r}")
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                self._drain_once()

    def _drain_once(self) -> None:
        try:
            self.output += os.read(self.fd, 4096)
        except OSError:
            pass

    def _drain(self) -> None:
        while select.select([self.fd], [], [], 0)[0]:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.output += chunk
        os.close(self.fd)


def screen_lines(output: bytes) -> list[str]:
    """The lines a terminal shows for ``output``: a carriage return goes back to the start of
    the line, a backspace one column, ``ESC [K`` erases from the cursor to the end of the line,
    and text overwrites."""
    lines = []
    for raw in output.decode("utf-8", "replace").split("\n"):
        shown: list[str] = []
        column = 0
        for index, part in enumerate(raw.split("\x1b[K")):
            if index:
                del shown[column:]
            for char in part:
                if char in "\r\b":
                    column = 0 if char == "\r" else max(column - 1, 0)
                    continue
                shown[column : column + 1] = [char]
                column += 1
        lines.append("".join(shown))
    return lines
