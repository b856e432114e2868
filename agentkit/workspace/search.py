"""Text search over the workspace for ``search_text``: the text files under a path, walked
without following symlinks out, then matched line by line.

A pattern without regular-expression syntax is matched here, quickly; any other runs in a child
process, so a catastrophic pattern holds that process, not ours, and the abort signal or
:data:`SEARCH_TIMEOUT` kills it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import PurePosixPath

from ..abort import AbortSignal
from .paths import Workspace, WorkspaceError, open_regular, printable_name, read_link

SEARCH_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 2_000_000
SEARCH_LINE_CHARS = 300
SEARCH_MAX_TOTAL_CHARS = 50_000_000
"""Text one regular-expression search hands its worker at most."""
SEARCH_TIMEOUT = 20.0
"""Seconds a regular-expression search may take before its worker is killed."""
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

Found = list[tuple[str, int, str]]
"""Matching lines: (shown path, line number, line text)."""


def search(
    ws: Workspace,
    pattern: str,
    path: str,
    glob: str | None,
    ignore_case: bool,
    max_results: int,
    signal: AbortSignal | None,
) -> tuple[Found, int, bool]:
    """The lines matching ``pattern`` under ``path`` (at most ``max_results``), the number of
    files searched, and whether the search stopped early."""
    flags = re.IGNORECASE if ignore_case else 0
    try:
        re.compile(pattern, flags)
    except re.error as exc:
        raise WorkspaceError(f"Invalid regular expression {pattern!r}: {exc}") from exc
    texts = _search_texts(ws, path, glob, signal)
    if _is_literal(pattern):
        return _search_literal(texts, pattern, ignore_case, max_results)
    return _search_regex(texts, pattern, flags, max_results, signal)


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
                target = read_link(file, folder_fd)
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
        fd = open_regular(name, parent, name)
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

