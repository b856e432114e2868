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
from .console import Console, Spinner, json_line, visible

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


_CALL_NAME = re.compile(
    r'\s*(?:```[\w+-]*\s*|<tool_call>\s*)?\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"'
)
"""How a tool call written as text begins, up to its name (the embedded model writes calls so)."""
_CALL_ARGS = re.compile(r'\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_CALL_TAIL = re.compile(r"(?:\s|`|\}|</?[\w]*>?)*$")
"""What may close a call written as text (its object, a fence, a tag): held back while it
streams, as it may also be the end of the arguments."""


class CallLine:
    """One tool call shown as it streams: ``-> name`` at once, then its arguments as they grow
    (line breaks shown as spaces, clipped at :attr:`LIMIT` characters), until :meth:`close`."""

    LIMIT = 200

    def __init__(self, io: Console, name: str) -> None:
        self.io = io
        self.shown = 0  # argument characters shown
        self.clipped = False
        self.last_space = True
        io.out(visible(f"-> {' '.join(name.split())} "), end="")

    def add(self, text: str) -> None:
        """Show more of the arguments."""
        if self.clipped or not text:
            return
        flat = []
        for char in text:
            space = char.isspace()
            if not (space and self.last_space):
                flat.append(" " if space else char)
            self.last_space = space
        piece = "".join(flat)
        room = self.LIMIT - 3 - self.shown
        if len(piece) > room:
            piece, self.clipped = piece[: max(room, 0)] + "...", True
        self.shown += len(piece)
        if piece:
            self.io.out(visible(piece), end="")

    def close(self, note: str = "") -> None:
        self.io.out(note)


class TextPrinter:
    """Prints streamed text, and each tool call as the model writes it (its name at once, its
    arguments as they grow), then its duration and outcome, with control characters shown
    escaped."""

    HOLD = ("{", "`", "<")
    """How a reply that may be a tool call written as text begins: such text is held back
    until it shows the call's name (then shown as a call) or the reply ends (then shown as text
    if it did not become a call)."""

    def __init__(self, io: Console) -> None:
        self.io = io
        self.open_line = False
        self.held: str | None = None  # text of a reply that may still become a tool call
        self.shown = False  # whether this reply's text has started to show
        self.line: CallLine | None = None  # the call whose line is open
        self.line_index: int | None = None  # its content index (a call streamed as a call)
        self.text_call: CallLine | None = None  # a call written as text, shown as it streams
        self.text_call_shown = 0  # characters of the held text shown as the call's arguments
        self.streamed: list[int] = []  # content indexes of this reply's calls shown streaming
        self.already_shown: set[str] = set()  # ids of calls whose line is shown

    def _end_line(self) -> None:
        if self.line is not None:
            self.line.close()
            self.line = self.line_index = None
        if self.open_line:
            self.io.out("")
            self.open_line = False

    def _text(self, delta: str) -> None:
        if self.held is not None:
            self.held += delta
            self._text_call()
            return
        if not self.shown and not delta.strip():
            self.held = delta
            return
        if not self.shown and delta.lstrip().startswith(self.HOLD):
            self.held = delta
            self._text_call()
            return
        self.shown = True
        self.io.out(visible(delta), end="")
        self.open_line = True

    def _text_call(self) -> None:
        """Show a call the model writes as text (``{"name": ..., "arguments": {...}}``) as it
        streams; the characters that may close it are held back until the reply ends."""
        held = self.held or ""
        if self.text_call is not None and self.text_call.clipped:
            return  # all of it that shows is shown: the rest waits for the reply's end
        start = _CALL_NAME.match(held)
        if start is None:
            return
        if self.text_call is None:
            self._end_line()
            self.text_call = CallLine(self.io, _json_string(start.group("name")))
        args = _CALL_ARGS.match(held, start.end())
        if args is None:
            return
        body = held[args.end() :]
        tail = _CALL_TAIL.search(body)
        ready = body[: tail.start()] if tail is not None else body
        self.text_call.add(ready[self.text_call_shown :])
        self.text_call_shown = max(self.text_call_shown, len(ready))

    def _end_text_call(self, message: Any) -> bool:
        """End the line of a call written as text; whether the reply became that call."""
        line, self.text_call = self.text_call, None
        shown, self.text_call_shown = self.text_call_shown, 0
        calls = [c for c in message.content if isinstance(c, ToolCall)]
        if line is None:
            return False
        if not calls:
            line.close("  (not a tool call)" if message.stop_reason == "stop" else "")
            return False
        held = self.held or ""
        start = _CALL_NAME.match(held)
        args = _CALL_ARGS.match(held, start.end()) if start is not None else None
        body = held[args.end() :] if args is not None else ""
        body = re.sub(r"\s*(?:```|</tool_call>)?\s*$", "", body)
        body = body[:-1] if body.endswith("}") else body  # the call's own closing brace
        line.add(body[shown:])
        line.close()
        self.already_shown.update(c.id for c in calls)
        return True

    def _call_event(self, inner: Any) -> None:
        """A tool call streamed as a call: its line opens at once and grows with each delta."""
        index = inner.content_index
        if inner.type == "toolcall_end":
            if self.line_index == index:
                self._end_line()
            return
        if self.line_index != index:
            self._end_line()
            block = inner.partial.content[index]
            self.line, self.line_index = CallLine(self.io, block.name), index
            if index not in self.streamed:
                self.streamed.append(index)
            elif inner.type == "toolcall_delta":
                self.line.add("... ")  # its line was broken by another call's
        if inner.type == "toolcall_delta" and self.line is not None:
            self.line.add(inner.delta)

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
            elif inner.type in ("toolcall_start", "toolcall_delta", "toolcall_end"):
                self._call_event(inner)
        elif kind == "message_end" and event.message.role == "assistant":
            self._end_message(event.message)
        elif kind == "tool_execution_start":
            if event.tool_call_id in self.already_shown:
                self.already_shown.discard(event.tool_call_id)
                return
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

    def _end_message(self, message: Any) -> None:
        self._end_line()
        became_call = self._end_text_call(message)
        held, self.held, self.shown = self.held, None, False
        if held and not became_call and not any(isinstance(c, ToolCall) for c in message.content):
            self.io.out(visible(held), end="")
            self.open_line = True
        for index in self.streamed:
            block = message.content[index] if index < len(message.content) else None
            if isinstance(block, ToolCall):
                self.already_shown.add(block.id)
        self.streamed = []
        self._end_line()
        if message.error_message:
            reason = message.stop_reason
            self.io.err(f"agentkit: {reason}: {readable_error(message.error_message)}")


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
    """Shows that the model is working: on a terminal, a spinner with the seconds waited
    (:class:`~agentkit.cli.console.Spinner`), drawn wherever the cursor is at the start of a
    line from the start of each model request (``turn_start``) until its reply ends, so the
    screen moves while the model reads its prompt and while it writes something not shown yet;
    with ``--json``, ``{"type": "progress", ...}`` lines until the request's first streamed
    event, then the time it took."""

    JSON_EVERY = 1.0

    def __init__(self, io: Console, json_mode: bool, clock: Callable[[], float] = time.monotonic):
        self.io = io
        self.json_mode = json_mode
        self.clock = clock
        self.spinner = Spinner(io, "working", clock=clock)
        # Guards _started and _thread (worker thread events vs. the ticker thread).
        self._lock = threading.Lock()
        self._started: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, event: Any) -> None:
        kind = event.type
        if kind == "turn_start":
            self._start()
        elif kind == "agent_end":
            self._finish()
        elif kind == "message_end" and event.message.role == "assistant":
            self._finish()
        elif kind == "message_update" and self.json_mode:
            self._finish()  # --json reports the time to the first streamed event

    def _start(self) -> None:
        self._finish()
        if not self.json_mode:
            self.spinner.start()
            return
        with self._lock:
            self._started = self.clock()
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._report,
                args=(self._stop, self._started),
                name="agentkit-progress",
                daemon=True,
            )
            self._thread.start()

    def _finish(self) -> None:
        self.spinner.stop()
        with self._lock:
            thread, started, self._thread, self._started = self._thread, self._started, None, None
        if thread is None or started is None:
            return
        self._stop.set()
        thread.join()
        waited = round(self.clock() - started, 3)
        self.io.out(json_line({"type": "progress", "phase": "first_event", "waited_s": waited}))

    def _report(self, stop: threading.Event, started: float) -> None:
        while True:
            waited = round(self.clock() - started, 3)
            self.io.out(json_line({"type": "progress", "phase": "waiting", "waited_s": waited}))
            if stop.wait(self.JSON_EVERY):
                return


def _json_string(body: str) -> str:
    """The text of a JSON string's body (escapes decoded), or the body itself if it is not one."""
    try:
        return str(json.loads(f'"{body}"'))
    except ValueError:
        return body


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
