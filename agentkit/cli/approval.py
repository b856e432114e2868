"""The approval question: a write or a command waits for ``[y/N]`` on the terminal, unless
``--yes`` or ``--allow TOOL``. In chat the main thread owns standard input and hands the answer
over (:meth:`Console.answer`); in ``agentkit run`` the worker reads the terminal itself.

Every way of not answering is an answer: the end of input (Ctrl-D, a closed pipe) and Ctrl-C
say "no"; a question nobody can see (``run`` without a terminal, or with the task read from
standard input) is deferred, which ends the run at once (stop reason ``approval``) instead of
letting the model ask again and again: :func:`note_unanswered` says how to approve."""

from __future__ import annotations

import json
import select
from collections.abc import Collection, Mapping, Sequence
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
        if not can_ask(io):  # nobody could answer: the run ends waiting for approval
            io.err(f"agentkit: {visible(question).strip()} -> not asked: {nobody(io)}")
            approvals.defer(request.id)
            return
        answer = ask_user(io, visible(question), request.signal or AbortSignal())
        if answer is not None and answer.strip().lower() in ("y", "yes"):
            approvals.approve(request.id)
        else:
            reason = f"The user did not approve {request.tool_name}; do not retry it."
            approvals.reject(request.id, reason)

    approvals = Approvals(tools=tools, on_request=ask)
    return approvals


def can_ask(io: Console) -> bool:
    """Whether someone can answer a question: until the input ends (Ctrl-D, a closed pipe),
    in chat, or on a terminal whose input was not used for the task."""
    with io.lock:
        if io.input_ended:
            return False
    if io.chat:
        return True
    interactive = getattr(io.stdin, "isatty", lambda: False)()
    return bool(interactive) and not io.stdin_used


def note_unanswered(io: Console, pending: Sequence[ApprovalRequest]) -> None:
    """Say on stderr that the run stopped at approvals nobody could give, and how to give them."""
    names = sorted({request.tool_name for request in pending})
    allow = " ".join(f"--allow {name}" for name in names)
    io.err(
        f"agentkit: stopped: {', '.join(names)} needs approval and {nobody(io)}; "
        f"pass --yes to approve every write and command, or {allow} to approve "
        f"{'that tool' if len(names) == 1 else 'those tools'}"
    )


def nobody(io: Console) -> str:
    """Why nobody can answer a question."""
    if io.chat or io.input_ended:
        return "the input has ended"
    return "the task was read from standard input" if io.stdin_used else "there is no terminal"


def ask_user(io: Console, question: str, signal: AbortSignal) -> str | None:
    """Ask the user on the terminal; ``None`` when nobody can answer (no input, EOF, abort).

    Every wait here ends when the run is aborted (Ctrl-C), even while the terminal is silent.
    """
    if io.chat:  # the main thread reads lines; only one read after the question answers it
        with io.lock:
            if io.input_ended:
                return None  # the end of input answers "no"
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
    if not can_ask(io):
        return None
    io.note(question, end="")
    answer = _read_line(io.stdin, signal)
    io.line_entered()  # the answer's line break (or none: a line break is wanted anyway)
    if answer is None and not signal.aborted:
        io.end_input()  # Ctrl-D answers "no", and nobody is asked again
    return answer


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
