"""Tool-output limits: a tool result too large for the model's window is kept whole and the
model is shown a preview, with a tool to read the rest.

A small model's window is spent by one large tool result (a log file, a web page, a database
dump): compaction acts between turns, so a single oversized result overflows the very next
request. :class:`ToolOutputLimit` caps each result's text where it is made (``wrap_tool_call``,
on the tool's thread). A result within the cap passes untouched; a larger one

- is kept whole, as a :class:`ToolOutputRecord` (an entry of role ``"tool_output"``, outside
  the roles a model reads) appended to the transcript after the batch, so it is in the
  session when there is one (durable, read back after a reload or on resume) and in the
  agent's memory otherwise;
- reaches the model as a preview: a notice (how much was cut, the output's id, how to read
  more) then the head and the tail of the text, cut at line ends;
- can be read with the retrieval tool (:attr:`ToolOutputLimit.tool`, ``read_output`` by
  default): a range of lines or of bytes, or a text search returning the matching lines with
  their numbers. Its answers keep to the same cap.

The cap is ``max_chars`` characters, or ``max_tokens`` tokens, or else ``share`` of the model's
context window (the catalog's ``Model.context_window``; the embedded model's server size), at
:data:`CHARS_PER_TOKEN` characters a token. The retrieval tool joins the run's tools at the
first cut (declared to the model as any tool change is) or at the start of a run whose
transcript holds kept outputs; list it among the agent's tools to keep the declared set fixed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import secrets
import threading
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._serialize import clean_text
from ..policy import (
    BatchHandler,
    BatchOutcome,
    CallHandler,
    ModelRequest,
    RequestHandler,
    RunPolicy,
    RunScope,
    ToolBatchRun,
    ToolCallRun,
)
from ..tools import error_result
from ..types import (
    AgentTool,
    AgentToolResult,
    AssistantMessage,
    Model,
    TextContent,
    as_model,
    now_ms,
    role_of,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "OUTPUT_ROLE",
    "ToolOutputLimit",
    "ToolOutputRecord",
    "output_records",
]

OUTPUT_ROLE = "tool_output"
"""The role of a :class:`ToolOutputRecord` in a transcript."""

CHARS_PER_TOKEN = 2
"""Characters per token when a cap is given in tokens or derived from a window. Half the 4 of
English prose: what overflows is mostly logs, code and data, whose numbers, symbols and
identifiers cost far more (Qwen2.5's tokenizer spends a token on each digit: about 1.7
characters a token on the benchmark's log, measured)."""

DEFAULT_SHARE = 0.25
"""The share of the window one result may take by default: the embedded model's 4,096-token
window leaves room for the prompt, the tools, the preview and the answer."""

MIN_CHARS = 400
"""The smallest cap: room for the notice and a few lines of the output."""

SEARCH_LINE_CHARS = 300
"""How much of one matching line a search shows (a minified file is one long line)."""


class ToolOutputRecord(BaseModel):
    """A tool result's whole text, kept when its preview was cut: ``id`` is what the model
    reads it by, ``chars`` its length and ``shown`` how many of its characters the preview
    showed (the page says "cut: chars - shown of chars")."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    role: Literal["tool_output"] = "tool_output"
    id: str
    tool_call_id: str
    tool_name: str
    text: str
    chars: int
    shown: int
    timestamp: int = Field(default_factory=now_ms)


def output_records(messages: Sequence[Any]) -> list[ToolOutputRecord]:
    """The kept outputs of a transcript (a session loads them back as dicts), in order."""
    return [as_model(ToolOutputRecord, m) for m in messages if role_of(m) == OUTPUT_ROLE]


# --- the cap ----------------------------------------------------------------------------------


def _positive(name: str, value: Any) -> None:
    """Refuse what cannot be a cap: a bool, a non-number, NaN, infinity, zero or less."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number above zero, got {value!r}")


