"""The approval question: a write or a command waits for ``[y/N]`` on the terminal, unless
``--yes``. In chat the main thread owns standard input and hands the answer over
(:meth:`Console.answer`); in ``agentkit run`` the worker reads the terminal itself."""

from __future__ import annotations

import json
import select
from collections.abc import Collection, Mapping
from typing import TextIO

from ..abort import AbortSignal, readable_on_abort
from ..approvals import ApprovalRequest, Approvals
from .console import Console, Question, visible


def terminal_approvals(
    io: Console, tools: Collection[str], warnings: Mapping[str, str]
) -> Approvals:
    """Approvals for ``tools`` that ask on the terminal; ``warnings`` adds a note to a tool's
    question (whether ``run_command`` is sandboxed, say)."""

    def ask(request: ApprovalRequest) -> None:
        """Put the approval question on the terminal; the answer decides the request."""
        warning = warnings.get(request.tool_name, "")
        shown = json.dumps(request.arguments, ensure_ascii=False, default=str)
        question = f"Allow {request.tool_name} {shown}?{warning} [y/N] "
        answer = ask_user(io, visible(question), request.signal or AbortSignal())
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            approvals.approve(request.id)
        else:
            reason = f"The user did not approve {request.tool_name}; do not retry it."
            approvals.reject(request.id, reason)

    approvals = Approvals(tools=tools, on_request=ask)
    return approvals


def ask_user(io: Console, question: str, signal: AbortSignal) -> str | None:
    """Ask the user on the terminal; ``None`` when nobody can answer (no input, EOF, abort).

    Every wait here ends when the run is aborted (Ctrl-C), even while the terminal is silent.
    """
    if io.chat:  # the main thread reads lines; only one read after the question answers it
        with io.lock:
            pending = Question(io.lines_read)
            io.question = pending
        remove = signal.add_callback(pending.done.set)
        try:
            io.note(question, end="")
            pending.done.wait()
            return pending.answer
        finally:
            remove()
            with io.lock:
                if io.question is pending:
                    io.question = None
    interactive = getattr(io.stdin, "isatty", lambda: False)()
    if not interactive or io.stdin_used:
        io.err(f"agentkit: {question.strip()} -> refused (no terminal; pass --yes to approve)")
        return None
    io.note(question, end="")
    return _read_line(io.stdin, signal)


def _read_line(stdin: TextIO, signal: AbortSignal) -> str | None:
    """A line from the terminal, or ``None`` at end of input or when ``signal`` aborts."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's stream)
        line = stdin.readline()
        return line if line else None
    with readable_on_abort(signal) as aborted:
        ready, _, _ = select.select([fd, aborted], [], [])
        if aborted in ready or signal.aborted:
            return None
        line = stdin.readline()
        return line if line else None
