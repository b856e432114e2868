"""Server-sent events: turn an HTTP body, arriving in chunks split anywhere, into events.

Follows the WHATWG event-stream rules that matter for LLM APIs: lines end in CRLF, LF or a lone
CR (a CR at the end of a chunk waits for the next chunk to know whether an LF follows), ``data``
lines of one event are joined with newlines, ``:`` starts a comment, ``event`` names the event,
one space after the colon is dropped. Work is linear in the body size, however it is chunked: a
line that arrives in many small chunks is kept as a list of pieces and joined once when its end
is seen, and one large chunk is scanned for line ends once (see
:meth:`SSEParser._feed_any_line_ends`).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: its ``event`` name (``"message"`` when none was given) and data.

    Not frozen only because a frozen dataclass is about three times slower to create, and a
    streamed answer makes one per event; treat it as read-only."""

    event: str
    data: str
    id: str | None = None


class SSEParser:
    """Incremental event-stream parser: :meth:`feed` bytes in, get complete events out."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[str] = []  # pieces of the current, unterminated line
        self._skip_lf = False  # the previous chunk ended in CR: a leading LF belongs to it
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._first = True  # a UTF-8 byte-order mark may open the stream

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse another piece of the body; return the events it completed, in order."""
        text = self._decoder.decode(chunk)
        return self._feed_text(text)

    def close(self) -> list[SSEEvent]:
        """The body ended. A line cut off by the end is dropped (it may be half a JSON text);
        an event whose lines all ended but that lacks the closing blank line is dispatched."""
        events = self._feed_text(self._decoder.decode(b"", final=True))
        self._pending = []
        if self._data:
            events.append(self._dispatch())
        return events

    def _feed_text(self, text: str) -> list[SSEEvent]:
        if not text:
            return []
        if self._first:
            self._first = False
            if text.startswith("\ufeff"):
                text = text[1:]
        events: list[SSEEvent] = []
        start = 0
        if self._skip_lf:
            self._skip_lf = False
            if text.startswith("\n"):
                start = 1
        if "\r" not in text:
            return self._feed_lf_only(text[start:] if start else text, events)
        return self._feed_any_line_ends(text, start, events)

    def _feed_any_line_ends(self, text: str, start: int, events: list[SSEEvent]) -> list[SSEEvent]:
        """The general case: lines end in CRLF, LF or a lone CR, from ``text[start:]`` on."""
        length = len(text)
        # The next CR and LF at or after ``start``, each searched again only once passed: an
        # LF-only stream (what vendors send) then costs one scan for CR per chunk, not per line.
        cr = lf = -2
        while start < length:
            if cr != -1 and cr < start:
                cr = text.find("\r", start)
            if lf != -1 and lf < start:
                lf = text.find("\n", start)
            if cr < 0 and lf < 0:
                self._pending.append(text[start:])
                break
            if cr < 0 or (0 <= lf < cr):
                end, next_start = lf, lf + 1
            else:
                end = cr
                if cr + 1 < length:
                    next_start = cr + 2 if text[cr + 1] == "\n" else cr + 1
                else:
                    next_start = cr + 1
                    self._skip_lf = True
            if self._pending:
                self._pending.append(text[start:end])
                line = "".join(self._pending)
                self._pending = []
            else:
                line = text[start:end]
            event = self._process_line(line)
            if event is not None:
                events.append(event)
            start = next_start
        return events

    def _feed_lf_only(self, text: str, events: list[SSEEvent]) -> list[SSEEvent]:
        """The common case (no CR in the chunk): split once, and take ``data`` lines and blank
        lines without the general field parsing."""
        lines = text.split("\n")
        tail = lines.pop()  # the unterminated rest ("" when the chunk ends with a newline)
        if self._pending and lines:
            self._pending.append(lines[0])
            lines[0] = "".join(self._pending)
            self._pending = []
        data = self._data
        for line in lines:
            if line.startswith("data:"):
                data.append(line[6:] if line.startswith(" ", 5) else line[5:])
            elif not line:
                if data:  # dispatch, inlined: one event per streamed delta makes this hot
                    events.append(
                        SSEEvent(
                            self._event or "message",
                            data[0] if len(data) == 1 else "\n".join(data),
                            self._id,
                        )
                    )
                    self._event = ""
                    data = self._data = []
                else:
                    self._event = ""
            else:
                event = self._process_line(line)
                if event is not None:
                    events.append(event)
                    data = self._data
        if tail:
            self._pending.append(tail)
        return events

    def _process_line(self, line: str) -> SSEEvent | None:
        if not line:
            if self._data:
                return self._dispatch()
            self._event = ""
            return None
        if line[0] == ":":
            return None
        colon = line.find(":")
        if colon < 0:
            name, value = line, ""
        else:
            name, value = line[:colon], line[colon + 1 :]
            if value.startswith(" "):
                value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        # "retry" and unknown fields are ignored
        return None

    def _dispatch(self) -> SSEEvent:
        event = SSEEvent(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._event = ""
        self._data = []
        return event
