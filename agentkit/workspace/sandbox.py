"""The command runner behind ``run_command``: a shell command line run in the workspace, in a
bubblewrap sandbox when one works here (the system read-only, the home folder and /tmp empty,
only the workspace writable, no network), else unconfined with the user's own permissions.

The command runs in a process group of its own, so a timeout or an abort kills everything it
started. Its output keeps the beginning and the end (errors tend to be at the end). The wait
wakes on output, on the command's exit (a pidfd), on an abort and on its own deadlines; it
polls only for the exit, and only where the system has no pidfds.
"""

from __future__ import annotations

import codecs
import os
import selectors
import shutil
import signal as signals
import subprocess
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from ..abort import AbortSignal, readable_on_abort
from ..errors import AbortError
from ..tools import AgentToolResult
from .paths import WorkspaceError

COMMAND_OUTPUT_HEAD = 10_000
"""Characters kept from the start of a command's output."""
COMMAND_OUTPUT_TAIL = 20_000
"""Characters kept from the end of a command's output (errors tend to be at the end)."""
_UPDATE_INTERVAL = 0.5
_EXIT_GRACE = 0.2
"""Seconds to keep reading after the command exits while a background child holds its output."""
_EXIT_POLL = 0.05
"""How often a command's exit is looked for where the system has no pidfds (not Linux)."""


_sandbox_probe: list[bool] = []
"""The cached answer of :func:`sandbox_available` (empty until asked)."""


def sandbox_available() -> bool:
    """Whether bubblewrap (``bwrap``) is installed and can make a sandbox here (user namespaces
    may be disabled); probed once per process."""
    if not _sandbox_probe:
        works = False
        if shutil.which("bwrap") is not None:
            try:
                done = subprocess.run(
                    shell_argv(Path("/"), "true", sandboxed=True),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=20,
                )
                works = done.returncode == 0
            except (OSError, subprocess.SubprocessError):
                works = False
        _sandbox_probe.append(works)
    return _sandbox_probe[0]


def shell_argv(workspace: Path, command: str, *, sandboxed: bool) -> list[str]:
    """The command line that runs the shell ``command``: ``/bin/sh -c``, in bubblewrap when
    ``sandboxed``, with the system read-only, the home folder and /tmp empty, only
    ``workspace`` writable, no network. The sandbox stays in our process group's session, so a
    kill of the group reaches everything the command started."""
    shell = ["/bin/sh", "-c", command]
    if not sandboxed:
        return shell
    home = os.path.expanduser("~")
    root = str(workspace)
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if home not in ("/", "") and os.path.isdir(home):
        argv += ["--tmpfs", home]
    if root != "/":
        argv += ["--bind", root, root]
    argv += ["--unshare-net", "--die-with-parent", "--chdir", root]
    return [*argv, *shell]


class _OutputBuffer:
    """Keeps the head and the tail of a command's output, and counts what it dropped."""

    def __init__(self, head: int, tail: int) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head: list[str] = []
        self._head_size = 0
        self._head_limit = head
        self._tail: deque[str] = deque()
        self._tail_size = 0
        self._tail_limit = tail
        self._dropped = 0

    def add(self, data: bytes, final: bool = False) -> None:
        """Append raw output (UTF-8 split across chunks is decoded correctly)."""
        text = self._decoder.decode(data, final)
        room = self._head_limit - self._head_size
        if room > 0:
            self._head.append(text[:room])
            self._head_size += min(room, len(text))
            text = text[room:]
        if not text:
            return
        self._tail.append(text)
        self._tail_size += len(text)
        while self._tail_size > self._tail_limit:
            excess = self._tail_size - self._tail_limit
            first = self._tail[0]
            if len(first) <= excess:
                self._tail.popleft()
                self._tail_size -= len(first)
                self._dropped += len(first)
            else:
                self._tail[0] = first[excess:]
                self._tail_size -= excess
                self._dropped += excess

    def text(self) -> str:
        """The kept output, with a marker where the middle was dropped."""
        head = "".join(self._head)
        tail = "".join(self._tail)
        if self._dropped:
            return f"{head}\n[... {self._dropped} characters of output omitted ...]\n{tail}"
        return head + tail


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the command and every process it started that is still in its process group."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signals.SIGKILL)
        else:  # pragma: no cover - no process groups on Windows
            process.kill()
    except (ProcessLookupError, PermissionError):
        pass  # everything in the group has already exited


