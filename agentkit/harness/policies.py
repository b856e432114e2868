"""The harness's policies: the checklist shown after each tool batch, the completion check at
the final answer, the re-read after a write and the hint after a failed edit (see
:mod:`agentkit.harness`)."""

from __future__ import annotations

import ast
import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from ..abort import AbortSignal
from ..policy import (
    CallHandler,
    ModelRequest,
    PreparedCall,
    RequestHandler,
    RunPolicy,
    RunScope,
    ToolCallRun,
)
from ..types import AgentToolResult, AssistantMessage, TextContent, UserMessage, role_of
from .answers import described_call, unfixed_command, unread_files
from .edits import suggested_edit
from .steps import (
    REPEATED,
    WORKSPACE_TOOLS,
    Call,
    Step,
    TaskState,
    ToolNames,
    call_argument,
    how_to,
    text_of,
    tool_for,
    tool_names,
)

TASK_QUOTE_CHARS = 400
"""How much of the task a note quotes (a long task is cut, with "...")."""


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TASK_QUOTE_CHARS else text[: TASK_QUOTE_CHARS - 3] + "..."


class TaskChecklist(RunPolicy):
    """Shows the model the task's checklist after each tool batch while a step is left: a note
    added at the end of the request (never to the transcript) with the task, what is done and
    what is still to do, with the tool for the next step. Once no step is left, no note: the
    request asks for an answer from the results, as it does after any result.

    A small model reads the latest lines best: after a tool result it answers from that
    result, whatever else the task asked. The note puts the rest of the task there. It costs
    the note's tokens (about 30 to 80) on each request after a tool batch, and nothing on a
    run without tools.
    """

    name = "checklist"

    def __init__(self, workspace: str | Path | None = None, names: ToolNames = WORKSPACE_TOOLS):
        self.workspace = Path(workspace) if workspace is not None else None
        self.names = names

    def start(self, run: RunScope) -> None:
        TaskState.of(run, self.workspace)  # the files to change are read before anything writes

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        messages = request.context.messages
        if not messages or role_of(messages[-1]) != "tool_result":
            return call_next(request)
        note = self.note(TaskState.of(run, self.workspace), run)
        if note is None:
            return call_next(request)
        context = request.context.model_copy(
            update={"messages": [*messages, UserMessage(content=note)]}
        )
        return call_next(dataclasses.replace(request, context=context))

    def note(self, task: TaskState, run: RunScope) -> str | None:
        """The note for the next request of ``run``: ``None`` when no step is left (the
        model answers from the results, as the request after any result asks it to; a note
        that invited "another step" there made the 1.5B model read the same file again)."""
        missing = task.missing(run, self.names)
        if not missing:
            return None
        left = [step for step, _ in missing]
        tools = tool_names(run)
        lines = [f'My request: "{_quoted(task.text)}"']
        lines += [f"[x] {s.describe()}" for s in task.steps if s not in left]
        lines += [f"[ ] {s.describe()}{how_to(s, self.names, tools)}" for s in left]
        step, why = missing[0]
        if why.startswith(f"{step.target} was written before"):
            lines.append(f"Not finished yet: {why}.")
        else:
            lines.append(f"Not finished yet. Do the next step now: {step.describe()}.")
        return "\n".join(lines)


