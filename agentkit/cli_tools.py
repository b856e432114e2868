"""The built-in workspace tools of the ``agentkit`` command: read, write and edit files, list a
folder, search text, and run a shell command.

:func:`workspace_tools` builds them for one workspace folder. Every path a tool is given is
resolved (symlinks followed) and refused unless it lies inside that folder. The tools named in
:data:`MUTATING_TOOLS` change the workspace or run programs, so the CLI asks before running them
(from its ``before_tool_call`` hook); note that a shell command itself is not confined.
"""

from __future__ import annotations

import codecs
import os
import re
import selectors
import signal as signals
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .abort import AbortSignal
from .errors import AbortError, AgentError
from .tools import AgentTool, AgentToolResult, OnUpdate, tool

MUTATING_TOOLS: frozenset[str] = frozenset({"write_file", "edit_file", "run_command"})
"""Tools that change the workspace or run a program: the CLI asks before each call."""

READ_MAX_LINES = 2000
"""Default and largest number of lines ``read_file`` returns at once."""
READ_MAX_CHARS = 60_000
"""Largest amount of text ``read_file`` returns at once."""
LIST_MAX_ENTRIES = 1000
SEARCH_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 2_000_000
SEARCH_LINE_CHARS = 300
SEARCH_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)
COMMAND_MAX_TIMEOUT = 600.0
COMMAND_OUTPUT_HEAD = 10_000
"""Characters kept from the start of a command's output."""
COMMAND_OUTPUT_TAIL = 20_000
"""Characters kept from the end of a command's output (errors tend to be at the end)."""
_UPDATE_INTERVAL = 0.5
_EXIT_GRACE = 0.2
"""Seconds to keep reading after the command exits while a background child holds its output."""


class WorkspaceError(AgentError):
    """A workspace tool was asked for something it must not or cannot do."""


class Workspace:
    """The folder the tools work in, and the check that keeps every path inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).resolve()
        if not resolved.is_dir():
            raise WorkspaceError(f"The workspace {root} is not a folder")
        self.root = resolved

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the root, or absolute), symlinks followed.

        Raises :class:`WorkspaceError` when it lies outside the workspace.
        """
        if not path or "\0" in path:
            raise WorkspaceError("A path must be a non-empty string without NUL characters")
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop, say
            raise WorkspaceError(f"Cannot resolve {path}: {exc}") from exc
        if resolved != self.root and self.root not in resolved.parents:
            raise WorkspaceError(
                f"{path} is outside the workspace {self.root}; only paths inside it are allowed"
            )
        return resolved

    def display(self, path: Path) -> str:
        """``path`` relative to the root, as shown to the model (``.`` for the root)."""
        try:
            return path.relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)


