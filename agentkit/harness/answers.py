"""What a final answer claims that the run did not do: the checks :class:`CompletionCheck`
makes of the answer itself, beside the task's steps.

- A call described instead of made: with no call in the run, the answer names one of the
  agent's tools ("I will use the `search_text` function with ..."). A small model does this
  when it does not know it may call.
- A fix that changed nothing: the task says to change a file, and a command run after the
  last change prints exactly what the same command printed before the first one ("fix the
  bug, then run it": the model's edit did not fix it, yet it reports the same wrong output).
- A file cited that nothing read: the answer names a file of the workspace, not named by the
  task, whose content no call showed ("the port is in deploy.md", after a listing of the
  folder only). Its content is what the answer should have come from.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .steps import FILE_NAME, Call, TaskState, ToolNames, path_exists, paths_in

MAX_WALK_ENTRIES = 5_000
"""How many entries of the workspace a bare file name is looked up among, at most."""


def described_call(answer: str, tools: set[str], calls: list[Call]) -> str | None:
    """The tool ``answer`` names when the run made no call at all, or ``None``."""
    if calls or not answer:
        return None
    for name in sorted(tools, key=len, reverse=True):
        if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", answer):
            return name
    return None


def unread_files(answer: str, task: TaskState, calls: list[Call], names: ToolNames) -> list[str]:
    """The files of the run's workspace that ``answer`` names, the task does not, and no call
    showed the content of (a read, a write or an edit of it, a search that found a line in it,
    a command that names it), as paths in the workspace."""
    root = task.root
    if root is None or not answer:
        return []
    in_task = set(paths_in(task.text))
    unread: list[str] = []
    for word in paths_in(answer):
        if word in in_task or not FILE_NAME.search(word):
            continue
        path = _in_workspace(root, word)
        if path is None or path in unread or path in in_task:
            continue
        if not any(_showed(call, path, names) for call in calls):
            unread.append(path)
    return unread


def _in_workspace(root: Path, word: str) -> str | None:
    """``word`` as a file's path in ``root``: itself when it is one, else the one file of
    that name in the tree (``deploy.md`` for ``docs/deploy.md``), else ``None``."""
    if path_exists(root, word):
        return word if (root / word).is_file() else None
    if "/" in word:
        return None
    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        seen += len(dirs) + len(files)
        if word in files:
            found.append(str((Path(folder) / word).relative_to(root)).replace(os.sep, "/"))
        if seen > MAX_WALK_ENTRIES or len(found) > 1:
            return None
    return found[0] if len(found) == 1 else None


def _showed(call: Call, path: str, names: ToolNames) -> bool:
    if not call.ok:
        return False
    if call.name == names.search:
        return f"{path}:" in call.result
    if call.name not in (names.read, names.write, names.edit, names.run):
        return False
    return any(
        isinstance(v, str) and path in v.replace("\\", "/").removeprefix("./")
        for v in call.arguments.values()
    )


def unfixed_command(task: TaskState, calls: list[Call], names: ToolNames) -> str | None:
    """The command that printed the same after the run's changes as before them, when the
    task says to change a file; ``None`` otherwise."""
    if not any(step.kind == "change" for step in task.steps):
        return None
    writes = [i for i, c in enumerate(calls) if c.ok and c.name in (names.write, names.edit)]
    if not writes:
        return None
    before = {
        (c.arguments.get("command"), c.result)
        for c in calls[: writes[0]]
        if c.name == names.run and isinstance(c.arguments.get("command"), str)
    }
    for call in calls[writes[-1] + 1 :]:
        command = call.arguments.get("command")
        if call.name == names.run and (command, call.result) in before:
            return str(command)
    return None
