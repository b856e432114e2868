"""HTTP/1.1 chunked transfer coding, decoded from whatever bytes one read brought.

Model APIs stream each event in an HTTP chunk of its own. urllib3 hands a chunked body over one
chunk at a time, so a reader that takes a network read as its unit of work (a parse, a flush of
the coalesced tool arguments, an update for the listeners) would do that work once per event,
even when dozens of events arrived together. :class:`ChunkDecoder` takes the bytes of one read,
however many chunks or pieces of chunks they hold, and returns the body they carry: one read of
what has arrived becomes one piece of the body.
"""

from __future__ import annotations

MAX_LINE = 4096
"""Longest chunk-size or trailer line accepted (a real one is a few bytes)."""

_HEX = b"0123456789abcdefABCDEF"

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)


class ChunkDecoder:
    """Decodes one chunked body, fed in pieces of any size (RFC 9112, section 7.1).

    Chunk extensions and trailer fields are read and dropped. :attr:`done` turns true once the
    last chunk and the trailers have been read; :attr:`extra` says whether bytes followed the
    end (the connection is then not safe to reuse).
    """

    def __init__(self) -> None:
        self._state = _SIZE
        self._left = 0  # bytes of the current chunk's data still to come
        self._line = b""  # the start of a line whose end has not arrived yet
        self.extra = False

    @property
    def done(self) -> bool:
        """Whether the whole body has been decoded."""
        return self._state == _DONE

    def feed(self, data: bytes) -> bytes:
        """The body bytes that ``data``, the next bytes on the wire, completes or carries; broken
        framing raises ``ValueError`` saying how (the request reports it as an interrupted stream)."""
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            state = self._state
            if state == _DONE:
                self.extra = True
                break
            if state == _DATA:
                take = min(self._left, end - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _DATA_END
                continue
            newline = data.find(b"\n", pos)
            if newline < 0:
                self._line += data[pos:]
                if len(self._line) > MAX_LINE:
                    raise ValueError("chunk header line too long")
                break
            line = self._line + data[pos:newline]
            self._line = b""
            if len(line) > MAX_LINE:
                raise ValueError("chunk header line too long")
            pos = newline + 1
            self._end_of_line(line[:-1] if line.endswith(b"\r") else line)
        return b"".join(out)

    def _end_of_line(self, line: bytes) -> None:
        state = self._state
        if state == _SIZE:
            size = line.split(b";", 1)[0].strip()
            if not size or size.strip(_HEX) or len(size) > 16:
                raise ValueError(f"invalid chunk size {bytes(line[:20])!r}")
            self._left = int(size, 16)
            self._state = _DATA if self._left else _TRAILER
        elif state == _DATA_END:
            if line:
                raise ValueError("chunk data longer than its declared size")
            self._state = _SIZE
        elif not line:  # _TRAILER: an empty line ends the body
            self._state = _DONE
