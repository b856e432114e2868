"""The harness's policies: the checklist shown after each tool batch, the completion check at
the final answer, the re-read after a write and the hint after a failed edit (see
:mod:`agentkit.harness`)."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

from ..abort import AbortSignal
from ..policy import CallHandler, ModelRequest, RequestHandler, RunPolicy, RunScope, ToolCallRun
from ..types import AgentToolResult, AssistantMessage, TextContent, UserMessage, role_of
from .steps import WORKSPACE_TOOLS, TaskState, ToolNames, how_to, tool_names

TASK_QUOTE_CHARS = 400
"""How much of the task a note quotes (a long task is cut, with "...")."""


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TASK_QUOTE_CHARS else text[: TASK_QUOTE_CHARS - 3] + "..."


class TaskChecklist(RunPolicy):
    """Shows the model the task's checklist after each tool batch: a note added at the end of
    the request (never to the transcript) that says what is done and what is still to do, with
    the tool for the next step; when nothing is left, or the task names no step, the task
    itself, to answer from the results.

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
        task = TaskState.of(run, self.workspace)
        if not task.text.strip():
            return call_next(request)
        note = UserMessage(content=self.note(task, run))
        context = request.context.model_copy(update={"messages": [*messages, note]})
        return call_next(dataclasses.replace(request, context=context))

    def note(self, task: TaskState, run: RunScope) -> str:
        """The note for the next request of ``run``."""
        missing = task.missing(run, self.names)
        if missing:
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
        if task.steps:
            return "\n".join(
                [f"[x] {s.describe()}" for s in task.steps]
                + [
                    "If my request needs another step, make that call now; otherwise answer it "
                    "from the results above in one or two plain sentences (no JSON): "
                    f'"{_quoted(task.text)}"'
                ]
            )
        return (
            "If my request needs another step, make that call now; otherwise answer it from the "
            f'results above in one or two plain sentences (no JSON): "{_quoted(task.text)}"'
        )


class CompletionCheck(RunPolicy):
    """Checks a final answer against the task's steps (:func:`task_steps`): a file it says to
    write that does not exist, a file it says to change that is unchanged, a command it says
    to run that never ran, a file or folder it names that no call looked at. When something is
    missing, the answer is not accepted: the model reads what is missing and the next request
    asks for a tool call (``tool_choice="required"``), at most ``max_sendbacks`` times a run
    (then the answer stands).

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
            return None
        task.sendbacks += 1
        run.state[_SENT_BACK] = True
        tools = tool_names(run)
        parts = [f"{why}{how_to(step, self.names, tools)}" for step, why in missing]
        return [
            UserMessage(
                content=f"Not done yet: {'; '.join(parts)}. Do that now with a tool call, then "
                "answer."
            )
        ]

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        if not run.state.pop(_SENT_BACK, False) or request.options.tool_choice is not None:
            return call_next(request)
        options = request.options.model_copy(update={"tool_choice": "required"})
        return call_next(dataclasses.replace(request, options=options))


_SENT_BACK = "agentkit.harness.sent_back"
"""Set in ``RunScope.state`` when a send-back asks the next request for a tool call."""


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
    """Adds to a failed edit what the file really holds (at most :data:`VERIFY_MAX_LINES`
    lines), so a small model copies the text it meant to replace instead of guessing it again
    and again. It costs the file's lines on a failed edit, nothing otherwise."""

    name = "hints"

    def __init__(self, names: ToolNames = WORKSPACE_TOOLS):
        self.names = names

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        try:
            result = call_next(call)
        except Exception as exc:
            if call.tool.name != self.names.edit:
                raise
            hint = self._hint(run, call)
            if hint is None:
                raise
            return AgentToolResult(content=f"{exc}{hint}", is_error=True)
        if call.tool.name != self.names.edit or not result.is_error:
            return result
        hint = self._hint(run, call)
        if hint is None:
            return result
        return result.model_copy(update={"content": [*result.content, TextContent(text=hint)]})

    def _hint(self, run: RunScope, call: ToolCallRun) -> str | None:
        path = _argument(call, "path")
        text = _read_back(run, self.names, path, call.signal) if path else None
        if text is None:
            return None
        return f"\n{path} holds (copy old_text from it exactly):\n{_excerpt(text, 1)}"


def _argument(call: ToolCallRun, name: str) -> str | None:
    args = call.args if isinstance(call.args, dict) else call.tool_call.arguments
    value = args.get(name) if isinstance(args, dict) else getattr(call.args, name, None)
    return value if isinstance(value, str) and value else None


def _read_back(run: RunScope, names: ToolNames, path: str, signal: AbortSignal) -> str | None:
    """The text of ``path`` as the agent's read tool returns it, or ``None`` (no read tool, or
    it failed)."""
    reader = next((t for t in run.context.tools if t.name == names.read), None)
    if reader is None:
        return None
    try:
        result = reader.execute("harness-read-back", {"path": path}, signal, lambda _: None)
    except Exception:  # a read that fails leaves the result as it was
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
