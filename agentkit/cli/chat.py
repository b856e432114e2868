"""``agentkit chat``: the REPL. The main thread reads standard input (a thread numbers the
lines) while the agent's worker runs; a line typed during a run steers it or answers the
approval question it shows, and a line starting with ``!`` interrupts it. The conversation is
compacted to fit the model's context window (summarised; trimmed for the embedded model), and
``/compact`` compacts it on demand."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..agent import Agent, Run
from ..compaction import Compaction
from ..errors import ApprovalError, CompactionError
from ..events import CompactionEndEvent, CompactionStartEvent
from ..waits import get_item
from .approval import note_unanswered
from .console import EXIT_INTERRUPTED, Console
from .run import abort_quietly, note_budget

INTERRUPT_PREFIX = "!"
"""A line typed during a run that starts with it interrupts the run (the rest is the message)."""


def chat(agent: Agent, io: Console, after_run: Callable[[], None] | None = None) -> int:
    """The REPL: a line starts a run; lines typed while it works steer it (or answer an approval
    question shown before they were typed), and a line starting with ``!`` interrupts it (the
    request or tools going on stop and the run goes on with the rest of the line, see
    :meth:`Agent.interrupt`); Ctrl-C aborts the run, not the session; Ctrl-C when
    idle, ``/exit`` or the end of input leaves. With ``--json`` stdout carries only JSON lines
    (the banner and the prompt go to stderr). ``after_run`` is called after each run."""
    inbox: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
    io.chat = True
    if agent.compaction is None:
        local = agent.state.model.provider == "local"  # the embedded model: cheap trims
        agent.compaction = Compaction(strategy="trim" if local else "summarize")
    agent.subscribe(lambda event: _note_compaction(event, io))
    reader = threading.Thread(
        target=_read_lines, args=(io, inbox), name="agentkit-stdin", daemon=True
    )
    reader.start()
    io.note(
        "agentkit chat: type a task; lines typed while the agent works steer it, "
        "!line interrupts it; Ctrl-C aborts a run; /compact compacts the conversation; "
        "/exit quits."
    )
    run: Run | None = None
    prompt_shown = False
    while True:
        try:
            if run is None and not prompt_shown:
                io.note("> ", end="")
                prompt_shown = True
            kind, number, value = get_item(lambda timeout: inbox.get(timeout=timeout))
            if kind == "done":
                if value is run:
                    run = None
                # A run that failed raises from result(); its error was printed already.
                with contextlib.suppress(Exception):
                    result = value.result()
                    note_budget(agent, result, io)
                    if result.stop_reason == "approval":  # asked after the input ended
                        note_unanswered(io, result.pending_approvals)
                if after_run is not None:
                    after_run()
                continue
            if kind == "eof":
                io.end_input()  # a question waiting now, or asked later, is answered "no"
                if run is not None:
                    run.wait()  # let the last task finish; Ctrl-C still aborts it
                return 0
            line = str(value).strip()
            if io.answer(number, line):
                continue
            if run is None:
                prompt_shown = False
                if line in ("/exit", "/quit"):
                    return 0
                line = line.removeprefix(INTERRUPT_PREFIX).strip()
                if line == "/compact":
                    _compact(agent, io)
                elif line:
                    try:
                        run = agent.start(line)
                    except ApprovalError as exc:  # the session's calls wait for approval
                        io.err(f"agentkit: {exc}")
                        continue
                    run.add_done_callback(lambda finished: inbox.put(("done", 0, finished)))
            elif line.startswith(INTERRUPT_PREFIX) and line[1:].strip():
                agent.interrupt(line[1:].strip())
                io.err(f"agentkit: interrupting: {line[1:].strip()}")
            elif line:
                agent.steer(line)
                io.err(f"agentkit: steering: {line}")
        except KeyboardInterrupt:
            # Ask the agent, not `run`: Ctrl-C may land before start() handed the run back.
            if not agent.state.is_streaming:
                io.note("")
                return EXIT_INTERRUPTED
            abort_quietly(agent)
            io.err("agentkit: run aborted")
            run = None
            prompt_shown = False


def _compact(agent: Agent, io: Console) -> None:
    """``/compact``: compact now (Ctrl-C aborts a summary request like a run)."""
    try:
        agent.compact()
    except CompactionError:
        pass  # the listener has said why
    except KeyboardInterrupt:  # compact() aborted its summary request and waited for it
        io.err("agentkit: compaction aborted")


def _note_compaction(event: object, io: Console) -> None:
    """Say on stderr when the conversation is compacted, and how far."""
    if isinstance(event, CompactionStartEvent):
        window = f" of a {event.context_window}-token window" if event.context_window else ""
        io.err(f"agentkit: compacting the conversation ({event.tokens_before} tokens{window})")
    elif isinstance(event, CompactionEndEvent):
        record = event.compaction
        if record is None:
            io.err(f"agentkit: not compacted: {event.error}")
        else:
            io.err(
                f"agentkit: compacted ({record.strategy}): {record.tokens_before} -> "
                f"{record.tokens_after} tokens, {record.requests} request(s)"
            )


def _read_lines(io: Console, inbox: queue.SimpleQueue[tuple[str, int, Any]]) -> None:
    """The chat's stdin reader: numbers each line as it is read."""
    try:
        for line in iter(io.stdin.readline, ""):
            with io.lock:
                io.lines_read += 1
                number = io.lines_read
            inbox.put(("line", number, line.rstrip("\n")))
    finally:
        inbox.put(("eof", 0, None))
