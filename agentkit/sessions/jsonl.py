"""Sessions as JSONL files: a header line, then one message per line, each ending in a newline.

An import checks every line before it writes anything, so a corrupt or truncated file is
rejected whole, with the line at fault named (:class:`SessionImportError`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from .base import SessionImportError, decode_message, encode_message

FORMAT = "agentkit-session"
FORMAT_VERSION = 1


def write_jsonl(name: str, records: Sequence[str], file: IO[str]) -> int:
    """Write a header and ``records`` (JSON text, one message each) to ``file``."""
    header = {"format": FORMAT, "version": FORMAT_VERSION, "name": name, "messages": len(records)}
    file.write(json.dumps(header) + "\n")
    for record in records:
        # U+2028/2029 may only occur inside JSON strings, where their escapes mean the same;
        # escaped, no line-splitting tool can cut a message in two.
        file.write(record.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n")
    return len(records)


def read_jsonl(text: str) -> tuple[dict[str, Any], list[str]]:
    """Check a whole JSONL export; return its header and its messages as records.

    Raises :class:`SessionImportError` naming the first bad line: not JSON, not a message, a
    missing header, a last line cut short (no final newline), or fewer messages than the header
    announced.
    """
    if not text:
        raise SessionImportError(1, "empty file, expected a session header")
    lines = text.split("\n")
    if lines[-1] != "":
        raise SessionImportError(len(lines), "truncated line (the file does not end in a newline)")
    lines.pop()
    header = _parse(lines[0], 1)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SessionImportError(1, f"not an agentkit session export (no {FORMAT!r} header)")
    if header.get("version") != FORMAT_VERSION:
        raise SessionImportError(1, f"unsupported format version {header.get('version')!r}")
    records: list[str] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            message = decode_message(_parse(line, number))
        except SessionImportError:
            raise
        except Exception as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise SessionImportError(number, f"not a valid message: {reason}") from None
        records.append(encode_message(message))
    expected = header.get("messages")
    if expected != len(records):
        raise SessionImportError(
            len(lines) + 1,
            f"truncated file: the header announces {expected} messages, found {len(records)}",
        )
    return header, records


def _parse(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise SessionImportError(
            number, f"invalid JSON ({exc.msg} at column {exc.colno})"
        ) from None
