"""The built-in workspace tools of the ``agentkit`` command: read, write and edit files, list a
folder, search text, and run a shell command.

:func:`workspace_tools` builds them for one workspace folder. Every path a tool is given is
walked one component at a time without following symlinks out of that folder (``openat`` with
``O_NOFOLLOW``), so a path outside, or a link swapped in mid-call, is refused. Writes go to a
temporary file renamed into place. The tools named in :data:`MUTATING_TOOLS` change the
workspace or run programs, so the CLI asks before running them (from its ``before_tool_call``
hook). ``run_command`` runs in a bubblewrap sandbox when one is available (the system
read-only, the home folder hidden, only the workspace writable, no network); without one it is
NOT confined: the command runs with the user's own permissions and can read, change or send
anything the user can. Its description, and the CLI's question, say which.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import difflib
import itertools
import json
import os
import re
import secrets
import selectors
import shutil
import signal as signals
import stat
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from ..abort import AbortSignal, readable_on_abort
from ..errors import AbortError, MissingPathError, WorkspaceError
from ..tools import AgentTool, AgentToolResult, OnUpdate, tool

MUTATING_TOOLS: frozenset[str] = frozenset({"write_file", "edit_file", "run_command"})
"""Tools that change the workspace or run a program: the CLI asks before each call."""

TOOL_NAMES: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "list_folder",
    "search_text",
    "run_command",
)
"""The names of the built-in tools, in the order :func:`workspace_tools` returns them."""

READ_MAX_LINES = 2000
"""Default and largest number of lines ``read_file`` returns at once."""
READ_MAX_CHARS = 60_000
"""Largest amount of text ``read_file`` returns at once."""
LIST_MAX_ENTRIES = 1000
SEARCH_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 2_000_000
SEARCH_LINE_CHARS = 300
SEARCH_MAX_TOTAL_CHARS = 50_000_000
"""Text one regular-expression search hands its worker at most."""
SEARCH_TIMEOUT = 20.0
"""Seconds a regular-expression search may take before its worker is killed."""
EDIT_MAX_BYTES = 10_000_000
"""The largest file ``edit_file`` changes."""
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
_EXIT_POLL = 0.05
"""How often a command's exit is looked for where the system has no pidfds (not Linux)."""


def _open_or_say_create(ws: Workspace, path: str) -> tuple[int, str]:
    """:meth:`Workspace.open_file`, whose error for a missing path says how to create the file
    (a small model otherwise tries to read a file it was asked to make, again and again)."""
    try:
        return ws.open_file(path)
    except MissingPathError as exc:
        target = f"{path} (it makes the folders)" if exc.folder else "it"
        raise WorkspaceError(f"{exc}; to create {target}, use write_file") from None


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_NOFOLLOW | _O_CLOEXEC
_MAX_LINKS = 40
"""Symlinks one path may pass through before it is refused (a loop, say)."""


