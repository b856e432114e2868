"""Streamed JSON: tool-call arguments that arrive in pieces, and Gemini's incremental JSON array.

Tool arguments: :class:`ToolArgsBuffer` keeps the pieces in a list (appending is O(1)) and joins
them only when asked. The live ``partial.content[i].arguments`` a consumer sees is re-parsed on a
geometric schedule: after every delta while the text is short (at most
:data:`EAGER_PARSE_LIMIT` characters, so the cost per delta is bounded), and beyond that only once
the text has grown by half since the last parse. The parses then form a geometric series, so the
total cost stays linear in the argument length (about three full parses in the worst case) while
the partial arguments lag by at most a third of the text. The final arguments are parsed once,
when the call ends.

:func:`parse_streaming_json` never raises: strict parse, then a repaired parse (raw control
characters in strings escaped, invalid backslash escapes doubled), then a best-effort parse of
truncated JSON (unterminated strings kept, dangling keys and literals dropped), then ``{}``.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

EAGER_PARSE_LIMIT = 2048
"""Arguments up to this many characters are re-parsed after every delta."""

_MISSING: Any = object()

# --- repair ------------------------------------------------------------------------------------

# "unrolled loop" patterns: a plain character-class run between escapes stays linear in sre
_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
_CONTROL_RE = re.compile(r"[\x00-\x1f]")
_BAD_ESCAPE_RE = re.compile(r'\\(?![\\"/bfnrtu]|$)|\\u(?![0-9a-fA-F]{4})')
_CONTROL_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_control(match: re.Match[str]) -> str:
    char = match.group(0)
    return _CONTROL_ESCAPES.get(char) or f"\\u{ord(char):04x}"


def _repair_string(match: re.Match[str]) -> str:
    text = match.group(0)
    text = _CONTROL_RE.sub(_escape_control, text)
    return _BAD_ESCAPE_RE.sub(lambda m: "\\" + m.group(0), text)


def repair_json(text: str) -> str:
    """Escape raw control characters inside strings and double invalid backslash escapes."""
    return _STRING_RE.sub(_repair_string, text)


# --- partial parse -----------------------------------------------------------------------------

_WS_RE = re.compile(r"[ \t\n\r]*")
_NUMBER_RE = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_STRING_BODY_RE = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_NUMBER_TAIL_RE = re.compile(r"[.eE][+-]?\d*")
_LITERALS = {"true": True, "false": False, "null": None}


class _Incomplete(Exception):
    """The text ended inside a value; ``value`` is what could be salvaged (or missing)."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _PartialParser:
    """Recursive descent over possibly truncated JSON, token by token (regexes do the scanning)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.end = len(text)

    def skip_ws(self) -> None:
        self.pos = _WS_RE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def value(self) -> Any:
        self.skip_ws()
        if self.pos >= self.end:
            raise _Incomplete(_MISSING)
        char = self.text[self.pos]
        if char == "{":
            return self.obj()
        if char == "[":
            return self.array()
        if char == '"':
            return self.string()
        if char == "-" or char.isdigit():
            return self.number()
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return literal
            if word.startswith(self.text[self.pos : self.pos + len(word)]) and (
                self.pos + len(word) > self.end
            ):
                raise _Incomplete(_MISSING)
        raise ValueError(f"unexpected character at {self.pos}")

    def string(self) -> str:
        body = _STRING_BODY_RE.match(self.text, self.pos + 1)
        assert body is not None
        stop = body.end()
        if stop < self.end and self.text[stop] == '"':
            self.pos = stop + 1
            return json.loads(self.text[body.start() - 1 : stop + 1])
        raw = self.text[self.pos + 1 : stop]
        raw = re.sub(r"\\u[0-9a-fA-F]{0,3}$|\\$", "", raw)
        self.pos = self.end
        try:
            salvaged = json.loads('"' + raw + '"')
        except ValueError:
            salvaged = raw
        raise _Incomplete(salvaged)

    def number(self) -> Any:
        match = _NUMBER_RE.match(self.text, self.pos)
        if match is None:
            if self.text[self.pos :] == "-":
                raise _Incomplete(_MISSING)
            raise ValueError(f"bad number at {self.pos}")
        self.pos = match.end()
        value = json.loads(match.group(0))
        if self.pos >= self.end:
            raise _Incomplete(value)  # the best guess; more digits may follow
        if self.text[self.pos] in ".eE":
            if _NUMBER_TAIL_RE.fullmatch(self.text, self.pos):
                self.pos = self.end
                raise _Incomplete(value)
            raise ValueError(f"bad number at {self.pos}")
        return value

    def obj(self) -> dict[str, Any]:
        result: dict[str, Any] = {}
        self.pos += 1
        while True:
            self.skip_ws()
            if self.pos >= self.end:
                raise _Incomplete(result)
            char = self.text[self.pos]
            if char == "}":
                self.pos += 1
                return result
            if char == ",":
                self.pos += 1
                continue
            if char != '"':
                raise ValueError(f"expected a key at {self.pos}")
            try:
                key = self.string()
            except _Incomplete:
                raise _Incomplete(result) from None
            self.skip_ws()
            if self.pos >= self.end:
                raise _Incomplete(result)
            if self.text[self.pos] != ":":
                raise ValueError(f"expected ':' at {self.pos}")
            self.pos += 1
            try:
                result[key] = self.value()
            except _Incomplete as incomplete:
                if incomplete.value is not _MISSING:
                    result[key] = incomplete.value
                raise _Incomplete(result) from None

    def array(self) -> list[Any]:
        result: list[Any] = []
        self.pos += 1
        while True:
            self.skip_ws()
            if self.pos >= self.end:
                raise _Incomplete(result)
            char = self.text[self.pos]
            if char == "]":
                self.pos += 1
                return result
            if char == ",":
                self.pos += 1
                continue
            try:
                result.append(self.value())
            except _Incomplete as incomplete:
                if incomplete.value is not _MISSING:
                    result.append(incomplete.value)
                raise _Incomplete(result) from None


def parse_partial_json(text: str) -> Any:
    """Parse JSON that may be cut off anywhere; raise ``ValueError`` if it is invalid, not cut."""
    parser = _PartialParser(text)
    try:
        value = parser.value()
    except _Incomplete as incomplete:
        if incomplete.value is _MISSING:
            raise ValueError("no value") from None
        return incomplete.value
    parser.skip_ws()
    if parser.pos != parser.end:
        raise ValueError(f"extra data at {parser.pos}")
    return value


def parse_streaming_json(text: str | None) -> Any:
    """Best-effort JSON for streamed tool arguments; never raises, ``{}`` when nothing works."""
    if text is None or not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        pass
    repaired = repair_json(text)
    if repaired != text:
        try:
            return json.loads(repaired)
        except ValueError:
            pass
    for candidate in (text, repaired) if repaired != text else (text,):
        try:
            return parse_partial_json(candidate)
        except (ValueError, RecursionError):
            continue
    return {}


def as_arguments(value: Any) -> dict[str, Any]:
    """Tool arguments are an object; anything else parsed from the stream becomes ``{}``."""
    return value if isinstance(value, dict) else {}


class ToolArgsBuffer:
    """The arguments text of one streaming tool call, with linear-cost partial parsing.

    :meth:`append` is O(len(delta)); :meth:`partial` re-parses on the schedule described in the
    module docstring and otherwise returns the last parse; :meth:`final` parses the whole text
    once.
    """

    __slots__ = ("_pieces", "_length", "_joined", "_parsed_length", "_parsed")

    def __init__(self, initial: str = "") -> None:
        self._pieces: list[str] = [initial] if initial else []
        self._length = len(initial)
        self._joined: str | None = None
        self._parsed_length = -1
        self._parsed: dict[str, Any] = {}

    def __len__(self) -> int:
        return self._length

    def append(self, delta: str) -> None:
        """Add the next piece of the arguments text."""
        if delta:
            self._pieces.append(delta)
            self._length += len(delta)
            self._joined = None

    @property
    def text(self) -> str:
        """The whole text so far (joined once and cached until the next append)."""
        if self._joined is None:
            self._joined = "".join(self._pieces)
            self._pieces = [self._joined] if self._joined else []
        return self._joined

    def due(self) -> bool:
        """Whether the schedule calls for a new partial parse now."""
        if self._length == self._parsed_length:
            return False
        return self._length <= EAGER_PARSE_LIMIT or self._length * 2 >= self._parsed_length * 3

    def partial(self) -> dict[str, Any] | None:
        """Fresh partial arguments if a parse is due, else ``None`` (keep the previous ones)."""
        if not self.due():
            return None
        self._parsed = as_arguments(parse_streaming_json(self.text))
        self._parsed_length = self._length
        return self._parsed

    def final(self) -> dict[str, Any]:
        """The complete arguments, parsed once (best effort, never raises)."""
        if self._length != self._parsed_length:
            self._parsed = as_arguments(parse_streaming_json(self.text))
            self._parsed_length = self._length
        return self._parsed


class JsonArrayStream:
    """Splits a streamed top-level JSON array (``[{...},\\r\\n{...}]``) into its elements' text.

    Used for Gemini's ``streamGenerateContent`` without ``alt=sse``. Each character is looked at
    once (regexes skip the uninteresting ones); an element that spans many chunks is kept as
    pieces and joined once.
    """

    def __init__(self) -> None:
        self._depth = 0  # nesting depth, counting the outer array as 1
        self._in_string = False
        self._escape = False
        self._pieces: list[str] = []  # the current element's text from earlier chunks
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> list[str]:
        """Parse more of the body; return the text of every element it completed."""
        text = self._decoder.decode(chunk)
        out: list[str] = []
        pos = 0
        length = len(text)
        element_start = 0 if self._depth >= 2 else -1
        while pos < length:
            if self._escape:
                self._escape = False
                pos += 1
                continue
            if self._in_string:
                match = _QUOTE_OR_BACKSLASH.search(text, pos)
                if match is None:
                    break
                pos = match.start()
                if text[pos] == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                pos += 1
                continue
            match = _STRUCTURAL.search(text, pos)
            if match is None:
                break
            pos = match.start()
            char = text[pos]
            if char == '"':
                self._in_string = True
            elif char in "{[":
                if self._depth == 1:
                    element_start = pos
                self._depth += 1
            else:  # a closing bracket
                self._depth = max(self._depth - 1, 0)
                if self._depth == 1 and element_start >= 0:
                    self._pieces.append(text[element_start : pos + 1])
                    out.append("".join(self._pieces))
                    self._pieces = []
                    element_start = -1
            pos += 1
        if self._depth >= 2 and element_start >= 0:
            self._pieces.append(text[element_start:])
        return out


_QUOTE_OR_BACKSLASH = re.compile(r'["\\]')
_STRUCTURAL = re.compile(r'["{}\[\]]')