def workspace_tools(
    root: str | os.PathLike[str],
    *,
    max_read_chars: int = READ_MAX_CHARS,
    max_output_chars: int = COMMAND_OUTPUT_HEAD + COMMAND_OUTPUT_TAIL,
) -> list[AgentTool]:
    """The CLI's built-in tools, confined to the folder ``root``.

    In order: ``read_file``, ``write_file``, ``edit_file``, ``list_folder``, ``search_text``,
    ``run_command``. Those in :data:`MUTATING_TOOLS` run one call at a time.
    ``max_read_chars`` bounds the text one ``read_file`` call returns and ``max_output_chars``
    the command output ``run_command`` keeps (a third from the start, the rest from the end):
    lower them for a model with a small context window.
    """
    if max_read_chars < 1 or max_output_chars < 3:
        raise ValueError("max_read_chars and max_output_chars must be positive")
    ws = Workspace(root)
    output_head = max_output_chars // 3

    @tool(label="Read file")
    def read_file(
        path: str,
        offset: int = 1,
        limit: int = READ_MAX_LINES,
    ) -> AgentToolResult:
        """Read a text file of the workspace.

        Args:
            path: The file, relative to the workspace root.
            offset: The first line to return (1 is the first line of the file).
            limit: How many lines to return at most (up to 2000).
        """
        _check_range("offset", offset, 1, None)
        _check_range("limit", limit, 1, READ_MAX_LINES)
        target = ws.resolve(path)
        chosen, total = _read_lines(target, ws.display(target), offset, limit, max_read_chars)
        if total and offset > total:
            raise WorkspaceError(f"{path} has {total} lines; offset {offset} is past its end")
        last = offset - 1 + len(chosen)
        body = "".join(chosen)
        if last < total:
            body += (
                f"\n[showing lines {offset}-{last} of {total}; "
                f"call read_file with offset={last + 1} for more]"
            )
        details = {
            "path": ws.display(target),
            "offset": offset,
            "lines": len(chosen),
            "total_lines": total,
        }
        return AgentToolResult(content=body, details=details)

    @tool(label="Write file", execution_mode="sequential")
    def write_file(path: str, content: str) -> AgentToolResult:
        """Create or overwrite a text file of the workspace (missing folders are created).

        Args:
            path: The file, relative to the workspace root.
            content: The complete new content of the file.
        """
        target = ws.resolve(path)
        if target.is_dir():
            raise WorkspaceError(f"{path} is a folder, not a file")
        existed = target.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8")
        target.write_bytes(data)
        shown = ws.display(target)
        verb = "Overwrote" if existed else "Created"
        return AgentToolResult(
            content=f"{verb} {shown} ({len(data)} bytes)",
            details={"path": shown, "bytes": len(data), "created": not existed},
        )

    @tool(label="Edit file", execution_mode="sequential")
    def edit_file(
        path: str, old_text: str, new_text: str, replace_all: bool = False
    ) -> AgentToolResult:
        """Replace exact text in a file of the workspace.

        old_text must match the file exactly (spaces and line breaks included) and, unless
        replace_all is set, occur exactly once: add surrounding lines to make it unique.

        Args:
            path: The file, relative to the workspace root.
            old_text: The exact text to replace.
            new_text: The text to put in its place.
            replace_all: Replace every occurrence instead of requiring exactly one.
        """
        target = ws.resolve(path)
        shown = ws.display(target)
        if not old_text:
            raise WorkspaceError("old_text must not be empty; use write_file to create a file")
        text = _read_text(target, shown)
        count = text.count(old_text)
        if count == 0:
            raise WorkspaceError(
                f"old_text was not found in {shown}; read the file and copy the text exactly"
            )
        if count > 1 and not replace_all:
            raise WorkspaceError(
                f"old_text occurs {count} times in {shown}; include more surrounding text so it "
                "occurs once, or set replace_all"
            )
        first_line = text[: text.index(old_text)].count("\n") + 1
        updated = text.replace(old_text, new_text)
        target.write_bytes(updated.encode("utf-8"))
        plural = "occurrence" if count == 1 else "occurrences"
        return AgentToolResult(
            content=f"Replaced {count} {plural} in {shown} (first at line {first_line})",
            details={"path": shown, "replacements": count, "first_line": first_line},
        )

    @tool(label="List folder")
    def list_folder(path: str = ".") -> AgentToolResult:
        """List a folder of the workspace: sub-folders end with ``/``, symlinks with @.

        Args:
            path: The folder, relative to the workspace root.
        """
        target = ws.resolve(path)
        if not target.is_dir():
            raise WorkspaceError(f"{path} is not a folder")
        entries = sorted(os.scandir(target), key=lambda e: e.name)
        names = [_entry_name(e) for e in entries[:LIST_MAX_ENTRIES]]
        body = "\n".join(names) if names else "(empty folder)"
        if len(entries) > LIST_MAX_ENTRIES:
            body += f"\n[{len(entries) - LIST_MAX_ENTRIES} more entries not shown]"
        return AgentToolResult(
            content=body, details={"path": ws.display(target), "entries": len(entries)}
        )

    @tool(label="Search text")
    def search_text(
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        ignore_case: bool = False,
        max_results: int = 100,
        signal: AbortSignal | None = None,
    ) -> AgentToolResult:
        """Search the workspace's text files for a regular expression (Python syntax).

        Prints file:line: text for each matching line. Skips binary and very large files and
        folders such as .git and node_modules.

        Args:
            pattern: The regular expression to look for.
            path: A file or folder to search, relative to the workspace root.
            glob: Only search files whose name matches this pattern, e.g. *.py.
            ignore_case: Match regardless of letter case.
            max_results: Stop after this many matching lines (up to 500).
        """
        _check_range("max_results", max_results, 1, SEARCH_MAX_RESULTS)
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as exc:
            raise WorkspaceError(f"Invalid regular expression {pattern!r}: {exc}") from exc
        target = ws.resolve(path)
        if not target.exists():
            raise WorkspaceError(f"{path} does not exist")
        matches: list[str] = []
        files = 0
        truncated = False
        for file in _walk_files(ws, target, glob):
            if signal is not None:
                signal.throw_if_aborted()
            files += 1
            for number, line in _matching_lines(file, regex):
                if len(matches) >= max_results:
                    truncated = True
                    break
                matches.append(f"{ws.display(file)}:{number}: {line[:SEARCH_LINE_CHARS]}")
            if truncated:
                break
        body = "\n".join(matches) if matches else f"No matches for {pattern!r}"
        if truncated:
            body += f"\n[stopped at {max_results} matches; narrow the search for more]"
        return AgentToolResult(
            content=body,
            details={"matches": len(matches), "files_searched": files, "truncated": truncated},
        )

    @tool(label="Run command", execution_mode="sequential")
    def run_command(
        command: str,
        timeout: float = 60.0,
        signal: AbortSignal | None = None,
        on_update: OnUpdate | None = None,
    ) -> AgentToolResult:
        """Run a shell command in the workspace root and return its exit code and output.

        The command is killed (with every process it started) when the timeout passes or the
        run is aborted. Long output keeps its beginning and its end.

        Args:
            command: The shell command line (run by /bin/sh).
            timeout: Seconds before the command is killed (up to 600).
        """
        if not 0 < timeout <= COMMAND_MAX_TIMEOUT:
            raise WorkspaceError(f"timeout must be more than 0 and at most {COMMAND_MAX_TIMEOUT:g}")
        head, tail = output_head, max_output_chars - output_head
        return _run_command(ws.root, command, timeout, signal, on_update, head, tail)

    return [read_file, write_file, edit_file, list_folder, search_text, run_command]


