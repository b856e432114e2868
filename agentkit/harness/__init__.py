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
- :class:`RepeatGuard` refuses a read, listing or search that repeats an earlier one word for
  word with nothing written since (a small model loops on them), and asks for the next step's
  tool instead.
- :class:`VerifyWrites` re-reads a file after each write or edit and adds what it now holds to
  the tool's result; a ``.json`` or ``.py`` file that no longer parses makes the result an
  error that says so.
- :class:`TableFacts` adds to a whole read of a ``.csv`` or ``.tsv`` file each numeric
  column's largest and smallest value (with the row's label) and sum: a small model cannot
  compare or add a table's numbers, but reads a sentence that says them.
- :class:`FailureHints` adds to a failed edit what the file really holds, so the model can copy
  the text it meant instead of guessing again, and answers a read of a folder with its
  listing.

:func:`harness_policies` makes them (the ``agentkit`` command turns them on for the embedded
model; ``--harness off`` turns them off). They work with any tools whose calls name files in
a ``path`` argument and commands in a ``command`` argument (the workspace tools do);
:class:`ToolNames` says which tool reads, writes, edits, lists and runs. What each costs is in
``docs/harness.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..policy import RunPolicy
from .policies import CompletionCheck, FailureHints, RepeatGuard, TaskChecklist, VerifyWrites
from .steps import WORKSPACE_TOOLS, Step, TaskState, ToolNames, task_steps
from .tables import TableFacts

__all__ = [
    "HARNESS_POLICIES",
    "CompletionCheck",
    "FailureHints",
    "RepeatGuard",
    "Step",
    "TableFacts",
    "TaskChecklist",
    "TaskState",
    "ToolNames",
    "VerifyWrites",
    "WORKSPACE_TOOLS",
    "harness_policies",
    "task_steps",
]

HARNESS_POLICIES: tuple[str, ...] = (
    "checklist",
    "completion",
    "repeats",
    "verify",
    "hints",
    "tables",
)
"""The harness's policies by name, in the order :func:`harness_policies` chains them."""


def harness_policies(
    workspace: str | Path | None = None,
    names: Sequence[str] = HARNESS_POLICIES,
    tools: ToolNames = WORKSPACE_TOOLS,
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
        "repeats": RepeatGuard(workspace, tools),
        "verify": VerifyWrites(tools),
        "hints": FailureHints(tools),
        "tables": TableFacts(tools),
    }
    return [made[n] for n in HARNESS_POLICIES if n in names]