def cap_chars(model: Model | None, max_chars: int | None, max_tokens: int | None,
              share: float) -> int:  # fmt: skip
    """The cap in characters for a result sent to ``model`` (see the module)."""
    if max_chars is not None:
        chars = max_chars
    elif max_tokens is not None:
        chars = max_tokens * CHARS_PER_TOKEN
    else:
        window = int(model.context_window) if model is not None else 0
        chars = int((window if window > 0 else 128_000) * share) * CHARS_PER_TOKEN
    return max(int(chars), MIN_CHARS)


# --- the preview ------------------------------------------------------------------------------


def _line_end(text: str, at: int, lowest: int) -> int:
    """``at`` moved back to just after a line end, if one lies between ``lowest`` and it."""
    cut = text.rfind("\n", lowest, at)
    return cut + 1 if cut >= 0 else at


def _line_start(text: str, at: int, highest: int) -> int:
    """``at`` moved on to the start of the next line, if one starts before ``highest``."""
    cut = text.find("\n", at, highest)
    return cut + 1 if cut >= 0 else at


def preview(text: str, cap: int, output_id: str, tool_name: str) -> tuple[str, int]:
    """What the model reads of ``text`` when it is longer than ``cap`` characters: a line
    saying it was cut, the head, the tail, then how to read the rest (last, where a small
    model looks first); with how many characters of ``text`` it shows."""
    lines = text.count("\n") + 1
    header = (
        f"[Output cut: {len(text):,} characters, {lines:,} lines; how to read it all is below.]"
    )
    notice = (
        f"[The output above was cut to fit the context window. The whole output is kept as "
        f'"{output_id}". To find what you need in it, call {tool_name} with id "{output_id}" '
        f"and search set to a word or number to look for (you get each line that contains "
        f"it), or with start_line and end_line for a range of lines.]"
    )
    room = max(cap - len(header) - len(notice) - 80, 0)
    head_end = _line_end(text, room * 3 // 5, room * 3 // 10)
    tail_start = len(text) - (room - head_end)
    tail_start = _line_start(text, tail_start, tail_start + (room - head_end) // 2)
    head, tail = text[:head_end], text[tail_start:]
    first = text.count("\n", 0, head_end) + 1  # the lines the gap spans, numbered from 1
    last = first + text.count("\n", head_end, tail_start - 1)
    where = f"lines {first:,} to {last:,}" if last > first else f"in line {first:,}"
    gap = f"\n[... {tail_start - head_end:,} characters cut, {where} ...]\n"
    shown = len(head) + len(tail)
    return f"{header}\n{head}{gap}{tail}\n{notice}", shown


# --- reading a kept output ------------------------------------------------------------------


def _int_arg(args: dict[str, Any], name: str, lowest: int) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if value < lowest:
        raise ValueError(f"{name} must be {lowest} or more, got {value}")
    return value


class _Kept:
    """One kept output and its lines (split at the first read)."""

    def __init__(self, record: ToolOutputRecord) -> None:
        self.record = record
        self._lines: list[str] | None = None
        self._lock = threading.Lock()  # guards _lines: two calls of a batch may read at once

    @property
    def lines(self) -> list[str]:
        with self._lock:
            if self._lines is None:
                self._lines = self.record.text.split("\n")
            return self._lines

    def read(self, args: dict[str, Any], cap: int) -> str:
        """The answer to one call of the retrieval tool (``ValueError`` for bad arguments)."""
        search = args.get("search")
        if search is not None:
            if not isinstance(search, str) or not search.strip():
                raise ValueError("search must be some text to look for")
            return self._search(search.strip(), cap)
        start_byte, end_byte = _int_arg(args, "start_byte", 0), _int_arg(args, "end_byte", 0)
        if start_byte is not None or end_byte is not None:
            return self._bytes(start_byte or 0, end_byte, cap)
        start = _int_arg(args, "start_line", 1) or 1
        return self._range(start, _int_arg(args, "end_line", 1), cap)

    def _range(self, start: int, end: int | None, cap: int) -> str:
        lines, name = self.lines, self.record.id
        if start > len(lines):
            raise ValueError(f"start_line {start} is past the end: {name} has {len(lines)} lines")
        end = len(lines) if end is None else min(end, len(lines))
        if end < start:
            raise ValueError(f"end_line {end} is before start_line {start}")
        out: list[str] = []
        used = 0
        for number in range(start, end + 1):
            line = f"{number}: {lines[number - 1]}"
            if out and used + len(line) + 1 > cap:
                return "\n".join(out) + (
                    f"\n[lines {start}-{number - 1} of {len(lines)} shown; continue with "
                    f"start_line={number}]"
                )
            out.append(line[:cap])
            used += len(line) + 1
        return "\n".join(out) + f"\n[lines {start}-{end} of {len(lines)}]"

    def _bytes(self, start: int, end: int | None, cap: int) -> str:
        data = self.record.text.encode("utf-8")
        if start >= len(data):
            raise ValueError(
                f"start_byte {start} is past the end: {self.record.id} has {len(data)} bytes"
            )
        end = len(data) if end is None else min(end, len(data))
        if end <= start:
            raise ValueError(f"end_byte {end} must be above start_byte {start}")
        end = min(end, start + cap)
        text = data[start:end].decode("utf-8", "replace")
        return f"{text}\n[bytes {start}-{end} of {len(data)}]"

    def _search(self, words: str, cap: int) -> str:
        wanted = words.casefold()
        found = [n for n, line in enumerate(self.lines, 1) if wanted in line.casefold()]
        name = self.record.id
        if not found:
            return f"No line of {name} contains {words!r} ({len(self.lines)} lines searched)."
        out = [f"{len(found)} line(s) of {name} contain {words!r}:"]
        used = len(out[0])
        for shown, number in enumerate(found):
            line = self.lines[number - 1]
            cut = "..." if len(line) > SEARCH_LINE_CHARS else ""
            entry = f"{number}: {line[:SEARCH_LINE_CHARS]}{cut}"
            if used + len(entry) + 1 > cap:
                out.append(f"[{len(found) - shown} more; search for more words to narrow]")
                break
            out.append(entry)
            used += len(entry) + 1
        return "\n".join(out)


# --- the policy -----------------------------------------------------------------------------


_READ_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "The output's id, from the cut result."},
        "search": {
            "type": "string",
            "description": "Text to look for: returns each line containing it, numbered.",
        },
        "start_line": {"type": "integer", "minimum": 1, "description": "First line (from 1)."},
        "end_line": {"type": "integer", "minimum": 1, "description": "Last line, included."},
        "start_byte": {"type": "integer", "minimum": 0, "description": "First byte (from 0)."},
        "end_byte": {"type": "integer", "minimum": 0, "description": "Byte to stop before."},
    },
    "required": ["id"],
}