class CompletionCheck(RunPolicy):
    """Checks a final answer against the task's steps (:func:`task_steps`): a file it says to
    write that does not exist, a file it says to change that is unchanged, a command it says
    to run that never ran, a file or folder it names that no call looked at; and the answer
    itself (:mod:`agentkit.harness.answers`): a call it describes instead of making, a file
    of the workspace it cites that nothing read. When something is missing, the answer is not accepted: the model reads what is missing and the next request
    asks for a call of the tool that does the first missing step (``tool_choice``), at most
    ``max_sendbacks`` times a run (then the answer stands).

    It costs nothing when the answer is complete; otherwise one more turn (a send-back of
    about 40 tokens, and the model's call).
    """

    name = "completion"

    def __init__(
        self,
        workspace: str | Path | None = None,
        names: ToolNames = WORKSPACE_TOOLS,
        max_sendbacks: int = 2,
    ):
        if max_sendbacks < 0:
            raise ValueError(f"max_sendbacks must be 0 or more, got {max_sendbacks!r}")
        self.workspace = Path(workspace) if workspace is not None else None
        self.names = names
        self.max_sendbacks = max_sendbacks

    def start(self, run: RunScope) -> None:
        TaskState.of(run, self.workspace)  # the files to change are read before anything writes

    def at_final_answer(self, run: RunScope, message: AssistantMessage) -> list[Any] | None:
        task = TaskState.of(run, self.workspace)
        if task.sendbacks >= self.max_sendbacks:
            return None
        missing = task.missing(run, self.names)
        if not missing:
            return self._check_answer(run, task, text_of(message))
        task.sendbacks += 1
        _ask_for(run, missing[0][0], self.names)
        tools = tool_names(run)
        parts = [f"{why}{how_to(step, self.names, tools)}" for step, why in missing]
        return [
            UserMessage(
                content=f"Not done yet: {'; '.join(parts)}. Do that now with a tool call, then "
                "answer."
            )
        ]

    def _check_answer(self, run: RunScope, task: TaskState, answer: str) -> list[Any] | None:
        """A send-back for an answer that describes a call instead of making it, or cites a
        file nothing read (:mod:`agentkit.harness.answers`); ``None`` when it does neither."""
        calls = task.calls(run)
        tools = tool_names(run)
        described = described_call(answer, tools, calls)
        if described is not None:
            return self._send_back(
                run,
                task,
                described,
                f"You described a call of {described} instead of making it. Make the call "
                "now; I will show you its result.",
            )
        unfixed = unfixed_command(task, calls, self.names)
        if unfixed is not None:
            return self._send_back(
                run,
                task,
                self.names.edit if self.names.edit in tools else "required",
                f"After your change, `{unfixed}` prints exactly what it printed before it, so "
                "the change did not do what was asked. Look at what the file holds now (above), "
                f"change the line that causes the problem, run `{unfixed}` again, then answer.",
            )
        unread = unread_files(answer, task, calls, self.names)
        if not unread or self.names.read not in tools:
            return None
        return self._send_back(
            run,
            task,
            self.names.read,
            f"Your answer names {', '.join(unread[:3])}, but you have not read "
            f"{'it' if len(unread) == 1 else 'them'}. Read {unread[0]} (call "
            f"{self.names.read}), then answer my request from what it holds.",
        )

    @staticmethod
    def _send_back(run: RunScope, task: TaskState, tool: str, text: str) -> list[Any]:
        """The message that sends the model back, the next request asking for ``tool``."""
        task.sendbacks += 1
        run.state[_NEXT_CALL] = tool
        return [UserMessage(content=text)]

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        return call_next(_with_asked_call(run, request))


_NEXT_CALL = "agentkit.harness.next_call"
"""Set in ``RunScope.state`` to the tool the next request must call (``"required"``: any;
``"none"``: no call, an answer)."""


def _ask_for(run: RunScope, step: Step | None, names: ToolNames) -> None:
    """Make the next request ask for a call of the tool that does ``step`` (any tool when the
    agent lacks it, or when there is no step)."""
    tool = tool_for(step, names) if step is not None else None
    run.state[_NEXT_CALL] = tool if tool in tool_names(run) else "required"


def _with_asked_call(run: RunScope, request: ModelRequest) -> ModelRequest:
    """``request`` asking for the call :func:`_ask_for` chose, once; unchanged when none was
    chosen or the request already says what it wants (``tool_choice``)."""
    wanted = run.state.pop(_NEXT_CALL, None)
    if wanted is None or request.options.tool_choice is not None:
        return request
    choice: Any = wanted if wanted in ("required", "none") else {"name": wanted}
    return dataclasses.replace(
        request, options=request.options.model_copy(update={"tool_choice": choice})
    )


