"""What a task asks for and what a run did of it: the steps the harness reads from a task's
text (:func:`task_steps`), and, for one run, which of them are done (:class:`TaskState`), from
the transcript's calls and the workspace's files."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..policy import RunScope
from ..types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, role_of

StepKind = Literal["look", "write", "change", "run"]


@dataclass(frozen=True)
class ToolNames:
    """Which tools the harness names in its notes and recognises in the transcript: the tool
    that reads a file, writes one, edits one, lists a folder, searches text and runs a command
    (the workspace tools' names by default). A tool the agent lacks is never suggested."""

    read: str = "read_file"
    write: str = "write_file"
    edit: str = "edit_file"
    list: str = "list_folder"
    search: str = "search_text"
    run: str = "run_command"


WORKSPACE_TOOLS = ToolNames()
"""The names of the workspace tools (:mod:`agentkit.workspace`): the harness's default."""


@dataclass(frozen=True)
class Step:
    """One thing the task asks for: ``look`` at a file or folder it names, ``write`` a new
    file, ``change`` an existing one, or ``run`` a command (``target`` is the command as the
    task words it, ``key`` the part a run must contain: its first file name, else its first
    word; empty for "run it" with nothing named before). A ``look`` with no target reads the
    file an earlier step found ("find the file that ..., then read it"). A file is told from a folder on disk
    when there is a workspace (``release/VERSION`` is a file), else by its extension."""

    kind: StepKind
    target: str
    key: str = ""
    folder: bool = False
    """The target is a folder of the workspace (looked at with a listing, not a read)."""

    def describe(self) -> str:
        """The step as the checklist words it: ``write summary.txt``."""
        if self.kind == "look" and not self.target:
            return "read the file you found"
        verb = {"look": "look at", "write": "write", "change": "change", "run": "run"}[self.kind]
        return f"{verb} {self.target}" if self.kind != "run" else f"run `{self.target}`"


# --- reading the task ---------------------------------------------------------------------------

_PATH = re.compile(r"(?<![\w/.-])(?:\.?/)?[\w-]+(?:/[\w.-]+)*(?:\.[A-Za-z]\w{0,7})?(?![\w/-])")
"""A word that may name a file or folder: ``notes.txt``, ``src/app.py``, ``logs``."""
FILE_NAME = re.compile(r"[\w-]\.[A-Za-z]\w{0,7}$")
"""How a file's name ends (an extension); a name without one is taken for a folder."""
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
_READ_IT = re.compile(
    r"^(?:please\s+|then\s+|and\s+|now\s+)*(?:read|open)\s+(?:it|that(?:\s+file)?|this\s+file|"
    r"the\s+file|them)\b",
    re.I,
)
"""A clause that reads what an earlier one found: "then read it", "open that file"."""
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
        for path in paths_in(clause):
            kind = _kind_of(path, clause, root)
            if kind is None:
                continue
            found = True
            named.append(path)
            steps = _merge(steps, Step(kind, path, folder=_is_folder(root, path)))
        if not found and _READ_IT.match(clause) and Step("look", "") not in steps:
            steps.append(Step("look", ""))  # "find the file, then read it": whatever was found
            continue
        last = named[-1] if named else None
        if not found and last and not _is_folder(root, last) and _verb(_CHANGE, clause):
            if path_exists(root, last):  # "fix the bug": the file named before
                steps = _merge(steps, Step("change", last))
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
    files = [w for w in _PATH.findall(command) if FILE_NAME.search(w)]
    key = files[0] if files else command.split()[0]
    return Step("run", command, key.lstrip("./") if files else key)


def paths_in(clause: str) -> Iterator[str]:
    """The words of ``clause`` that may name a file or folder, ``./`` dropped."""
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
    exists = path_exists(root, path)
    if exists:
        return "change" if _verb(_CHANGE, clause) and not _is_folder(root, path) else "look"
    if exists is False or root is None:
        if FILE_NAME.search(path) and _verb(_CREATE, clause):
            return "write"
    return None


def _is_folder(root: Path | None, path: str) -> bool:
    """Whether ``path`` is a folder: on disk in ``root``, else by having no extension."""
    if root is None or not path_exists(root, path):
        return not FILE_NAME.search(path)
    try:
        return (root / path).is_dir()
    except OSError:
        return False


def path_exists(root: Path | None, path: str) -> bool | None:
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
class TaskState:
    """One run's task as the harness keeps it: its text, its steps, the digests of the files
    it says to change as they were when the run started (to tell a changed file), and how
    often the model was sent back. The policies of a run share one, made by :meth:`of`."""

    text: str
    steps: list[Step]
    root: Path | None
    prompt: Any
    """The message the task was read from: the run's own calls come after it."""
    digests: dict[str, str | None] = field(default_factory=dict)
    sendbacks: int = 0

    @classmethod
    def of(cls, run: RunScope, workspace: Path | None) -> TaskState:
        """The run's task, read from its latest user message the first time a policy asks
        (its ``start``: before anything was written)."""
        task = run.state.get(_STATE_KEY)
        if isinstance(task, TaskState):
            return task
        messages = run.context.messages
        index = next(
            (i for i in range(len(messages) - 1, -1, -1) if role_of(messages[i]) == "user"), 0
        )
        prompt = messages[index] if messages else None
        text = text_of(prompt) if prompt is not None else ""
        root = workspace.resolve() if workspace is not None else None
        steps = task_steps(text, root)
        task = cls(text, steps, root, prompt)
        task.digests = {s.target: _digest(root, s.target) for s in steps if s.kind == "change"}
        run.state[_STATE_KEY] = task
        return task

    def start(self, messages: Sequence[Any]) -> int:
        """Where the run's own messages begin in ``messages`` (all of them when a compaction
        replaced the prompt)."""
        return next((i for i, m in enumerate(messages) if m is self.prompt), 0)

    def calls(self, run: RunScope) -> list[Call]:
        """The tool calls the run made so far, in order."""
        messages = run.context.messages
        return _calls(messages, self.start(messages))

    def missing(self, run: RunScope, names: ToolNames) -> list[tuple[Step, str]]:
        """The steps the run has not done yet, each with what is missing."""
        statuses = _status(self, self.calls(run), names)
        return [(s, why) for s, why in zip(self.steps, statuses, strict=True) if why]


REPEATED = "repeated"
"""The ``details`` key of the result of a call that was not run again (it repeated one)."""

_STATE_KEY = "agentkit.harness.task"
"""Where the policies of one run share its :class:`TaskState` (``RunScope.state``)."""


def _digest(root: Path | None, path: str) -> str | None:
    if root is None or not path_exists(root, path):
        return None
    try:
        return hashlib.sha256((root / path).read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class Call:
    """A tool call the run made: its tool, its arguments, whether it succeeded, and the text
    of its result."""

    name: str
    arguments: dict[str, Any]
    ok: bool
    result: str
    repeated: bool = False
    """The call was not run again (:class:`~agentkit.harness.RepeatGuard`): it changed nothing."""


def _calls(messages: Sequence[Any], start: int) -> list[Call]:
    """The tool calls made since ``start`` that have a result (a batch under way has none
    yet), each with whether its result was a success."""
    results = {
        m.tool_call_id: m for m in messages[start:] if isinstance(m, ToolResultMessage)
    }
    calls = []
    for message in messages[start:]:
        if not isinstance(message, AssistantMessage):
            continue
        for block in message.content:
            if not isinstance(block, ToolCall) or block.id not in results:
                continue
            result = results[block.id]
            arguments = block.arguments if isinstance(block.arguments, dict) else {}
            details = result.details if isinstance(result.details, dict) else {}
            repeated = details.get(REPEATED) is True
            calls.append(Call(block.name, arguments, not result.is_error, text_of(result), repeated))
    return calls


def _mentions(call: Call, target: str) -> bool:
    """Whether a call's arguments name ``target`` (a path or a command's key)."""
    bare = target.strip("/")
    for value in call.arguments.values():
        if isinstance(value, str):
            text = value.replace("\\", "/")
            if text.strip("./") == bare or bare in text:
                return True
    return False


def _status(task: TaskState, calls: list[Call], names: ToolNames) -> list[str | None]:
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
        if step.kind == "look" and not step.target:  # the file found: any read after the looks
            after = max((i for _, i in looked if i is not None), default=-1)
            seen = _first(calls, lambda c: c.ok and c.name == names.read, after + 1)
            looked.append(("the file you found", seen))
            statuses.append(None if seen is not None else "the file you found was not read")
        elif step.kind == "look":
            seen = _first(calls, lambda c, s=step: c.ok and _shows(c, s.target, s.folder, names))
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
    task: TaskState,
    calls: list[Call],
    names: ToolNames,
    looked: list[tuple[str, int | None]],
) -> tuple[str | None, int | None]:
    """What is missing of a step that writes or changes a file, and the index of the call
    that last wrote it."""
    # What wrote it: a write or an edit; a command only when none did (``grep ... > out.txt``),
    # since running a script names it without writing it.
    last = None
    for writers in ((names.write, names.edit), (names.run,)):
        indices = [
            i for i, c in enumerate(calls) if c.ok and c.name in writers and _mentions(c, step.target)
        ]
        if indices:
            last = indices[-1]
            break
    if task.root is not None:
        if step.kind == "write":
            done = bool(path_exists(task.root, step.target))
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


def _first(calls: list[Call], test: Any, start: int = 0) -> int | None:
    """The index of the first call from ``start`` on that passes ``test``."""
    return next((i for i in range(start, len(calls)) if test(calls[i])), None)


def _shows(call: Call, target: str, folder: bool, names: ToolNames) -> bool:
    """Whether a call looked at ``target``: its arguments name it, or, for a folder, its
    result shows a path inside it (a listing or search of the folder above)."""
    if folder and target.strip("/") + "/" in call.result:
        return True
    if call.name == names.search:  # a search saw the file only if it found something in it
        return target.strip("/") in call.result
    return _mentions(call, target)


def tool_for(step: Step, names: ToolNames) -> str:
    """The tool that does ``step``."""
    if step.kind == "look":
        return names.list if step.folder else names.read
    return {"write": names.write, "change": names.edit, "run": names.run}[step.kind]


def how_to(step: Step, names: ToolNames, tools: set[str]) -> str:
    """How a step is done, naming a tool the agent has: `` (call write_file)``, or nothing."""
    tool = tool_for(step, names)
    return f" (call {tool})" if tool in tools else ""


def text_of(message: Any) -> str:
    """The text of a message (its text blocks, joined)."""
    content = getattr(message, "content", "")
    if isinstance(content, str):
        return content
    return " ".join(b.text for b in content or [] if isinstance(b, TextContent))


def call_argument(call: Any, name: str) -> Any:
    """The argument ``name`` of a tool call under way (``ToolCallRun``): from its validated
    arguments (a dict or a model), else from the call as the model wrote it; ``None`` if
    absent."""
    args = call.args if isinstance(call.args, dict) else call.tool_call.arguments
    return args.get(name) if isinstance(args, dict) else getattr(call.args, name, None)


def tool_names(run: RunScope) -> set[str]:
    """The names of the run's tools."""
    return {t.name for t in run.context.tools}
