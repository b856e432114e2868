"""The command's terminal: its streams behind one lock, a status line (the spinner) that other
output clears first, the state the run and the chat share (a pending approval question, the kept
local server), and text made safe to print."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..tools import AgentTool

EXIT_INTERRUPTED = 130
"""The exit status after Ctrl-C, as shells report a SIGINT."""


class Question:
    """One approval question in chat: only a line read after it was shown can answer it."""

    def __init__(self, after_line: int) -> None:
        self.after_line = after_line
        self.answer: str | None = None
        self.done = threading.Event()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):  # a closed stream, or not a real file
        return False


class Console:
    """The command's streams, with a lock so the worker and the main thread never interleave.

    On a terminal, a status line (the spinner, :meth:`status`) is drawn on stderr only where the
    cursor is at the start of a line, and every other write clears it first, so a streamed line,
    a note or a question is never drawn over it or drawn over by it."""

    def __init__(self, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        # Guards writes to stdout/stderr, the terminal's line state and the question state below.
        self.lock = threading.Lock()
        self._terminals = {id(s) for s in (stdout, stderr) if _is_terminal(s)}
        self.line_open = False  # a partial line is on the terminal: the cursor is not at column 0
        self.status_shown = False  # a status line (or mark) is drawn on stderr
        self.status_inline = False  # it is a mark at the end of a partial line
        # In chat, the main thread owns stdin: a pending question is answered through here.
        self.chat = False
        self.question: Question | None = None
        self.lines_read = 0
        self.input_ended = False  # standard input ended: no question can be answered
        self.stdin_used = False
        self.json = False
        self.local_server: Any = None
        self.server_turns: Any = None  # the kept server's request lock (agentkit.local.busy)
        self.keep_server: bool | None = None  # None: AGENTKIT_KEEP_SERVER decides
        self.prefix: tuple[str, Sequence[AgentTool]] = ("", ())

    def out(self, text: str, end: str = "\n") -> None:
        with self.lock:
            self._write(self.stdout, text + end)

    def err(self, text: str) -> None:
        with self.lock:
            self._write(self.stderr, visible(text) + "\n")

    def note(self, text: str, end: str = "\n") -> None:
        """Text for the person at the terminal: stdout, or stderr when stdout carries JSON."""
        with self.lock:
            self._write(self.stderr if self.json else self.stdout, text + end)

    def _write(self, stream: TextIO, text: str) -> None:
        """Write ``text`` after clearing the status line (call with the lock held)."""
        if not text:
            return
        self._clear_status()
        stream.write(text)
        stream.flush()
        if id(stream) in self._terminals:
            self.line_open = not text.endswith("\n")

    @property
    def shows_status(self) -> bool:
        """Whether stderr is a terminal, where a status line can be drawn."""
        return id(self.stderr) in self._terminals

    def status(self, text: str, mark: str = "") -> bool:
        """Draw ``text`` as the status line on a terminal's stderr, replacing the last one; while
        a partial line is on the terminal (a streamed answer, a call being written), draw the
        one-character ``mark`` at the cursor instead, which the next output overwrites. Whether
        anything was drawn (nothing off a terminal)."""
        with self.lock:
            if not self.shows_status or (self.line_open and not mark):
                return False
            self._clear_status()
            if self.line_open:
                self.stderr.write(f"{mark[:1]}\b")  # the cursor stays where the text goes on
            else:
                self.stderr.write(f"\r{text}\x1b[K")
            self.stderr.flush()
            self.status_shown, self.status_inline = True, self.line_open
            return True

    def clear_status(self) -> None:
        """Remove the status line, if one is drawn."""
        with self.lock:
            self._clear_status()

    def _clear_status(self) -> None:
        if self.status_shown:  # erase from the cursor on: the mark, or the whole status line
            self.stderr.write("\x1b[K" if self.status_inline else "\r\x1b[K")
            self.stderr.flush()
            self.status_shown = False

    def line_entered(self) -> None:
        """A line was typed and read: the terminal echoed its line break, so the cursor is at
        the start of a line again."""
        with self.lock:
            self.line_open = False

    def end_input(self) -> None:
        """Standard input ended: the pending question (chat), and any asked later, is
        answered with nothing, which means "no"."""
        with self.lock:
            self.input_ended = True
            question, self.question = self.question, None
        if question is not None:
            question.done.set()

    def answer(self, number: int, line: str) -> bool:
        """Give line ``number`` to the pending question if it was read after the question was
        shown; False when there is no such question (the line is something else)."""
        with self.lock:
            question = self.question
            if question is None or number <= question.after_line:
                return False
            self.question = None
        question.answer = line
        question.done.set()
        return True


class Spinner:
    """A status line that counts the seconds something takes (``| label... 3 s``), redrawn
    every :attr:`TICK` seconds from :meth:`start` until :meth:`stop`, on a terminal's stderr
    only (at the end of a partial line, its frame alone: the screen moves while a slow model
    writes a line); the first frame comes after ``delay`` seconds, so a quick step shows none."""

    FRAMES = "|/-\\"
    TICK = 0.25

    def __init__(
        self, io: Console, label: str, *, delay: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.io = io
        self.label = label
        self.delay = delay
        self.clock = clock
        # Guards _thread and _stop (start/stop from one thread, the ticker reads _stop).
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start counting (a second start while it counts does nothing)."""
        if not self.io.shows_status:
            return
        with self._lock:
            if self._thread is not None:
                return
            stop = self._stop = threading.Event()
            thread = threading.Thread(
                target=self._tick, args=(stop, self.clock()), name="agentkit-spinner",
                daemon=True,
            )  # fmt: skip
            try:
                thread.start()
            except BaseException:  # Ctrl-C while the thread starts: one begun anyway ends now
                stop.set()
                raise
            self._thread = thread

    def stop(self) -> None:
        """Stop counting and remove the status line; waits for the ticker thread to end."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._stop.set()
        if thread is not None:
            thread.join()
            self.io.clear_status()

    def __enter__(self) -> Spinner:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _tick(self, stop: threading.Event, started: float) -> None:
        frame = 0
        while not stop.wait(self.TICK if frame else self.delay):
            waited = self.clock() - started
            spinner = self.FRAMES[frame % len(self.FRAMES)]
            self.io.status(f"{spinner} {self.label}... {waited:.0f} s", mark=spinner)
            frame += 1


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def visible(text: str) -> str:
    """``text`` safe for a terminal: control characters (escape sequences, say) and lone
    surrogates shown escaped, as ``\\x1b``; tabs and line breaks kept."""
    text = text.replace("\r\n", "\n")
    return _UNSAFE.sub(lambda m: _escaped(m.group()), text)


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def json_line(data: Any) -> str:
    """One JSON line that is safe on a terminal and always encodes as UTF-8."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
