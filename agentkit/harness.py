"""A harness for small models: run policies that decide what the model is shown between its
steps and what is accepted as done.

A small model given "read letter.txt, then write a summary to summary.txt" reads the letter
and pastes it as its answer; asked to count the errors of a log and write the count, it writes
a number without opening the log. A larger model keeps the whole task in mind; a small one
needs the harness around it to do so. The policies here do that from two plain facts a run
has: the task's text (the files, folders and commands it names, and the verbs around them) and
the calls the transcript shows (with the workspace's files, when a workspace is given).

- :class:`TaskChecklist` keeps the task's checklist and shows it to the model after each tool
  batch: what is done, what is still to do, or, when nothing is left, the task itself to
  answer (a note added to the request only, never to the transcript).
- :class:`CompletionCheck` checks a final answer against the checklist: a file the task says
  to write that does not exist, one it says to change that is unchanged, a command it says to
  run that never ran, a file it names that nothing looked at. It sends the model back with
  what is missing, and asks for a tool call, at most ``max_sendbacks`` times a run.
- :class:`VerifyWrites` re-reads a file after each write or edit and adds what it now holds to
  the tool's result; a ``.json`` or ``.py`` file that no longer parses makes the result an
  error that says so.
- :class:`FailureHints` adds to a failed edit what the file really holds, so the model can copy
  the text it meant instead of guessing again.

:func:`harness_policies` makes them (the ``agentkit`` command turns them on for the embedded
model; ``--harness off`` turns them off). They work with any tools whose calls name files in
a ``path`` argument and commands in a ``command`` argument (the workspace tools do);
:class:`ToolNames` says which tool reads, writes, edits, lists and runs. What each costs is in
``docs/harness.md``.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .abort import AbortSignal
from .policy import CallHandler, ModelRequest, RequestHandler, RunPolicy, RunScope, ToolCallRun
from .types import (
    AgentToolResult,
    AssistantMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    role_of,
)

__all__ = [
    "HARNESS_POLICIES",
    "CompletionCheck",
    "FailureHints",
    "Step",
    "TaskChecklist",
    "ToolNames",
    "VerifyWrites",
    "harness_policies",
    "task_steps",
]

StepKind = Literal["look", "write", "change", "run"]


@dataclass(frozen=True)
class ToolNames:
    """Which tools the harness names in its notes and recognises in the transcript: the tool
    that reads a file, writes one, edits one, lists a folder and runs a command (the workspace
    tools' names by default). A tool the agent lacks is never suggested."""

    read: str = "read_file"
    write: str = "write_file"
    edit: str = "edit_file"
    list: str = "list_folder"
    run: str = "run_command"


@dataclass(frozen=True)
class Step:
    """One thing the task asks for: ``look`` at a file or folder it names, ``write`` a new
    file, ``change`` an existing one, or ``run`` a command (``target`` is the command as the
    task words it, ``key`` the part a run must contain: its first file name, else its first
    word; empty for "run it" with nothing named before)."""

    kind: StepKind
    target: str
    key: str = ""

    def describe(self) -> str:
        """The step as the checklist words it: ``write summary.txt``."""
        verb = {"look": "look at", "write": "write", "change": "change", "run": "run"}[self.kind]
        return f"{verb} {self.target}" if self.kind != "run" else f"run `{self.target}`"


# --- reading the task ---------------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w/.-])(?:\.?/)?[\w-]+(?:/[\w.-]+)*(?:\.[A-Za-z]\w{0,7})?(?![\w/-])")
"""A word that may name a file or folder: ``notes.txt``, ``src/app.py``, ``logs``."""
_FILE = re.compile(r"[\w-]\.[A-Za-z]\w{0,7}$")
_CLAUSES = re.compile(
    r"(?:(?<=[.?!;])\s+|,?\s+(?:and\s+)?then\s+|\n+|,?\s+and\s+(?=(?:run|execute|write|"
    r"create|save|copy|put|store|change|replace|rename|fix|edit|update|set|append|add|insert|"
    r"remove|delete|read|tell|show|list|search|find|count)\b))",
    re.I,
)
"""Where a task's clauses part: a sentence's end, "then", a new line, "and" before a verb."""
_CHANGE = re.compile(
    r"\b(?:change|changes|replace|rename|fix|edit|update|set|append|add(?!\s+up\b)|insert|"
    r"remove|delete|modify|correct|increase|decrease|bump|uncomment|comment\s+out)\b",
    re.I,
)
"""Verbs that change a file the task names."""
_CREATE = re.compile(
    r"\b(?:write|writes|create|save|put|store|copy|make|generate|produce|output|record|dump|"
    r"export|add|append)\b",
    re.I,
)
"""Verbs that make a file the task names."""
_RUN = re.compile(
    r"^(?:please\s+|and\s+|also\s+|now\s+)?(?:run|execute)\s+(?:the\s+command\s*:?\s*)?"
    r"(?P<command>`[^`]+`|.+?)(?=\s+and\s+|,|$)",
    re.I,
)
"""A clause that starts with "run": the command it names, up to "and" or a comma."""
_PRONOUN = re.compile(r"^(?:it|them|this|that|the\s+script|the\s+file)\b", re.I)
_ASKING = re.compile(
    r"\b(?:what|which|how|why|whether|where|when|who|should|could|would|can|may|might|does|did)\b",
    re.I,
)
"""A word that makes the verbs after it part of a question ("what should I change?")."""


def _verb(pattern: re.Pattern[str], clause: str) -> bool:
    """Whether ``clause`` asks for ``pattern``'s verb: it has one, the clause is not a
    question, and no question word comes before it."""
    found = pattern.search(clause)
    return (
        found is not None
        and not clause.rstrip().endswith("?")
        and _ASKING.search(clause[: found.start()]) is None
    )


def task_steps(task: str, workspace: str | Path | None = None) -> list[Step]:
    """The steps ``task`` asks for, in the order it names them.

    The task is cut into clauses (at a sentence's end, a semicolon, "then"). A file or folder
    a clause names that exists in ``workspace`` is to be looked at, or changed when the clause
    has a verb of change (*change, replace, rename, fix, edit, set, add...*; "add up" is not
    one); a file it names that does not exist, in a clause with a verb of making (*write,
    create, save, copy...*), is to be written. A clause that starts with *run* or *execute*
    names a command (up to "and" or a comma); "run it" runs the last file named before. With
    no ``workspace`` nothing is known to exist: only files to write and commands are found.
    Never raises; a task it cannot read gives ``[]``."""
    root = Path(workspace).resolve() if workspace is not None else None
    steps: list[Step] = []
    named: list[str] = []
    for clause in _CLAUSES.split(task):
        clause = clause.strip()
        if not clause:
            continue
        command = _command_of(clause, named)
        if command is not None and command not in steps:
            steps.append(command)
        found = False
        for path in _paths_in(clause):
            kind = _kind_of(path, clause, root)
            if kind is None:
                continue
            found = True
            named.append(path)
            steps = _merge(steps, Step(kind, path))
        if not found and named and _FILE.search(named[-1]) and _verb(_CHANGE, clause):
            if _exists(root, named[-1]):  # "fix the bug": the file named before
                steps = _merge(steps, Step("change", named[-1]))
    return steps


def _command_of(clause: str, named: list[str]) -> Step | None:
    found = _RUN.match(clause)
    if found is None:
        return None
    command = found.group("command").strip().rstrip(".?!;").strip().strip("`").strip()
    if not command:
        return None
    if _PRONOUN.match(command):
        key = named[-1] if named else ""
        return Step("run", f"{key or command}", key)
    files = [w for w in _PATH.findall(command) if _FILE.search(w)]
    key = files[0] if files else command.split()[0]
    return Step("run", command, key.lstrip("./") if files else key)


def _paths_in(clause: str) -> Iterator[str]:
    for word in _PATH.findall(clause):
        word = word.strip().rstrip(".")
        if word.startswith("./"):
            word = word[2:]
        if not word or word.lower() in _NOT_PATHS:
            continue
        yield word


_NOT_PATHS = frozenset({"e.g", "i.e", "etc", "vs"})


def _kind_of(path: str, clause: str, root: Path | None) -> StepKind | None:
    """What the clause asks of ``path``: ``None`` when it names nothing of the workspace."""
    exists = _exists(root, path)
    if exists:
        return "change" if _verb(_CHANGE, clause) and _FILE.search(path) else "look"
    if exists is False or root is None:
        if _FILE.search(path) and _verb(_CREATE, clause):
            return "write"
    return None


def _exists(root: Path | None, path: str) -> bool | None:
    """Whether ``path`` exists inside ``root`` (``None``: no workspace, or not a path)."""
    if root is None or len(path) > 255:
        return None
    try:
        target = (root / path).resolve()
        if target == root or not target.is_relative_to(root):
            return None
        return target.exists()
    except (OSError, ValueError):  # a name too long, a loop of links, a NUL byte
        return None


def _merge(steps: list[Step], step: Step) -> list[Step]:
    """``steps`` with ``step``: a file to change or write is not also one to look at."""
    for i, other in enumerate(steps):
        if other.target != step.target or other.kind == "run":
            continue
        if other.kind == "look" and step.kind in ("change", "write"):
            return [*steps[:i], step, *steps[i + 1 :]]
        return steps
    return [*steps, step]


# --- what the run did -------------------------------------------------------------------------


@dataclass
class _Task:
    """One run's task as the harness keeps it: its text, its steps, and the digests of the
    files it names as they were when the run started (to tell a changed file)."""

    text: str
    steps: list[Step]
    root: Path | None
    prompt: Any
    """The message the task was read from: the run's own calls come after it."""
    digests: dict[str, str | None] = field(default_factory=dict)
    sendbacks: int = 0

    def start(self, messages: Sequence[Any]) -> int:
        """Where the run's own messages begin in ``messages`` (all of them when a compaction
        replaced the prompt)."""
        return next((i for i, m in enumerate(messages) if m is self.prompt), 0)


_STATE_KEY = "agentkit.harness.task"
"""Where the policies of one run share its :class:`_Task` (``RunScope.state``)."""


def _task(run: RunScope, workspace: Path | None) -> _Task:
    """The run's task, read from its latest user message the first time a policy asks."""
    task = run.state.get(_STATE_KEY)
    if isinstance(task, _Task):
        return task
    messages = run.context.messages
    start = next(
        (i for i in range(len(messages) - 1, -1, -1) if role_of(messages[i]) == "user"), 0
    )
    prompt = messages[start] if messages else None
    text = _text_of(prompt) if prompt is not None else ""
    root = workspace.resolve() if workspace is not None else None
    steps = task_steps(text, root)
    task = _Task(text, steps, root, prompt)
    task.digests = {s.target: _digest(root, s.target) for s in steps if s.kind == "change"}
    run.state[_STATE_KEY] = task
    return task


def _digest(root: Path | None, path: str) -> str | None:
    if root is None or not _exists(root, path):
        return None
    try:
        return hashlib.sha256((root / path).read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class _Call:
    name: str
    arguments: dict[str, Any]
    ok: bool
    result: str


def _calls(messages: Sequence[Any], start: int) -> list[_Call]:
    """The tool calls made since ``start``, each with whether its result was a success."""
    results = {
        m.tool_call_id: m for m in messages[start:] if isinstance(m, ToolResultMessage)
    }
    calls = []
    for message in messages[start:]:
        if not isinstance(message, AssistantMessage):
            continue
        for block in message.content:
            if isinstance(block, ToolCall):
                result = results.get(block.id)
                ok = result is not None and not result.is_error
                arguments = block.arguments if isinstance(block.arguments, dict) else {}
                text = _text_of(result) if result is not None else ""
                calls.append(_Call(block.name, arguments, ok, text))
    return calls


def _mentions(call: _Call, target: str) -> bool:
    """Whether a call's arguments name ``target`` (a path or a command's key)."""
    bare = target.strip("/")
    for value in call.arguments.values():
        if isinstance(value, str):
            text = value.replace("\\", "/")
            if text.strip("./") == bare or bare in text:
                return True
    return False


def _status(task: _Task, calls: list[_Call], names: ToolNames) -> list[str | None]:
    """For each step of the task, ``None`` when the run did it, else what is missing.

    A file to write or change is judged on disk when the run has a workspace (it exists, or
    differs from what it was), else from the calls that succeeded; it must also have been
    written after the files named before it were looked at (a count written before the log
    was read is a guess), and a command after the files named before it were written (a fix
    run before it was made proves nothing)."""
    statuses: list[str | None] = []
    looked: list[tuple[str, int | None]] = []  # the looks so far: target, first call seen
    written: int | None = None  # the latest write of the changes so far
    for step in task.steps:
        if step.kind == "look":
            seen = _first(calls, lambda c, s=step: c.ok and _shows(c, s.target))
            looked.append((step.target, seen))
            statuses.append(None if seen is not None else f"nothing has looked at {step.target}")
        elif step.kind == "run":
            after = -1 if written is None else written
            ran = _first(
                calls,
                lambda c, s=step: c.name == names.run and (not s.key or _mentions(c, s.key)),
                after + 1,
            )
            if ran is not None:
                statuses.append(None)
            elif written is not None and _first(calls, lambda c: c.name == names.run) is not None:
                statuses.append(f"`{step.target}` was not run again after the change")
            else:
                statuses.append(f"`{step.target}` was not run")
        else:
            status, last = _written(step, task, calls, names, looked)
            statuses.append(status)
            if last is not None:
                written = last if written is None else max(written, last)
    return statuses


def _written(
    step: Step,
    task: _Task,
    calls: list[_Call],
    names: ToolNames,
    looked: list[tuple[str, int | None]],
) -> tuple[str | None, int | None]:
    """What is missing of a step that writes or changes a file, and the index of the call
    that last wrote it."""
    writers = (names.write, names.edit, names.run)
    indices = [
        i for i, c in enumerate(calls) if c.ok and c.name in writers and _mentions(c, step.target)
    ]
    last = indices[-1] if indices else None
    if task.root is not None:
        if step.kind == "write":
            done = bool(_exists(task.root, step.target))
        else:
            done = _digest(task.root, step.target) != task.digests.get(step.target)
    else:
        done = last is not None
    if not done:
        verb = "does not exist yet" if step.kind == "write" else "is unchanged"
        return f"{step.target} {verb}", last
    for source, seen in looked:
        if last is not None and (seen is None or seen > last):
            return (
                f"{step.target} was written before {source} was looked at: look at "
                f"{source}, then write {step.target} again from what it holds"
            ), last
    return None, last


def _first(calls: list[_Call], test: Any, start: int = 0) -> int | None:
    """The index of the first call from ``start`` on that passes ``test``."""
    return next((i for i in range(start, len(calls)) if test(calls[i])), None)


def _shows(call: _Call, target: str) -> bool:
    """Whether a call looked at ``target``: its arguments name it, or, for a folder, its
    result shows a path inside it (a listing or search of the folder above)."""
    if _mentions(call, target):
        return True
    return not _FILE.search(target) and target.strip("/") + "/" in call.result


def _missing(task: _Task, run: RunScope, names: ToolNames) -> list[tuple[Step, str]]:
    """The steps the run has not done yet, each with what is missing."""
    messages = run.context.messages
    calls = _calls(messages, task.start(messages))
    statuses = _status(task, calls, names)
    return [(s, why) for s, why in zip(task.steps, statuses, strict=True) if why is not None]


def _how(step: Step, names: ToolNames, tools: set[str]) -> str:
    """How a step is done, naming a tool the agent has."""
    tool = {
        "write": names.write,
        "change": names.edit,
        "run": names.run,
        "look": names.read if _FILE.search(step.target) else names.list,
    }[step.kind]
    return f" (call {tool})" if tool in tools else ""


def _text_of(message: Any) -> str:
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return " ".join(b.text for b in content or [] if isinstance(b, TextContent))


def _tool_names(run: RunScope) -> set[str]:
    return {t.name for t in run.context.tools}


# --- the policies -----------------------------------------------------------------------------

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

    def __init__(self, workspace: str | Path | None = None, names: ToolNames = ToolNames()):
        self.workspace = Path(workspace) if workspace is not None else None
        self.names = names

    def start(self, run: RunScope) -> None:
        _task(run, self.workspace)  # the files to change are read before anything writes

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        messages = request.context.messages
        if not messages or role_of(messages[-1]) != "tool_result":
            return call_next(request)
        task = _task(run, self.workspace)
        if not task.text.strip():
            return call_next(request)
        note = UserMessage(content=self.note(task, run))
        context = request.context.model_copy(update={"messages": [*messages, note]})
        return call_next(dataclasses.replace(request, context=context))

    def note(self, task: _Task, run: RunScope) -> str:
        """The note for the next request of ``run``."""
        missing = _missing(task, run, self.names)
        if missing:
            left = [step for step, _ in missing]
            tools = _tool_names(run)
            lines = [f'My request: "{_quoted(task.text)}"']
            lines += [f"[x] {s.describe()}" for s in task.steps if s not in left]
            lines += [f"[ ] {s.describe()}{_how(s, self.names, tools)}" for s in left]
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
        names: ToolNames = ToolNames(),
        max_sendbacks: int = 2,
    ):
        if max_sendbacks < 0:
            raise ValueError(f"max_sendbacks must be 0 or more, got {max_sendbacks!r}")
        self.workspace = Path(workspace) if workspace is not None else None
        self.names = names
        self.max_sendbacks = max_sendbacks

    def start(self, run: RunScope) -> None:
        _task(run, self.workspace)  # the files to change are read before anything writes

    def at_final_answer(self, run: RunScope, message: AssistantMessage) -> list[Any] | None:
        task = _task(run, self.workspace)
        if task.sendbacks >= self.max_sendbacks:
            return None
        missing = _missing(task, run, self.names)
        if not missing:
            return None
        task.sendbacks += 1
        run.state[_SENT_BACK] = True
        tools = _tool_names(run)
        parts = [f"{why}{_how(step, self.names, tools)}" for step, why in missing]
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

    def __init__(self, names: ToolNames = ToolNames()):
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

    def __init__(self, names: ToolNames = ToolNames()):
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


HARNESS_POLICIES: tuple[str, ...] = ("checklist", "completion", "verify", "hints")
"""The harness's policies by name, in the order :func:`harness_policies` chains them."""


def harness_policies(
    workspace: str | Path | None = None,
    names: Sequence[str] = HARNESS_POLICIES,
    tools: ToolNames = ToolNames(),
) -> list[RunPolicy]:
    """The harness's policies named in ``names`` (all by default), for an agent whose tools
    work in ``workspace`` (``None``: the harness reads only the transcript)."""
    unknown = [n for n in names if n not in HARNESS_POLICIES]
    if unknown:
        raise ValueError(
            f"unknown harness policy {', '.join(unknown)}; known: {', '.join(HARNESS_POLICIES)}"
        )
    made: dict[str, RunPolicy] = {
        "checklist": TaskChecklist(workspace, tools),
        "completion": CompletionCheck(workspace, tools),
        "verify": VerifyWrites(tools),
        "hints": FailureHints(tools),
    }
    return [made[n] for n in HARNESS_POLICIES if n in names]