class RepeatGuard(RunPolicy):
    """Stops a model that repeats a call word for word with nothing changed since: a read, a
    listing or a search repeated with nothing written or run since, or a command repeated with
    nothing written since. A small model loops on them: the embedded 0.5B model read the same
    file twelve times instead of writing the summary it was asked for, the 1.5B model ran the
    same ``grep ... > errors.txt`` eight times instead of answering.

    A repeat of a call that succeeded does not run again: its result says that the result
    above stands, and what the task's next step is; the next request asks for that step's tool
    or, when no step is left, for an answer (``tool_choice`` ``"none"``). A repeat of a call
    that failed is refused with its failure. It costs nothing until a call repeats; then about
    40 tokens instead of the repeated result.
    """

    name = "repeats"

    def __init__(self, workspace: str | Path | None = None, names: ToolNames = WORKSPACE_TOOLS):
        self.workspace = Path(workspace) if workspace is not None else None
        self.names = names
        self._lock = threading.Lock()  # guards _answers: set on the loop thread, read on tools'
        self._answers: dict[str, str] = {}  # a repeated call's id: the result it gets instead

    def for_run(self, run: RunScope) -> RunPolicy:
        return RepeatGuard(self.workspace, self.names)

    def start(self, run: RunScope) -> None:
        TaskState.of(run, self.workspace)

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        names = self.names
        looking = (names.read, names.list, names.search)
        kinds = (*looking, names.run, names.write, names.edit)
        guarded = [c for c in calls if c.tool_call.name in kinds and c.verdict != "deny"]
        if not guarded:
            return
        task = TaskState.of(run, self.workspace)
        seen: dict[str, Call] = {}  # the calls whose result still stands, by what they asked
        writes = (names.write, names.edit)
        for made in task.calls(run):
            if made.repeated:  # not run again: it changed nothing
                continue
            if made.name == names.run:  # a command may change what a look shows
                seen = {k: v for k, v in seen.items() if v.name not in looking}
            elif made.name in writes and made.ok:  # a write changes what all else would give
                seen = {k: v for k, v in seen.items() if v.name in writes and v.ok}
            if made.name in kinds:
                seen.setdefault(_key(made.name, made.arguments), made)  # the first one says why
        for call in guarded:
            before = seen.get(_key(call.tool_call.name, call.tool_call.arguments))
            if before is not None:
                self._repeat(run, task, call, before)

    def _repeat(self, run: RunScope, task: TaskState, call: PreparedCall, before: Call) -> None:
        name = call.tool_call.name
        missing = task.missing(run, self.names)
        step = missing[0][0] if missing else None
        if not before.ok:
            call.deny(
                f"{name} was already called with these arguments and failed "
                f"({_first_line_of(before.result)}); it would fail again. Call a tool with "
                "other arguments, or answer from the results above."
            )
            if step is None and task.steps:  # the task is done: a loop on an old failure
                run.state[_NEXT_CALL] = "none"
            return
        if step is not None:
            then = f"Do the next step now: {step.describe()}{how_to(step, self.names, tool_names(run))}."
            _ask_for(run, step, self.names)
        else:  # a model that repeats itself with nothing left to do is looping: an answer
            then = "Answer my request now from the results above."
            run.state[_NEXT_CALL] = "none"
        with self._lock:
            self._answers[call.tool_call.id] = (
                f"(Not run again: this same {name} call was made before and its result, above, "
                f"still stands{_done_already(name, self.names)}.) {then}"
            )

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        with self._lock:
            answer = self._answers.pop(call.tool_call.id, None)
        if answer is None:
            return call_next(call)
        return AgentToolResult(content=answer, details={REPEATED: True})

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        return call_next(_with_asked_call(run, request))


def _done_already(tool: str, names: ToolNames) -> str:
    return "; the file already holds what it wrote" if tool in (names.write, names.edit) else ""