def _exit_fd(process: subprocess.Popen[bytes]) -> int | None:
    """A file descriptor that becomes readable when ``process`` exits (Linux's pidfd), or
    ``None`` where the system has none."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        fd: int = pidfd_open(process.pid)
    except OSError:
        return None
    return fd


def _read_available(fd: int, buffer: _OutputBuffer) -> bool:
    """Move what the pipe holds now into ``buffer``; return False at end of output."""
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            return False
        buffer.add(data)


def run_process(
    cwd: Path,
    argv: list[str],
    timeout: float,
    signal: AbortSignal | None,
    on_update: Callable[[Any], None] | None,
    head: int,
    tail: int,
) -> AgentToolResult:
    """Run ``argv`` (a shell command line from :func:`shell_argv`) in ``cwd`` on this thread,
    within ``timeout`` and ``signal``, keeping ``head`` and ``tail`` characters of its output;
    ``on_update`` gets the output so far while it runs."""
    if not argv[-1].strip():
        raise WorkspaceError("command is empty")
    if signal is not None:
        signal.throw_if_aborted()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a kill reaches its children too
    )
    command = _RunningCommand(process, timeout, signal, on_update, _OutputBuffer(head, tail))
    try:
        outcome = command.wait()
    finally:
        command.close()
    elapsed = time.monotonic() - command.started
    output = command.buffer.text()
    if outcome == "aborted":
        raise AbortError(f"Command aborted after {elapsed:.1f} s and killed.\n{output}".rstrip())
    if outcome == "timeout":
        raise WorkspaceError(
            f"Command timed out after {timeout:g} s and was killed.\n{output}".rstrip()
        )
    code = process.returncode
    body = f"Exit code {code}\n{output}".rstrip() if output else f"Exit code {code} (no output)"
    return AgentToolResult(
        content=body,
        details={"exit_code": code, "duration_ms": int(elapsed * 1000)},
        is_error=code != 0,
    )


_Outcome = Literal["exited", "aborted", "timeout"]


class _RunningCommand:
    """One command being waited for: its process, its output so far, and the moments its wait
    must wake at (the deadline, the grace after exit, the next progress update)."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        timeout: float,
        signal: AbortSignal | None,
        on_update: Callable[[Any], None] | None,
        buffer: _OutputBuffer,
    ) -> None:
        assert process.stdout is not None
        self.process = process
        self.buffer = buffer
        self._stdout = process.stdout
        self._fd = process.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._signal = signal
        self._on_update = on_update
        self.started = time.monotonic()
        self._deadline = self.started + timeout
        self._exited_at: float | None = None
        self._last_update = self.started
        self._changed = False  # output arrived since the last update
        self._open_pipe = True
        self._exit_fd = _exit_fd(process)

    def wait(self) -> _Outcome:
        """Wait until the command is done, times out, or the run is aborted; say which."""
        with readable_on_abort(self._signal) as aborted, selectors.DefaultSelector() as selector:
            selector.register(self._fd, selectors.EVENT_READ, "output")
            selector.register(aborted, selectors.EVENT_READ, "abort")
            if self._exit_fd is not None:
                selector.register(self._exit_fd, selectors.EVENT_READ, "exit")
            while True:
                now = time.monotonic()
                outcome = self._outcome(now)
                if outcome is not None:
                    return outcome
                self._report(now)
                for key, _ in selector.select(timeout=max(0.0, self._wake_at(now) - now)):
                    self._handle(key, selector)

    def _outcome(self, now: float) -> _Outcome | None:
        if self._signal is not None and self._signal.aborted:
            return "aborted"
        if self._exited_at is None and self.process.poll() is not None:
            self._exited_at = now
        # Done at end of output, or soon after exit if a background child keeps the pipe open
        # (close() kills it).
        if self._exited_at is not None and (
            not self._open_pipe or now - self._exited_at > _EXIT_GRACE
        ):
            return "exited"
        if now >= self._deadline:
            return "timeout"
        return None

    def _report(self, now: float) -> None:
        """Send the output so far, at most every :data:`_UPDATE_INTERVAL` and only if new."""
        if self._on_update is None or not self._changed:
            return
        if now - self._last_update >= _UPDATE_INTERVAL:
            self._changed, self._last_update = False, now
            self._on_update(AgentToolResult(content=self.buffer.text(), details={"running": True}))

    def _wake_at(self, now: float) -> float:
        wake_at = self._deadline
        if self._exited_at is not None:
            wake_at = min(wake_at, self._exited_at + _EXIT_GRACE)
        elif self._exit_fd is None:
            wake_at = min(wake_at, now + _EXIT_POLL)
        if self._on_update is not None and self._changed:
            wake_at = min(wake_at, self._last_update + _UPDATE_INTERVAL)
        return wake_at

    def _handle(self, key: selectors.SelectorKey, selector: selectors.BaseSelector) -> None:
        if key.data == "output":
            self._open_pipe = _read_available(self._fd, self.buffer)
            self._changed = True
            if not self._open_pipe:
                selector.unregister(self._fd)
        elif key.data == "exit":
            selector.unregister(key.fd)  # it stays readable once the command exits

    def close(self) -> None:
        """Kill what is left of the command's process group and take the rest of its output."""
        _kill_group(self.process)
        self.process.wait()
        _read_available(self._fd, self.buffer)
        self.buffer.add(b"", final=True)
        self._stdout.close()
        if self._exit_fd is not None:
            os.close(self._exit_fd)