def _unserved(tool_call_id: str, params: Any, signal: Any, on_update: Any) -> AgentToolResult:
    """The retrieval tool outside a run of its policy: nothing is kept to read."""
    return error_result("No output is kept here: the tool-output limit is not on in this run.")


class ToolOutputLimit(RunPolicy):
    """Caps each tool result's text (see :mod:`agentkit.context.outputs`).

    ``max_chars`` or ``max_tokens`` set the cap (one of them, above zero); without either it
    is ``share`` of the model's window. ``tool_name`` names the retrieval tool.
    ``read_after_cut``: the request after a cut asks the model to call the retrieval tool
    (a small model otherwise answers from the preview; on for the embedded model).
    """

    name = "tool-output-limit"

    def __init__(
        self,
        *,
        max_chars: int | None = None,
        max_tokens: int | None = None,
        share: float = DEFAULT_SHARE,
        tool_name: str = "read_output",
        read_after_cut: bool = False,
    ) -> None:
        if max_chars is not None and max_tokens is not None:
            raise ValueError("give max_chars or max_tokens, not both")
        for label, value in (("max_chars", max_chars), ("max_tokens", max_tokens)):
            if value is not None:
                _positive(label, value)
        _positive("share", share)
        if share > 1:
            raise ValueError(f"share must be at most 1 (the whole window), got {share!r}")
        self.max_chars, self.max_tokens, self.share = max_chars, max_tokens, float(share)
        self.read_after_cut = read_after_cut
        self.tool = AgentTool(
            name=tool_name,
            description=(
                "Read a tool output that was cut: search it for text (the matching lines, "
                "numbered), or read a range of lines or bytes."
            ),
            parameters=copy.deepcopy(_READ_PARAMETERS),
            execute=_unserved,
            execution_mode=None,
            idempotent=True,
        )
        """The retrieval tool (answered by this policy in its runs)."""
        self._kept: dict[str, _Kept] = {}
        self._new: list[ToolOutputRecord] = []
        self._lock = threading.Lock()  # guards _kept and _new: calls of a batch run at once
        self._ask = False  # the next request asks for a read (loop thread only)

    def cap(self, model: Model | None) -> int:
        """The cap in characters for results sent to ``model``."""
        return cap_chars(model, self.max_chars, self.max_tokens, self.share)

    def for_run(self, run: RunScope) -> RunPolicy:
        mine = copy.copy(self)
        mine._kept, mine._new, mine._lock, mine._ask = {}, [], threading.Lock(), False
        return mine

    def start(self, run: RunScope) -> None:
        """Know the outputs kept by earlier runs (a session's); offer the tool if there are."""
        for record in output_records(run.context.messages):
            self._kept[record.id] = _Kept(record)
        if self._kept:
            self._offer(run)

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        """Run the batch, then keep the outputs its calls cut (after the batch: its calls and
        results stay together, and a session stores the records with the results)."""
        try:
            return call_next(batch)
        finally:
            with self._lock:
                new, self._new = self._new, []
            if new:
                run.append(new)
                self._offer(run)
                self._ask = self.read_after_cut

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """With ``read_after_cut``: the request after a batch that cut a result asks for a
        call of the retrieval tool (once; not when the request already says what it wants)."""
        if self._ask and request.purpose == "turn":
            self._ask = False
            if request.options.tool_choice is None:
                choice = {"name": self.tool.name}
                options = request.options.model_copy(update={"tool_choice": choice})
                request = dataclasses.replace(request, options=options)
        return call_next(request)

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        """On the tool's thread: answer a read of a kept output, or cut a result too long."""
        cap = self.cap(run.model)
        if call.tool.name == self.tool.name:
            return self._read(call, cap)
        result = call_next(call)
        if isinstance(result, dict):  # what the loop would validate it as: no way round the cap
            result = AgentToolResult.model_validate(result)
        if not isinstance(result, AgentToolResult):
            return result  # not a result: the loop makes it an error
        texts = [b.text for b in result.content if isinstance(b, TextContent)]
        text = "\n".join(texts)
        if len(text) <= cap:
            return result
        text = clean_text(text)
        output_id = f"out-{secrets.token_hex(4)}"
        shown_text, shown = preview(text, cap, output_id, self.tool.name)
        record = ToolOutputRecord(
            id=output_id, tool_call_id=call.tool_call.id, tool_name=call.tool.name,
            text=text, chars=len(text), shown=shown,
        )  # fmt: skip
        with self._lock:
            self._kept[output_id] = _Kept(record)
            self._new.append(record)
        others = [b for b in result.content if not isinstance(b, TextContent)]
        return result.model_copy(update={"content": [TextContent(text=shown_text), *others]})

    def _read(self, call: ToolCallRun, cap: int) -> AgentToolResult:
        args = call.args if isinstance(call.args, dict) else {}
        output_id = args.get("id")
        with self._lock:
            kept = self._kept.get(output_id) if isinstance(output_id, str) else None
            known = list(self._kept)
        if kept is None:
            said = ", ".join(known[-5:]) if known else "none in this conversation"
            return error_result(f"No kept output {output_id!r}; the kept ones: {said}.")
        try:
            return AgentToolResult(content=[TextContent(text=kept.read(args, cap))])
        except ValueError as exc:
            return error_result(str(exc))

    def _offer(self, run: RunScope) -> None:
        """Add the retrieval tool to the run's tools unless one of its name is there."""
        if all(t.name != self.tool.name for t in run.context.tools):
            run.context.tools.append(self.tool)
