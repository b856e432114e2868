"""How the file tools read text and find what an edit replaces: a file's lines in bounded
blocks (``read_file``), a whole file as UTF-8 (``edit_file``), and the loose match that lets an
``old_text`` with other spaces or line breaks still find its one place in the file, or else
quote the file's nearest lines so the model can copy them exactly.
"""

from __future__ import annotations

import difflib
import itertools
import re
from typing import BinaryIO

from .paths import WorkspaceError

EDIT_MAX_BYTES = 10_000_000
"""The largest file ``edit_file`` changes."""


def loose_match(text: str, old_text: str) -> tuple[int, int] | None:
    """Where ``old_text`` occurs in ``text`` once its whitespace is ignored: the words must be
    the same, in order, with any run of spaces, tabs or line breaks between them. The span
    (start, end) of the one such occurrence; ``None`` when there is none or more than one."""
    words = old_text.split()
    if not words:
        return None
    pattern = re.compile(r"\s+".join(re.escape(word) for word in words))
    found = [m.span() for m in itertools.islice(pattern.finditer(text), 2)]
    return found[0] if len(found) == 1 else None


def trim_like(new_text: str, old_text: str) -> str:
    """``new_text`` without the leading and trailing whitespace that ``old_text`` has (and the
    loose match leaves out), so that the file's own around the match is kept."""
    head = old_text[: len(old_text) - len(old_text.lstrip())]
    tail = old_text[len(old_text.rstrip()) :]
    if head and new_text.startswith(head):
        new_text = new_text[len(head) :]
    if tail and new_text.endswith(tail):
        new_text = new_text[: len(new_text) - len(tail)]
    return new_text


def indent_like(new_text: str, old_text: str, matched: str) -> str:
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


def not_found(text: str, old_text: str, shown: str) -> str:
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


def read_text(f: BinaryIO, shown: str) -> str:
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


def read_lines(
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


