"""Streamed JSON: tool-call arguments that arrive in pieces, and Gemini's incremental JSON array.

Tool arguments: :class:`ToolArgsBuffer` keeps the pieces in a list (appending is O(1)) and joins
them only when asked. The live ``partial.content[i].arguments`` a consumer sees is re-parsed on a
geometric schedule: whenever asked while the text is short (at most :data:`EAGER_PARSE_LIMIT`
characters, so the cost per parse is bounded), and beyond that only once the text has grown by
half since the last parse. The parses then form a geometric series, so the total cost stays linear
in the argument length (about three full parses in the worst case) while the partial arguments
lag by at most a third of the text. The final arguments are parsed once, when the call ends.

Parsing is ``pydantic_core.from_json`` (a Rust parser, with ``allow_partial`` for text cut off
mid-value). :func:`parse_streaming_json` never raises, at any nesting depth: strict parse, then a
repaired parse (raw control characters in strings escaped, invalid backslash escapes doubled),
then, for text that was cut off, a partial parse (unterminated strings kept, dangling keys and
literals dropped), then ``{}``. :func:`parse_json_arguments` also says whether the text was cut
off: final tool arguments completed that way are not run (the builder ends such a message as
truncated, ``stop_reason`` ``"length"``). What it returns is always JSON-serialisable: a lone UTF-16
surrogate becomes U+FFFD and a number beyond float range (``1e400``) is kept as its text.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from typing import Any

from pydantic_core import from_json

from .._serialize import clean_text

EAGER_PARSE_LIMIT = 2048
"""Arguments up to this many characters are re-parsed whenever a fresh partial is asked for."""

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


# --- parsing -----------------------------------------------------------------------------------

# A number cut off after its digits ("1.", "2e", "3e+"): dropping the tail keeps the digits.
_NUMBER_TAIL_RE = re.compile(r"(?<=\d)[.eE][+-]?$|(?<=\d[eE])[+-]$")


def _cut_off(error: ValueError) -> bool:
    """Whether a strict parse failed because the text ended early (not because it is invalid)."""
    message = str(error)
    return message.startswith("EOF while parsing") or message.startswith("unexpected end")


def parse_partial_json(text: str) -> Any:
    """Parse JSON that may be cut off anywhere; raise ``ValueError`` if it is invalid, not cut."""
    try:
        return from_json(text)
    except ValueError as error:
        if not _cut_off(error):
            raise
    # only the last three characters can be a number's cut-off tail: search there, not the text
    tail = _NUMBER_TAIL_RE.search(text, max(len(text) - 3, 0))
    if tail is not None:
        text = text[: tail.start()]
    value = from_json(text, allow_partial="trailing-strings")
    if value is None and not text.lstrip().startswith("n"):
        raise ValueError("no value")
    return value


def _strict_lenient(text: str) -> Any:
    """``json.loads``, which (unlike the Rust parser) accepts lone surrogate escapes; a number
    beyond float range is kept as its text instead of becoming ``inf``."""
    return json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)


def _finite_float(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def _no_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON")


def parse_streaming_json(text: str | None) -> Any:
    """Best-effort JSON for streamed tool arguments; never raises, ``{}`` when nothing works.

    The result is always serialisable as strict JSON (see the module docstring).
    """
    return parse_json_arguments(text)[0]


def parse_json_arguments(text: str | None) -> tuple[Any, bool]:
    """:func:`parse_streaming_json`'s value, and whether ``text`` was cut off: ``True`` when
    the value had to be completed from a truncated text (an unterminated string, a missing
    closing brace), which final tool arguments must never be."""
    if text is None or not text.strip():
        return {}, False
    try:
        value, cut = _parse(text)
        return _serialisable(value, text), cut
    except Exception:  # RecursionError from the fallbacks, or anything unforeseen: never raise
        return {}, False


def _parse(text: str) -> tuple[Any, bool]:
    try:
        return from_json(text), False
    except ValueError as error:
        if _cut_off(error):
            try:
                return parse_partial_json(text), True
            except ValueError:
                pass
    repaired = repair_json(text)
    for candidate in (repaired, text) if repaired != text else (text,):
        try:
            return _strict_lenient(candidate), False
        except (ValueError, RecursionError):
            pass
        try:
            return parse_partial_json(candidate), True
        except ValueError:
            pass
    return {}, False


def _serialisable(value: Any, text: str) -> Any:
    """``value`` with lone surrogates replaced and non-finite floats kept as their text.

    Both can only come from an escape (``\\ud83d``) or an exponent/very long number in the
    text, so the walk is skipped when the text has neither.
    """
    if "\\u" not in text and "e" not in text and "E" not in text and len(text) < 300:
        return value
    return _clean(value, text, 0)


def _clean(value: Any, text: str, depth: int) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _number_text(text)
    if depth > 10_000:
        return None
    if isinstance(value, dict):
        return {_clean(k, text, depth + 1): _clean(v, text, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(item, text, depth + 1) for item in value]
    return value


_BIG_NUMBER_RE = re.compile(r"-?\d[\d.]*[eE][+-]?\d{3,}|-?\d{300,}(?:\.\d*)?")


def _number_text(text: str) -> str:
    """The text of the first out-of-range number in ``text`` (what a non-finite float was)."""
    for match in _BIG_NUMBER_RE.finditer(text):
        if not math.isfinite(float(match.group(0))):
            return match.group(0)
    return "NaN"


def as_arguments(value: Any) -> dict[str, Any]:
    """Tool arguments are an object; anything else parsed from the stream becomes ``{}``."""
    return value if isinstance(value, dict) else {}


class ToolArgsBuffer:
    """The arguments text of one streaming tool call, with linear-cost partial parsing.

    :meth:`append` is O(len(delta)); :meth:`partial` re-parses on the schedule described in the
    module docstring and otherwise returns the last parse; :meth:`final` parses the whole text
    once.
    """

    __slots__ = ("_pieces", "_length", "_joined", "_parsed_length", "_parsed", "_cut_off")

    def __init__(self, initial: str = "") -> None:
        self._pieces: list[str] = [initial] if initial else []
        self._length = len(initial)
        self._joined: str | None = None
        self._parsed_length = -1
        self._parsed: dict[str, Any] = {}
        self._cut_off = False

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
        self._parse()
        return self._parsed

    def final(self) -> dict[str, Any]:
        """The complete arguments, parsed once (best effort, never raises); whether the text
        was cut off is then :attr:`cut_off`."""
        if self._length != self._parsed_length:
            self._parse()
        return self._parsed

    @property
    def cut_off(self) -> bool:
        """Whether the text, as last parsed, ended before its JSON did (the arguments were
        completed by the partial parser, so they are not what the model meant)."""
        return self._cut_off

    def _parse(self) -> None:
        value, self._cut_off = parse_json_arguments(self.text)
        self._parsed = as_arguments(value)
        self._parsed_length = self._length


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