def _first_line_of(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else "no result"
    return line.removeprefix("The call failed: ")[:200]


def _key(name: str, arguments: Any) -> str:
    return name + json.dumps(arguments, sort_keys=True, default=str)


VERIFY_MAX_LINES = 30
"""How many lines of a file :class:`VerifyWrites` and :class:`FailureHints` show."""
VERIFY_MAX_CHARS = 1500


class VerifyWrites(RunPolicy):
    """After each successful write or edit, reads the file back (through the agent's read
    tool, so within the same bounds) and adds what it now holds to the tool's result (an
    edit: the lines around the change; at most :data:`VERIFY_MAX_LINES` lines). A ``.json``
    or ``.py`` file that does not parse any more makes the result an error that says where,
    so the model writes it again.

    It costs the shown lines' tokens on each write (none when the read tool is missing) and a
    read of the file.
    """

    name = "verify"

    def __init__(self, names: ToolNames = WORKSPACE_TOOLS):
        self.names = names

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        result = call_next(call)
        if call.tool.name not in (self.names.write, self.names.edit) or result.is_error:
            return result
        path = _argument(call, "path")
        if path is None:
            return result
        text = _read_back(run, self.names, path, call.signal)
        if text is None:
            return result
        problem = _parse_problem(path, text)
        shown = _excerpt(text, _first_line(result))
        if problem is not None:
            note = f"\nBut {path} is not valid {problem}. Write it again, correctly.\n{path} now holds:\n{shown}"
            return result.model_copy(
                update={"content": [*result.content, TextContent(text=note)], "is_error": True}
            )
        note = f"\n{path} now holds:\n{shown}"
        return result.model_copy(update={"content": [*result.content, TextContent(text=note)]})


class FailureHints(RunPolicy):
    """Turns two failures a small model repeats into something it can use. A failed edit gets
    what the file really holds (at most :data:`VERIFY_MAX_LINES` lines), so the model copies
    the text it meant to replace instead of guessing it again; a read of a folder gets the
    folder's listing instead of an error; a read of a file that does not exist gets the names
    of the files beside it (a small model guesses a name, ``docs/port.txt``, and reads it
    again and again); an edit whose new text is its old text is refused as the no-op it is.
    It costs the file's lines or the listing on such a failure, nothing
    otherwise."""

    name = "hints"

    def __init__(self, names: ToolNames = WORKSPACE_TOOLS):
        self.names = names

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        if call.tool.name not in (self.names.edit, self.names.read):
            return call_next(call)
        if call.tool.name == self.names.edit:
            refused = self._pointless_edit(run, call)
            if refused is not None:
                return refused
        try:
            result = call_next(call)
        except Exception as exc:
            better = self._instead(run, call, str(exc))
            if better is None:
                raise
            return better
        if not result.is_error:
            return result
        return self._instead(run, call, result.text) or result

    def _pointless_edit(self, run: RunScope, call: ToolCallRun) -> AgentToolResult | None:
        """A refusal, with what the file holds, of an edit that cannot do what it means: the
        same old and new text (it changes nothing), or no old text in a file that exists (a
        small model's way to append: the hint says how to)."""
        path, old, new = (_argument(call, k) for k in ("path", "old_text", "new_text"))
        if path is None or (old != new and old is not None):
            return None
        text = _read_back(run, self.names, path, call.signal)
        if text is None:
            return None
        if old == new:
            why = "old_text and new_text are the same, so the edit would change nothing. Put the corrected text in new_text."
        else:
            last = next((line for line in reversed(text.splitlines()) if line.strip()), "")
            why = (
                "old_text must not be empty. To add text at the end, put the last line in "
                f"old_text and that line followed by the new text in new_text: old_text "
                f"{json.dumps(last)}, new_text {json.dumps(last + chr(10) + (new or ''))}."
            )
        return AgentToolResult(
            content=f"{why}\n{path} holds:\n{_excerpt(text, 1)}", is_error=True
        )

    def _instead(self, run: RunScope, call: ToolCallRun, error: str) -> AgentToolResult | None:
        """What a failed read or edit of ``call`` gives instead of ``error``, if anything."""
        path = _argument(call, "path")
        if path is None:
            return None
        if call.tool.name == self.names.read:
            listing = _run_tool(run, self.names.list, {"path": path}, call.signal)
            if listing is not None:
                return AgentToolResult(
                    content=f"{path} is a folder, not a file. It holds:\n{listing}",
                    details={"path": path, "folder": True},
                )
            nearby = self._nearby(run, call, path)
            return AgentToolResult(content=f"{error}{nearby}", is_error=True) if nearby else None
        text = _run_tool(run, self.names.read, {"path": path}, call.signal)
        if text is None:
            return None
        hint = f"\n{path} holds (copy old_text from it exactly):\n{_excerpt(text, 1)}"
        old, new = _argument(call, "old_text"), _argument(call, "new_text")
        meant = suggested_edit(text, old, new or "") if old is not None else None
        if meant is not None:  # first, so that a refused repeat of this call says it again
            error = (
                f"old_text is not in {path} as written. Did you mean old_text "
                f"{json.dumps(meant[0])} and new_text {json.dumps(meant[1])}? Make that edit.\n"
                f"{error}"
            )
        return AgentToolResult(content=f"{error}{hint}", is_error=True)


    def _nearby(self, run: RunScope, call: ToolCallRun, path: str) -> str | None:
        """The files beside a path that could not be read (its folder's listing, as paths the
        read tool takes), so a model that guessed a name sees the real ones."""
        parent = path.replace("\\", "/").rstrip("/").rpartition("/")[0]
        for folder in dict.fromkeys([parent, "."]):
            listing = _run_tool(run, self.names.list, {"path": folder or "."}, call.signal)
            if listing is None:
                continue
            entries = [e for e in listing.splitlines() if e and not e.startswith("[")]
            shown = [f"{folder}/{e}" if folder not in ("", ".") else e for e in entries]
            more = f" and {len(shown) - NEARBY_ENTRIES} more" if len(shown) > NEARBY_ENTRIES else ""
            where = folder if folder not in ("", ".") else "The workspace"
            return f"\n{where} holds: {', '.join(shown[:NEARBY_ENTRIES])}{more}."
        return None


NEARBY_ENTRIES = 30
"""How many entries of a folder :class:`FailureHints` names after a read of a missing file."""


def _argument(call: ToolCallRun, name: str) -> str | None:
    value = call_argument(call, name)
    return value if isinstance(value, str) and value else None


def _read_back(run: RunScope, names: ToolNames, path: str, signal: AbortSignal) -> str | None:
    """The text of ``path`` as the agent's read tool returns it, or ``None``."""
    return _run_tool(run, names.read, {"path": path}, signal)


def _run_tool(run: RunScope, name: str, params: dict[str, Any], signal: AbortSignal) -> str | None:
    """The text of a call of the agent's tool ``name``, or ``None`` (no such tool, or the
    call failed): the harness looks through the agent's own tools, within their bounds."""
    tool = next((t for t in run.context.tools if t.name == name), None)
    if tool is None:
        return None
    try:
        result = tool.execute("agentkit-harness", params, signal, lambda _: None)
    except Exception:  # a look that fails leaves the call's own result as it was
        return None
    if not isinstance(result, AgentToolResult) or result.is_error:
        return None
    return result.text


def _first_line(result: AgentToolResult) -> int:
    details = result.details if isinstance(result.details, dict) else {}
    first = details.get("first_line")
    return first if isinstance(first, int) and first > 0 else 1


def _excerpt(text: str, around: int) -> str:
    """At most :data:`VERIFY_MAX_LINES` lines of ``text``, from a little before line
    ``around``, and at most :data:`VERIFY_MAX_CHARS` characters."""
    lines = text.splitlines()
    if len(lines) <= VERIFY_MAX_LINES:
        start = 0
    else:
        start = max(0, min(around - 1 - 3, len(lines) - VERIFY_MAX_LINES))
    shown = "\n".join(lines[start : start + VERIFY_MAX_LINES])
    if len(shown) > VERIFY_MAX_CHARS:
        shown = shown[:VERIFY_MAX_CHARS] + "..."
    if not shown.strip():
        return "(nothing: the file is empty)"
    return shown


def _parse_problem(path: str, text: str) -> str | None:
    """Why ``text`` is not valid for the file's kind (``.json``, ``.py``), or ``None``."""
    if text.rstrip().endswith("]") and "[showing lines" in text:
        return None  # only part of the file was read back: nothing to judge
    if path.endswith(".json"):
        try:
            json.loads(text)
        except ValueError as exc:
            return f"JSON ({exc})"
    elif path.endswith(".py"):
        try:
            ast.parse(text)
        except SyntaxError as exc:
            return f"Python (line {exc.lineno}: {exc.msg})"
    return None
