"""What the command prints while a run goes: the streamed text and tool calls, or one JSON
object per event with ``--json``; a spinner while the model has not answered yet; errors as
the user should read them."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from ..events import event_to_dict
from ..types import TextContent, ToolCall
from .console import Console, json_line, visible

PARSE_FAILURE = re.compile(
    r"peg-native|\bpeg\b|failed to parse|parse (error|failure)|does not match the expected|"
    r"invalid tool call",
    re.IGNORECASE,
)
"""How a server says it could not parse a reply (a malformed tool call, most likely)."""


_OVERFLOW = re.compile(
    r"context (size|length|window)|exceeds? the (available )?context|too many tokens|"
    r"maximum context|prompt is too long",
    re.IGNORECASE,
)


def readable_error(text: str) -> str:
    """An error message as the user should read it: no library internals, and for a context
    overflow, what to do about it."""
    text = re.sub(r"\s*or pass api_key in the options", "", text)
    pool = re.search(r"HTTP(S)?ConnectionPool\(host='([^']*)', port=(\d+)\)", text)
    if pool is not None:
        reason = "the connection was refused" if "refused" in text.lower() else "no connection"
        if "timed out" in text.lower():
            reason = "the connection timed out"
        text = f"cannot reach {pool.group(2)}:{pool.group(3)} ({reason})"
    text = re.sub(r"<[\w.]*_?Pool[^>]*>", "the connection", text)
    if PARSE_FAILURE.search(text):
        text = "the model wrote a reply (a tool call, most likely) that could not be read"
    if _OVERFLOW.search(text):
        text += (
            " -- the conversation no longer fits the model's context: give a shorter task or "
            "read less at once (read_file offset/limit), start a new run, or pass a larger "
            "--ctx-size (local model) or pick a model with a larger context (--model)"
        )
    return text


class TextPrinter:
    """Prints streamed text and each tool call with its arguments, duration and outcome, with
    control characters shown escaped."""

    HOLD = ("{", "`", "<")
    """How a reply that may be a tool call written as text begins: such text is held back
    until the reply ends, and shown only if it did not become a call."""

    def __init__(self, io: Console) -> None:
        self.io = io
        self.open_line = False
        self.held: str | None = None  # text of a reply that may still become a tool call
        self.shown = False  # whether this reply's text has started to show

    def _end_line(self) -> None:
        if self.open_line:
            self.io.out("")
            self.open_line = False

    def _text(self, delta: str) -> None:
        if self.held is not None:
            self.held += delta
            return
        if not self.shown and not delta.strip():
            self.held = delta
            return
        if not self.shown and delta.lstrip().startswith(self.HOLD):
            self.held = delta
            return
        self.shown = True
        self.io.out(visible(delta), end="")
        self.open_line = True

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "message_update":
            inner = event.assistant_message_event
            if inner.type == "text_delta" and inner.delta:
                if self.held is not None and not self.shown and not self.held.strip():
                    delta, self.held = self.held + inner.delta, None  # only spaces so far
                    self._text(delta)
                else:
                    self._text(inner.delta)
        elif kind == "message_end" and event.message.role == "assistant":
            held, self.held, self.shown = self.held, None, False
            if held and not any(isinstance(c, ToolCall) for c in event.message.content):
                self.io.out(visible(held), end="")
                self.open_line = True
            self._end_line()
            if event.message.error_message:
                reason = event.message.stop_reason
                self.io.err(f"agentkit: {reason}: {readable_error(event.message.error_message)}")
        elif kind == "tool_execution_start":
            self._end_line()
            args = json.dumps(event.args, ensure_ascii=False, default=str)
            self.io.out(visible(f"-> {event.tool_name} {_clip(args, 200)}"))
        elif kind == "tool_execution_end":
            took = "" if event.duration_ms is None else f" {event.duration_ms:.0f} ms"
            mark = "error" if event.is_error else "ok"
            text = " ".join(
                c.text for c in event.result.content if isinstance(c, TextContent)
            ).strip()
            self.io.out(visible(f"<- {event.tool_name} {mark}{took}: {_clip(text, 200)}"))


class JsonPrinter:
    """Prints one JSON object per event (deltas without the whole partial message)."""

    def __init__(self, io: Console) -> None:
        self.io = io

    def __call__(self, event: Any) -> None:
        if event.type == "message_update":
            inner = event.assistant_message_event
            data: dict[str, Any] = {"type": "message_update", "event": inner.type}
            for name in ("content_index", "delta"):
                if hasattr(inner, name):
                    data[name] = getattr(inner, name)
        else:
            data = event_to_dict(event)
        self.io.out(json_line(data))


class Progress:
    """Shows that the model is working while nothing streams yet: a spinner with the seconds
    waited on a terminal's stderr, ``{"type": "progress", ...}`` lines with ``--json``.

    It starts with each model request (``turn_start``) and stops at the first streamed event;
    it reports the time to the first token of each request with ``--json``.
    """

    FRAMES = "|/-\\"
    TICK = 0.25
    JSON_EVERY = 1.0

    def __init__(self, io: Console, json_mode: bool, clock: Callable[[], float] = time.monotonic):
        self.io = io
        self.json_mode = json_mode
        self.clock = clock
        self.tty = bool(getattr(io.stderr, "isatty", lambda: False)())
        # Guards _started and _thread (worker thread events vs. the ticker thread).
        self._lock = threading.Lock()
        self._started: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "turn_start":
            self._start()
        elif kind in ("message_update", "message_end", "agent_end"):
            if kind == "message_end" and event.message.role != "assistant":
                return
            self._finish()

    def _start(self) -> None:
        self._finish()
        if not (self.tty or self.json_mode):
            return
        with self._lock:
            self._started = self.clock()
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._tick,
                args=(self._stop, self._started),
                name="agentkit-progress",
                daemon=True,
            )
            self._thread.start()

    def _finish(self) -> None:
        with self._lock:
            thread, started, self._thread, self._started = self._thread, self._started, None, None
        if thread is None or started is None:
            return
        self._stop.set()
        thread.join()
        if self.json_mode:
            waited = round(self.clock() - started, 3)
            self.io.out(json_line({"type": "progress", "phase": "first_event", "waited_s": waited}))
        elif self._shown:
            with self.io.lock:
                self.io.stderr.write("\r\x1b[K")
                self.io.stderr.flush()
            self._shown = False

    def _tick(self, stop: threading.Event, started: float) -> None:
        frame = 0
        if self.json_mode:
            while True:
                waited = round(self.clock() - started, 3)
                self.io.out(json_line({"type": "progress", "phase": "waiting", "waited_s": waited}))
                if stop.wait(self.JSON_EVERY):
                    return
        while not stop.wait(self.TICK if frame else 0.0):
            waited = self.clock() - started
            spinner = self.FRAMES[frame % len(self.FRAMES)]
            with self.io.lock:
                self.io.stderr.write(f"\r{spinner} working... {waited:.0f} s")
                self.io.stderr.flush()
            self._shown = True
            frame += 1


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
