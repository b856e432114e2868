"""The built-in workspace tools of the ``agentkit`` command: read, write and edit files, list a
folder, search text, and run a shell command.

:func:`workspace_tools` builds them for one workspace folder, one method of
:class:`_WorkspaceTools` per tool. Every path a tool is given is confined to that folder
(:mod:`.paths`). The tools named in :data:`MUTATING_TOOLS` change the workspace or run
programs, so the CLI asks before running them (from its ``before_tool_call`` hook).
``run_command`` runs in a bubblewrap sandbox when one is available (:mod:`.sandbox`); without
one it is NOT confined: the command runs with the user's own permissions and can read, change
or send anything the user can. Its description, and the CLI's question, say which.
:func:`compact_tools` gives the same tools with shorter declarations, for a small context.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from ..abort import AbortSignal
from ..tools import AgentTool, AgentToolResult, OnUpdate, tool
from .paths import MissingPathError, Workspace, WorkspaceError, printable_name
from .sandbox import (
    COMMAND_OUTPUT_HEAD,
    COMMAND_OUTPUT_TAIL,
    run_process,
    sandbox_available,
    shell_argv,
)
from .search import SEARCH_LINE_CHARS, SEARCH_MAX_RESULTS, search
from .text import indent_like, loose_match, not_found, read_lines, read_text, trim_like

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
COMMAND_MAX_TIMEOUT = 600.0

SANDBOX_NOTE = "Sandboxed: the system is read-only, only the workspace is writable, no network."
"""What ``run_command``'s description and the CLI's question say when it runs in bubblewrap."""
UNCONFINED_NOTE = "Not sandboxed: it runs with the user's own permissions."
"""What they say when no sandbox is available."""


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
    if sandbox and not sandbox_available():
        raise WorkspaceError(
            "no sandbox for run_command: install bubblewrap (Debian: apt install bubblewrap) "
            "or allow unconfined commands"
        )
    tools = _WorkspaceTools(
        ws,
        max_read_chars=max_read_chars,
        max_output_chars=max_output_chars,
        sandboxed=sandbox_available() if sandbox is None else sandbox,
        read_before_overwrite=read_before_overwrite,
    )
    run_command = tool(label="Run command", execution_mode="sequential")(tools.run_command)
    note = SANDBOX_NOTE if tools.sandboxed else UNCONFINED_NOTE
    return [
        tool(label="Read file")(tools.read_file),
        tool(label="Write file", execution_mode="sequential")(tools.write_file),
        tool(label="Edit file", execution_mode="sequential")(tools.edit_file),
        tool(label="List folder")(tools.list_folder),
        tool(label="Search text")(tools.search_text),
        dataclasses.replace(run_command, description=f"{run_command.description}\n\n{note}"),
    ]


def is_sandboxed(tool: AgentTool) -> bool:
    """Whether ``tool`` (a ``run_command`` from :func:`workspace_tools`) runs in the sandbox."""
    return SANDBOX_NOTE in tool.description


class _WorkspaceTools:
    """The tools of one :func:`workspace_tools` call, one method each (the method's signature
    and docstring are the declaration the model sees), and what they share: the workspace, the
    limits, and the files they have seen, for ``read_before_overwrite``."""

    def __init__(
        self,
        ws: Workspace,
        *,
        max_read_chars: int,
        max_output_chars: int,
        sandboxed: bool,
        read_before_overwrite: bool,
    ) -> None:
        self.ws = ws
        self.sandboxed = sandboxed
        self._max_read_chars = max_read_chars
        self._output_head = max_output_chars // 3
        self._output_tail = max_output_chars - self._output_head
        self._read_before_overwrite = read_before_overwrite
        self._seen: set[str] = set()  # files these tools have read, written or edited (shown)
        self._refused: set[tuple[str, str]] = set()  # (path, content) of overwrites refused once
        self._lock = threading.Lock()  # guards _seen and _refused: read_file may run beside a write

    def read_file(
        self,
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
        fd, shown = self._open_or_say_create(path)
        with os.fdopen(fd, "rb") as f:
            chosen, total = read_lines(f, shown, offset, limit, self._max_read_chars)
        self._saw(shown)
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

    def write_file(self, path: str, content: str) -> AgentToolResult:
        """Create or overwrite a text file of the workspace (missing folders are created).

        Args:
            path: The file, relative to the workspace root.
            content: The complete new content of the file.
        """
        if self._read_before_overwrite:
            self._check_overwrite(path, content)
        data = content.encode("utf-8", errors="surrogateescape")
        shown, existed = self.ws.write_bytes(path, data)
        self._saw(shown)
        verb = "Overwrote" if existed else "Created"
        return AgentToolResult(
            content=f"{verb} {shown} ({len(data)} bytes)",
            details={"path": shown, "bytes": len(data), "created": not existed},
        )

    def edit_file(
        self, path: str, old_text: str, new_text: str, replace_all: bool = False
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
        fd, shown = self._open_or_say_create(path)
        with os.fdopen(fd, "rb") as f:
            text = read_text(f, shown)
        count = text.count(old_text)
        loose = None
        if count == 0:
            loose = loose_match(text, old_text)
            if loose is None:
                raise WorkspaceError(not_found(text, old_text, shown))
            start, end = loose
            new_text = indent_like(trim_like(new_text, old_text), old_text, text[start:end])
            old_text = text[start:end]
            count = 1
        if count > 1 and not replace_all:
            raise WorkspaceError(
                f"old_text occurs {count} times in {shown}; include more surrounding text so it "
                "occurs once, or set replace_all"
            )
        first_line = text[: text.index(old_text)].count("\n") + 1
        updated = text.replace(old_text, new_text)
        self.ws.write_bytes(shown, updated.encode("utf-8"))
        self._saw(shown)
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

    def list_folder(self, path: str = ".") -> AgentToolResult:
        """List a folder of the workspace: sub-folders end with ``/``, symlinks with @.

        Args:
            path: The folder, relative to the workspace root.
        """
        fd, shown = self.ws.open_folder(path)
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

    def search_text(
        self,
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
        found, files, truncated = search(
            self.ws, pattern, path, glob, ignore_case, max_results, signal
        )
        matches = [f"{shown}:{number}: {line[:SEARCH_LINE_CHARS]}" for shown, number, line in found]
        body = "\n".join(matches) if matches else f"No matches for {pattern!r}"
        if truncated:
            body += f"\n[stopped at {max_results} matches; narrow the search for more]"
        return AgentToolResult(
            content=body,
            details={"matches": len(matches), "files_searched": files, "truncated": truncated},
        )

    def run_command(
        self,
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
        argv = shell_argv(self.ws.root, command, sandboxed=self.sandboxed)
        return run_process(
            self.ws.root, argv, timeout, signal, on_update, self._output_head, self._output_tail
        )

    def _saw(self, shown: str) -> None:
        with self._lock:
            self._seen.add(shown)

    def _check_overwrite(self, path: str, content: str) -> None:
        """Refuse, once, to replace an existing file that was never read (``read_before_overwrite``)."""
        try:
            fd, shown = self.ws.open_file(path)
        except WorkspaceError:  # no such file (or not a file: write_bytes says so)
            return
        os.close(fd)
        with self._lock:
            if shown in self._seen or (shown, content) in self._refused:
                return
            self._refused.add((shown, content))
        raise WorkspaceError(
            f"{shown} already exists and was not read, so write_file did not replace it. To "
            f"change part of it, read it with read_file and then use edit_file; to replace "
            "all of it, send the same write_file call again."
        )

    def _open_or_say_create(self, path: str) -> tuple[int, str]:
        """:meth:`Workspace.open_file`, whose error for a missing path says how to create the
        file (a small model otherwise tries to read a file it was asked to make, again and
        again)."""
        try:
            return self.ws.open_file(path)
        except MissingPathError as exc:
            target = f"{path} (it makes the folders)" if exc.folder else "it"
            raise WorkspaceError(f"{exc}; to create {target}, use write_file") from None


def _check_range(name: str, value: int, low: int, high: int | None) -> None:
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise WorkspaceError(f"{name} must be {bound}, not {value}")


def _entry_name(entry: os.DirEntry[str]) -> str:
    name = printable_name(entry.name)
    if entry.is_symlink():
        return name + "@"
    if entry.is_dir():
        return name + "/"
    return name


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