# --- helpers ----------------------------------------------------------------------------------


def _check_range(name: str, value: int, low: int, high: int | None) -> None:
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise WorkspaceError(f"{name} must be {bound}, not {value}")


def _check_file(path: Path, shown: str) -> None:
    if path.is_dir():
        raise WorkspaceError(f"{shown} is a folder; use list_folder")
    if not path.exists():
        raise WorkspaceError(f"{shown} does not exist")
    if not path.is_file():
        raise WorkspaceError(f"{shown} is not a regular file")


def _read_text(path: Path, shown: str) -> str:
    """A workspace file's text; refuses folders, missing files and binary or non-UTF-8 data."""
    _check_file(path, shown)
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise WorkspaceError(f"{shown} is a binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(
            f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc


def _read_lines(
    path: Path, shown: str, offset: int, limit: int, max_chars: int
) -> tuple[list[str], int]:
    """Up to ``limit`` lines from line ``offset`` on (at most ``max_chars`` of text), and the
    file's line count; streams the file so a huge one costs time, not memory."""
    _check_file(path, shown)
    chosen: list[str] = []
    size = 0
    total = 0
    full = False
    with path.open("rb") as f:
        if b"\0" in f.read(8192):
            raise WorkspaceError(f"{shown} is a binary file")
        f.seek(0)
        for total, raw in enumerate(f, start=1):
            if total < offset or full:
                continue
            line = raw.decode("utf-8", errors="replace")[:max_chars]
            if len(chosen) >= limit or (chosen and size + len(line) > max_chars):
                full = True
                continue
            chosen.append(line)
            size += len(line)
    return chosen, total


def _entry_name(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return entry.name + "@"
    if entry.is_dir():
        return entry.name + "/"
    return entry.name


def _walk_files(ws: Workspace, target: Path, glob: str | None) -> Iterator[Path]:
    """Files under ``target`` in a stable order, staying inside the workspace."""
    if target.is_file():
        if glob is None or target.match(glob):
            yield target
        return
    for folder, dirs, files in os.walk(target, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SEARCH_SKIP_DIRS)
        for name in sorted(files):
            path = Path(folder) / name
            if glob is not None and not path.match(glob):
                continue
            if path.is_symlink():
                try:
                    path = ws.resolve(str(path))
                except WorkspaceError:
                    continue
            if path.is_file():
                yield path


def _matching_lines(path: Path, regex: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    try:
        if path.stat().st_size > SEARCH_MAX_FILE_BYTES:
            return
        data = path.read_bytes()
    except OSError:
        return
    if b"\0" in data[:8192]:
        return
    text = data.decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), start=1):
        if regex.search(line):
            yield number, line


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


def _run_command(
    cwd: Path,
    command: str,
    timeout: float,
    signal: AbortSignal | None,
    on_update: Callable[[Any], None] | None,
    head: int,
    tail: int,
) -> AgentToolResult:
    """Run ``command`` through the shell, on this thread, within ``timeout`` and ``signal``."""
    if not command.strip():
        raise WorkspaceError("command is empty")
    if signal is not None:
        signal.throw_if_aborted()
    process = subprocess.Popen(
        command,
        shell=True,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so a kill reaches its children too
    )
    assert process.stdout is not None
    fd = process.stdout.fileno()
    os.set_blocking(fd, False)
    buffer = _OutputBuffer(head, tail)
    started = time.monotonic()
    deadline = started + timeout
    exited_at: float | None = None
    last_update = started
    changed = False
    outcome = "exited"
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            open_pipe = True
            while True:
                if open_pipe and selector.select(timeout=0.05):
                    open_pipe = _read_available(fd, buffer)
                    changed = True
                    if not open_pipe:
                        selector.unregister(fd)
                elif not open_pipe:
                    time.sleep(0.02)
                now = time.monotonic()
                if process.poll() is not None:
                    exited_at = exited_at or now
                    # Done at end of output, or soon after exit if a background child keeps
                    # the pipe open (it is killed below).
                    if not open_pipe or now - exited_at > _EXIT_GRACE:
                        break
                if signal is not None and signal.aborted:
                    outcome = "aborted"
                    break
                if now >= deadline:
                    outcome = "timeout"
                    break
                if on_update is not None and changed and now - last_update >= _UPDATE_INTERVAL:
                    changed, last_update = False, now
                    on_update(AgentToolResult(content=buffer.text(), details={"running": True}))
    finally:
        _kill_group(process)
        process.wait()
        _read_available(fd, buffer)
        buffer.add(b"", final=True)
        process.stdout.close()
    elapsed = time.monotonic() - started
    output = buffer.text()
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