class Workspace:
    """The folder the tools work in, and the walk that keeps every path inside it.

    Paths are opened one component at a time, each relative to the descriptor of the folder
    before it and without following symlinks (``O_NOFOLLOW``). A symlink is read and its target
    walked the same way, so a link that leads out is refused, and a link swapped in after a
    check cannot be followed: the check and the use are one step.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).resolve()
        if not resolved.is_dir():
            raise WorkspaceError(f"The workspace {root} is not a folder")
        self.root = resolved
        self._aliases = {str(resolved), os.path.abspath(root)}

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the root, or absolute), symlinks followed.

        Raises :class:`WorkspaceError` when it lies outside the workspace. Informational only:
        the tools open paths with :meth:`open_file`, :meth:`open_folder` and :meth:`locate`.
        """
        parent, name, shown = self.locate(path)
        os.close(parent)
        return self.root if shown == "." else self.root / shown

    def display(self, path: Path) -> str:
        """``path`` relative to the root, as shown to the model (``.`` for the root)."""
        try:
            return path.relative_to(self.root).as_posix() or "."
        except ValueError:
            return str(path)

    def _outside(self, path: str) -> WorkspaceError:
        return WorkspaceError(
            f"{path} is outside the workspace {self.root}; only paths inside it are allowed"
        )

    def _relative_parts(self, path: str, original: str) -> list[str]:
        """The components of ``path`` relative to the root; an absolute path must lie inside."""
        if not os.path.isabs(path):
            return path.split("/")
        normal = os.path.normpath(path)
        for alias in self._aliases:
            if normal == alias:
                return []
            if normal.startswith(alias.rstrip("/") + "/"):
                return normal[len(alias.rstrip("/")) + 1 :].split("/")
        try:  # the root reached through another name (/tmp -> /private/tmp, say)
            real = os.path.realpath(os.path.dirname(normal))
        except (OSError, ValueError):
            raise self._outside(original) from None
        for alias in self._aliases:
            if real == alias or real.startswith(alias.rstrip("/") + "/"):
                rest = real[len(alias.rstrip("/")) :].strip("/")
                return [*rest.split("/"), os.path.basename(normal)]
        raise self._outside(original)

    def locate(self, path: str, *, make_folders: bool = False) -> tuple[int, str, str]:
        """Walk ``path`` safely: (descriptor of its folder, its name there, its shown path).

        Symlinks on the way and at the end are followed only while they stay inside. The name
        is ``""`` when the path is the root itself. The caller closes the descriptor and opens
        the name with ``O_NOFOLLOW`` relative to it. ``make_folders`` creates missing folders.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise WorkspaceError("A path must be a non-empty string without NUL characters")
        pending = self._relative_parts(path, path)
        fds = [os.open(self.root, _O_DIR)]
        names: list[str] = []
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if not names:
                        raise self._outside(path)
                    os.close(fds.pop())
                    names.pop()
                    continue
                target = _read_link(part, fds[-1])
                if target is not None:
                    links += 1
                    if links > _MAX_LINKS:
                        raise WorkspaceError(f"Cannot resolve {path}: too many symbolic links")
                    if os.path.isabs(target):
                        while len(fds) > 1:
                            os.close(fds.pop())
                        names.clear()
                        pending = self._relative_parts(target, path) + pending
                    else:
                        pending = target.split("/") + pending
                    continue
                if not pending:
                    shown = "/".join([*names, part])
                    return os.dup(fds[-1]), part, shown
                fds.append(self._open_step(part, fds[-1], "/".join([*names, part]), make_folders))
                names.append(part)
            return os.dup(fds[-1]), "", "/".join(names) or "."
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def _open_step(part: str, parent: int, shown: str, make_folders: bool) -> int:
        try:
            return os.open(part, _O_DIR, dir_fd=parent)
        except FileNotFoundError:
            if not make_folders:
                raise MissingPathError(shown, folder=True) from None
        except NotADirectoryError:
            raise WorkspaceError(f"{shown} is not a folder") from None
        except OSError as exc:  # ELOOP: a symlink swapped in after the check
            raise WorkspaceError(f"Cannot open {shown}: {exc.strerror}") from None
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, dir_fd=parent)
        return os.open(part, _O_DIR, dir_fd=parent)

    def open_folder(self, path: str) -> tuple[int, str]:
        """A descriptor of the folder ``path`` (the caller closes it) and its shown path."""
        parent, name, shown = self.locate(path)
        try:
            if not name:
                return os.dup(parent), shown
            try:
                return os.open(name, _O_DIR, dir_fd=parent), shown
            except FileNotFoundError:
                raise WorkspaceError(f"{path} does not exist") from None
            except OSError:
                raise WorkspaceError(f"{path} is not a folder") from None
        finally:
            os.close(parent)

    def open_file(self, path: str) -> tuple[int, str]:
        """A read-only descriptor of the regular file ``path`` and its shown path."""
        parent, name, shown = self.locate(path)
        try:
            if not name:
                raise WorkspaceError(f"{shown} is a folder; use list_folder")
            return _open_regular(name, parent, shown), shown
        finally:
            os.close(parent)

    def write_bytes(self, path: str, data: bytes) -> tuple[str, bool]:
        """Replace or create the file ``path`` atomically (a temporary file renamed over it,
        keeping the old file's mode); return its shown path and whether it existed."""
        parent, name, shown = self.locate(path, make_folders=True)
        try:
            if not name:
                raise WorkspaceError(f"{path} is a folder, not a file")
            return shown, _replace_file(parent, name, shown, data)
        finally:
            os.close(parent)


def _read_link(name: str, parent: int) -> str | None:
    """The target of the symlink ``name`` in ``parent``, or None when it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=parent)
    except OSError:  # EINVAL (not a link) or ENOENT (missing): the next open says which
        return None


def _open_regular(name: str, parent: int, shown: str) -> int:
    """Open ``name`` read-only without following a symlink or blocking on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        raise MissingPathError(shown) from None
    except IsADirectoryError:
        raise WorkspaceError(f"{shown} is a folder; use list_folder") from None
    except OSError as exc:
        raise WorkspaceError(f"Cannot open {shown}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise WorkspaceError(f"{shown} is a folder; use list_folder")
        raise WorkspaceError(f"{shown} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _replace_file(parent: int, name: str, shown: str, data: bytes) -> bool:
    """Write ``data`` to a temporary file beside ``name`` and rename it over ``name``; an
    interrupted write leaves the old file whole. Returns whether the file existed."""
    try:
        old = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise WorkspaceError(f"{shown} is a folder, not a file")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise WorkspaceError(f"{shown} is not a regular file")
    temp = f".{name[:200]}.{secrets.token_hex(4)}.agentkit-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    fd = os.open(temp, flags, 0o666, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if old is not None:
                os.fchmod(out.fileno(), stat.S_IMODE(old.st_mode))
            os.fsync(out.fileno())
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    return old is not None


def printable_name(name: str) -> str:
    """A file name as text that always encodes: undecodable bytes shown as ``\\xNN``."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")


def workspace_tools(
    root: str | os.PathLike[str],
    *,
    max_read_chars: int = READ_MAX_CHARS,
    max_output_chars: int = COMMAND_OUTPUT_HEAD + COMMAND_OUTPUT_TAIL,
    sandbox: bool | None = None,
    read_before_overwrite: bool = False,
) -> list[AgentTool]:
    """The CLI's built-in tools, confined to the folder ``root``.

    In order: ``read_file``, ``write_file``, ``edit_file``, ``list_folder``, ``search_text``,
    ``run_command``. Those in :data:`MUTATING_TOOLS` run one call at a time.
    ``max_read_chars`` bounds the text one ``read_file`` call returns and ``max_output_chars``
    the command output ``run_command`` keeps (a third from the start, the rest from the end):
    lower them for a model with a small context window.

    ``sandbox`` says how ``run_command`` runs: ``None`` (the default) in a bubblewrap sandbox
    when :func:`sandbox_available` (a read-only system, the workspace writable, no network),
    else unconfined; ``True`` requires the sandbox (:class:`WorkspaceError` without one);
    ``False`` never uses it. The tool's description says which it is.

    ``read_before_overwrite`` guards existing files, for a small model that writes a whole file
    where it meant to change a part: ``write_file`` refuses to replace a file that these tools
    have not read, written or edited before, with an error that says to read it and use
    ``edit_file``; the same call sent again replaces it.
    """
    if max_read_chars < 1 or max_output_chars < 3:
        raise ValueError("max_read_chars and max_output_chars must be positive")
    ws = Workspace(root)
    output_head = max_output_chars // 3
    if sandbox and not sandbox_available():
        raise WorkspaceError(
            "no sandbox for run_command: install bubblewrap (Debian: apt install bubblewrap) "
            "or allow unconfined commands"
        )
    sandboxed = sandbox_available() if sandbox is None else sandbox
    seen: set[str] = set()  # files these tools have read, written or edited (shown paths)
    refused: set[tuple[str, str]] = set()  # (path, content) of overwrites refused once
    lock = threading.Lock()  # guards both: read_file may run beside a write

    def saw(shown: str) -> None:
        with lock:
            seen.add(shown)

    def check_overwrite(path: str, content: str) -> None:
        """Refuse, once, to replace an existing file that was never read (see above)."""
        try:
            fd, shown = ws.open_file(path)
        except WorkspaceError:  # no such file (or not a file: write_bytes says so)
            return
        os.close(fd)
        with lock:
            if shown in seen or (shown, content) in refused:
                return
            refused.add((shown, content))
        raise WorkspaceError(
            f"{shown} already exists and was not read, so write_file did not replace it. To "
            f"change part of it, read it with read_file and then use edit_file; to replace "
            "all of it, send the same write_file call again."
        )

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
        fd, shown = _open_or_say_create(ws, path)
        with os.fdopen(fd, "rb") as f:
            chosen, total = _read_lines(f, shown, offset, limit, max_read_chars)
        saw(shown)
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
            "path": shown,
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
        if read_before_overwrite:
            check_overwrite(path, content)
        data = content.encode("utf-8", errors="surrogateescape")
        shown, existed = ws.write_bytes(path, data)
        saw(shown)
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
        if not old_text:
            raise WorkspaceError("old_text must not be empty; use write_file to create a file")
        fd, shown = _open_or_say_create(ws, path)
        with os.fdopen(fd, "rb") as f:
            text = _read_text(f, shown)
        count = text.count(old_text)
        loose = None
        if count == 0:
            loose = _loose_match(text, old_text)
            if loose is None:
                raise WorkspaceError(_not_found(text, old_text, shown))
            start, end = loose
            new_text = _indent_like(_trim_like(new_text, old_text), old_text, text[start:end])
            old_text = text[start:end]
            count = 1
        if count > 1 and not replace_all:
            raise WorkspaceError(
                f"old_text occurs {count} times in {shown}; include more surrounding text so it "
                "occurs once, or set replace_all"
            )
        first_line = text[: text.index(old_text)].count("\n") + 1
        updated = text.replace(old_text, new_text)
        ws.write_bytes(shown, updated.encode("utf-8"))
        saw(shown)
        plural = "occurrence" if count == 1 else "occurrences"
        done = f"Replaced {count} {plural} in {shown} (first at line {first_line})"
        if loose is not None:
            done += "; old_text matched the file only with other spaces or line breaks"
        return AgentToolResult(
            content=done,
            details={
                "path": shown,
                "replacements": count,
                "first_line": first_line,
                "whitespace_differed": loose is not None,
            },
        )

    @tool(label="List folder")
    def list_folder(path: str = ".") -> AgentToolResult:
        """List a folder of the workspace: sub-folders end with ``/``, symlinks with @.

        Args:
            path: The folder, relative to the workspace root.
        """
        fd, shown = ws.open_folder(path)
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
            names = [_entry_name(e) for e in entries[:LIST_MAX_ENTRIES]]
        finally:
            os.close(fd)
        body = "\n".join(names) if names else "(empty folder)"
        if len(entries) > LIST_MAX_ENTRIES:
            body += f"\n[{len(entries) - LIST_MAX_ENTRIES} more entries not shown]"
        return AgentToolResult(content=body, details={"path": shown, "entries": len(entries)})

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
        flags = re.IGNORECASE if ignore_case else 0
        try:
            re.compile(pattern, flags)
        except re.error as exc:
            raise WorkspaceError(f"Invalid regular expression {pattern!r}: {exc}") from exc
        texts = _search_texts(ws, path, glob, signal)
        if _is_literal(pattern):
            found, files, truncated = _search_literal(texts, pattern, ignore_case, max_results)
        else:
            found, files, truncated = _search_regex(texts, pattern, flags, max_results, signal)
        matches = [f"{shown}:{number}: {line[:SEARCH_LINE_CHARS]}" for shown, number, line in found]
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
        argv = _sandboxed(ws.root, command) if sandboxed else ["/bin/sh", "-c", command]
        return _run_command(ws.root, argv, timeout, signal, on_update, head, tail)

    note = SANDBOX_NOTE if sandboxed else UNCONFINED_NOTE
    run_command = dataclasses.replace(
        run_command, description=f"{run_command.description}\n\n{note}"
    )
    return [read_file, write_file, edit_file, list_folder, search_text, run_command]


SANDBOX_NOTE = "Sandboxed: the system is read-only, only the workspace is writable, no network."
"""What ``run_command``'s description and the CLI's question say when it runs in bubblewrap."""
UNCONFINED_NOTE = "Not sandboxed: it runs with the user's own permissions."
"""What they say when no sandbox is available."""


def is_sandboxed(tool: AgentTool) -> bool:
    """Whether ``tool`` (a ``run_command`` from :func:`workspace_tools`) runs in the sandbox."""
    return SANDBOX_NOTE in tool.description


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
                    _sandboxed(Path("/"), "true"),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=20,
                )
                works = done.returncode == 0
            except (OSError, subprocess.SubprocessError):
                works = False
        _sandbox_probe.append(works)
    return _sandbox_probe[0]


def _sandboxed(workspace: Path, command: str) -> list[str]:
    """The bubblewrap command line that runs ``command`` with the system read-only, the home
    folder and /tmp empty, only ``workspace`` writable, no network. It stays in our process
    group's session, so a kill of the group reaches everything the command started."""
    home = os.path.expanduser("~")
    root = str(workspace)
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if home not in ("/", "") and os.path.isdir(home):
        argv += ["--tmpfs", home]
    if root != "/":
        argv += ["--bind", root, root]
    argv += ["--unshare-net", "--die-with-parent", "--chdir", root]
    return [*argv, "/bin/sh", "-c", command]


# --- helpers ----------------------------------------------------------------------------------


def _loose_match(text: str, old_text: str) -> tuple[int, int] | None:
    """Where ``old_text`` occurs in ``text`` once its whitespace is ignored: the words must be
    the same, in order, with any run of spaces, tabs or line breaks between them. The span
    (start, end) of the one such occurrence; ``None`` when there is none or more than one."""
    words = old_text.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(word) for word in words))
    found = [m.span() for m in itertools.islice(pattern.finditer(text), 2)]
    return found[0] if len(found) == 1 else None


def _trim_like(new_text: str, old_text: str) -> str:
    """``new_text`` without the leading and trailing whitespace that ``old_text`` has (and the
    loose match leaves out), so that the file's own around the match is kept."""
    head = old_text[: len(old_text) - len(old_text.lstrip())]
    tail = old_text[len(old_text.rstrip()) :]
    if head and new_text.startswith(head):
        new_text = new_text[len(head) :]
    if tail and new_text.endswith(tail):
        new_text = new_text[: len(new_text) - len(tail)]
    return new_text


def _indent_like(new_text: str, old_text: str, matched: str) -> str:
    """``new_text`` with the indentation the file has where ``old_text`` had other: line by
    line, when the three have as many lines and a new line is indented as the old one was."""
    new_lines, old_lines = new_text.split("\n"), old_text.strip().split("\n")
    file_lines = matched.split("\n")
    if not len(new_lines) == len(old_lines) == len(file_lines):
        return new_text
    fixed = [new_lines[0]]
    for new, old, found in zip(new_lines[1:], old_lines[1:], file_lines[1:], strict=True):
        indent, old_indent = _indent(found), _indent(old)
        if _indent(new) == old_indent and new.strip():
            new = indent + new[len(old_indent) :]
        fixed.append(new)
    return "\n".join(fixed)


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def _not_found(text: str, old_text: str, shown: str) -> str:
    """The error for an ``old_text`` not in the file: it quotes the file's lines nearest to
    the text's first line, so the model can copy them exactly."""
    message = f"old_text was not found in {shown}; copy the text exactly from the file"
    lines = text.splitlines()
    wanted = next((line.strip() for line in old_text.splitlines() if line.strip()), "")
    if not lines or not wanted:
        return message
    scores = [difflib.SequenceMatcher(None, wanted, line.strip()).ratio() for line in lines]
    best = max(range(len(lines)), key=scores.__getitem__)
    if scores[best] < 0.5:
        return message + f" (read it with read_file: no line is like {_clip_line(wanted)!r})"
    shown_lines = "\n".join(
        f"{n + 1}: {_clip_line(lines[n])}" for n in range(max(0, best - 1), min(len(lines), best + 2))
    )
    return message + f". The nearest lines:\n{shown_lines}"


def _clip_line(line: str, limit: int = 200) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _check_range(name: str, value: int, low: int, high: int | None) -> None:
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise WorkspaceError(f"{name} must be {bound}, not {value}")


def _read_text(f: BinaryIO, shown: str) -> str:
    """A workspace file's text; refuses binary, non-UTF-8 and too large files."""
    data = f.read(EDIT_MAX_BYTES + 1)
    if len(data) > EDIT_MAX_BYTES:
        raise WorkspaceError(f"{shown} is larger than {EDIT_MAX_BYTES} bytes; too large to edit")
    if b"\0" in data[:8192]:
        raise WorkspaceError(f"{shown} is a binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkspaceError(
            f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc


def _read_lines(
    f: BinaryIO, shown: str, offset: int, limit: int, max_chars: int
) -> tuple[list[str], int]:
    """Up to ``limit`` lines from line ``offset`` on (at most ``max_chars`` of text), and the
    file's line count. Reads in blocks and keeps at most ``max_chars`` of any one line, so a
    huge file, even one without a newline, costs time, not memory."""
    head = f.read(8192)
    if b"\0" in head:
        raise WorkspaceError(f"{shown} is a binary file")
    keep = max_chars * 4  # bytes: enough for max_chars characters of UTF-8
    chosen: list[str] = []
    size = 0
    total = 0
    full = False
    line = bytearray()
    cut = False
    started = False

    def take() -> None:
        nonlocal size, full
        if total < offset or full:
            return
        text = line.decode("utf-8", errors="replace")
        if cut or len(text) > max_chars:
            text = text[:max_chars].rstrip("\n") + " [line cut: too long]\n"
        if len(chosen) >= limit or (chosen and size + len(text) > max_chars):
            full = True
            return
        chosen.append(text)
        size += len(text)

    block = head
    while block:
        start = 0
        while start < len(block):
            newline = block.find(b"\n", start)
            stop = len(block) if newline < 0 else newline + 1
            started = True
            room = keep - len(line)
            if room > 0 and total + 1 >= offset and not full:
                line += block[start : min(stop, start + room)]
            if stop - start > room:
                cut = True
            start = stop
            if newline >= 0:
                total += 1
                take()
                line, cut, started = bytearray(), False, False
        block = f.read(65536)
    if started:
        total += 1
        take()
    return chosen, total


def _entry_name(entry: os.DirEntry[str]) -> str:
    name = printable_name(entry.name)
    if entry.is_symlink():
        return name + "@"
    if entry.is_dir():
        return name + "/"
    return name


def _search_texts(
    ws: Workspace, path: str, glob: str | None, signal: AbortSignal | None
) -> Iterator[tuple[str, str]]:
    """(shown path, text) of the text files under ``path``, in a stable order, each opened
    without following symlinks out of the workspace."""
    parent, name, shown = ws.locate(path)
    try:
        if name:
            try:
                st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            except FileNotFoundError:
                raise WorkspaceError(f"{path} does not exist") from None
            if not stat.S_ISDIR(st.st_mode):
                if glob is None or PurePosixPath(shown).match(glob):
                    text = _search_text_of(name, parent)
                    if text is not None:
                        yield shown, text
                return
    finally:
        os.close(parent)
    top, top_shown = ws.open_folder(path)
    prefix = "" if top_shown == "." else top_shown + "/"
    try:
        for folder, dirs, files, folder_fd in os.fwalk(".", dir_fd=top):
            dirs[:] = sorted(d for d in dirs if d not in SEARCH_SKIP_DIRS)
            where = "" if folder == "." else folder[2:] + "/"
            for file in sorted(files):
                if signal is not None:
                    signal.throw_if_aborted()
                shown_file = prefix + where + printable_name(file)
                if glob is not None and not PurePosixPath(shown_file).match(glob):
                    continue
                target = _read_link(file, folder_fd)
                if target is None:
                    text = _search_text_of(file, folder_fd)
                else:  # a link: follow it only while it stays inside
                    try:
                        fd, _ = ws.open_file(prefix + where + file)
                    except WorkspaceError:
                        continue
                    text = _text_of_fd(fd)
                if text is not None:
                    yield shown_file, text
    finally:
        os.close(top)


def _search_text_of(name: str, parent: int) -> str | None:
    try:
        fd = _open_regular(name, parent, name)
    except WorkspaceError:
        return None
    return _text_of_fd(fd)


def _text_of_fd(fd: int) -> str | None:
    """The text of a searchable file (not binary, not too large), or None."""
    with os.fdopen(fd, "rb") as f:
        data = f.read(SEARCH_MAX_FILE_BYTES + 1)
    if len(data) > SEARCH_MAX_FILE_BYTES or b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


_REGEX_SPECIALS = frozenset(".^$*+?{}[]\\|()")


def _is_literal(pattern: str) -> bool:
    """Whether ``pattern`` has no regular-expression syntax (searched in-process, quickly)."""
    return not _REGEX_SPECIALS.intersection(pattern)


Found = list[tuple[str, int, str]]


def _search_literal(
    texts: Iterator[tuple[str, str]], pattern: str, ignore_case: bool, max_results: int
) -> tuple[Found, int, bool]:
    needle = pattern.casefold() if ignore_case else pattern
    found: Found = []
    files = 0
    for shown, text in texts:
        files += 1
        for number, line in enumerate(text.splitlines(), start=1):
            if needle in (line.casefold() if ignore_case else line):
                if len(found) >= max_results:
                    return found, files, True
                found.append((shown, number, line))
    return found, files, False


_REGEX_WORKER = """
import json, re, sys
job = json.load(sys.stdin)
rx = re.compile(job["pattern"], job["flags"])
found, files, truncated = [], 0, False
for shown, text in job["files"]:
    files += 1
    for number, line in enumerate(text.splitlines(), start=1):
        if rx.search(line):
            if len(found) >= job["max"]:
                truncated = True
                break
            found.append([shown, number, line[:LINE_CHARS]])
    if truncated:
        break
json.dump({"found": found, "files": files, "truncated": truncated}, sys.stdout)
""".replace("LINE_CHARS", str(SEARCH_LINE_CHARS))


def _search_regex(
    texts: Iterator[tuple[str, str]],
    pattern: str,
    flags: int,
    max_results: int,
    signal: AbortSignal | None,
) -> tuple[Found, int, bool]:
    """Match a regular expression in a child process: a catastrophic pattern holds that
    process, not ours, and the abort signal or :data:`SEARCH_TIMEOUT` kills it."""
    files: list[tuple[str, str]] = []
    size = 0
    for shown, text in texts:
        files.append((shown, text))
        size += len(text)
        if size > SEARCH_MAX_TOTAL_CHARS:
            break
    job = json.dumps({"pattern": pattern, "flags": flags, "max": max_results, "files": files})
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _REGEX_WORKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    remove = signal.add_callback(process.kill) if signal is not None else None
    try:
        out, err = process.communicate(job.encode("utf-8"), timeout=SEARCH_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise WorkspaceError(
            f"The regular expression {pattern!r} took more than {SEARCH_TIMEOUT:g} s and was "
            "stopped; use a simpler pattern or plain text"
        ) from None
    finally:
        if remove is not None:
            remove()
        if process.poll() is None:
            process.kill()
            process.wait()
    if signal is not None:
        signal.throw_if_aborted()
    if process.returncode != 0:
        raise WorkspaceError(f"The search failed: {err.decode('utf-8', 'replace')[-300:]}")
    result = json.loads(out)
    found = [(str(s), int(n), str(t)) for s, n, t in result["found"]]
    return found, int(result["files"]), bool(result["truncated"]) or size > SEARCH_MAX_TOTAL_CHARS


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


def _run_command(
    cwd: Path,
    argv: list[str],
    timeout: float,
    signal: AbortSignal | None,
    on_update: Callable[[Any], None] | None,
    head: int,
    tail: int,
) -> AgentToolResult:
    """Run ``argv`` (a shell command line, maybe in the sandbox) on this thread, within
    ``timeout`` and ``signal``."""
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
    # The wait below wakes on output, on the command's exit (a pidfd), on an abort and on its
    # own deadlines; it never polls, except for the exit where the system has no pidfds.
    exit_fd = _exit_fd(process)
    try:
        with readable_on_abort(signal) as aborted, selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ, "output")
            selector.register(aborted, selectors.EVENT_READ, "abort")
            if exit_fd is not None:
                selector.register(exit_fd, selectors.EVENT_READ, "exit")
            open_pipe = True
            while True:
                now = time.monotonic()
                if signal is not None and signal.aborted:
                    outcome = "aborted"
                    break
                if exited_at is None and process.poll() is not None:
                    exited_at = now
                # Done at end of output, or soon after exit if a background child keeps the
                # pipe open (it is killed below).
                if exited_at is not None and (not open_pipe or now - exited_at > _EXIT_GRACE):
                    break
                if now >= deadline:
                    outcome = "timeout"
                    break
                if on_update is not None and changed and now - last_update >= _UPDATE_INTERVAL:
                    changed, last_update = False, now
                    on_update(AgentToolResult(content=buffer.text(), details={"running": True}))
                wake_at = deadline
                if exited_at is not None:
                    wake_at = min(wake_at, exited_at + _EXIT_GRACE)
                elif exit_fd is None:
                    wake_at = min(wake_at, now + _EXIT_POLL)
                if on_update is not None and changed:
                    wake_at = min(wake_at, last_update + _UPDATE_INTERVAL)
                for key, _ in selector.select(timeout=max(0.0, wake_at - now)):
                    if key.data == "output":
                        open_pipe = _read_available(fd, buffer)
                        changed = True
                        if not open_pipe:
                            selector.unregister(fd)
                    elif key.data == "exit":
                        selector.unregister(key.fd)  # it stays readable once the command exits
    finally:
        _kill_group(process)
        process.wait()
        _read_available(fd, buffer)
        buffer.add(b"", final=True)
        process.stdout.close()
        if exit_fd is not None:
            os.close(exit_fd)
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


# --- compact declarations ---------------------------------------------------------------------

_COMPACT: dict[str, tuple[str, dict[str, str | None]]] = {
    "read_file": (
        "Read a text file.",
        {"path": None, "offset": "first line (1-based)", "limit": "max lines"},
    ),
    "write_file": ("Create or overwrite a file.", {"path": None, "content": "whole new text"}),
    "edit_file": (
        "Replace exact text in a file.",
        {
            "path": None,
            "old_text": "text to find, exactly",
            "new_text": "replacement",
            "replace_all": "replace every occurrence",
        },
    ),
    "list_folder": ("List a folder.", {"path": None}),
    "search_text": (
        "Find lines matching a regular expression in files.",
        {
            "pattern": None,
            "path": "file or folder",
            "glob": "file name pattern, e.g. *.py",
            "ignore_case": None,
            "max_results": None,
        },
    ),
    "run_command": (
        "Run a shell command in the workspace folder.",
        {"command": None, "timeout": "seconds"},
    ),
}


def compact_tools(tools: list[AgentTool]) -> list[AgentTool]:
    """The built-in tools with short declarations (about half the tokens), for a model with a
    small context: a prompt the model must read on every run costs time on a small machine.
    Tools this module did not make are returned unchanged."""
    compacted: list[AgentTool] = []
    for original in tools:
        short = _COMPACT.get(original.name)
        if short is None:
            compacted.append(original)
            continue
        description, notes = short
        if original.name == "run_command":
            sandboxed = is_sandboxed(original)
            description += " " + (SANDBOX_NOTE if sandboxed else UNCONFINED_NOTE)
        parameters = json.loads(json.dumps(original.parameters))
        for name, schema in parameters.get("properties", {}).items():
            schema.pop("description", None)
            schema.pop("title", None)
            if notes.get(name):
                schema["description"] = notes[name]
        compacted.append(
            dataclasses.replace(original, description=description, parameters=parameters)
        )
    return compacted
