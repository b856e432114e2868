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
    :meth:`Agent.interrupt`); Ctrl-C aborts the run, not the session; two Ctrl-Cs in a row at
    the prompt (one may be meant for a run that has just ended), ``/exit`` or the end of input
    leave. With ``--json`` stdout carries only JSON lines
    (the banner and the prompt go to stderr). ``after_run`` is called after each run."""
    return _Chat(agent, io, after_run).session()


class _Chat:
    """One chat session, on the main thread: what comes in (typed lines, the end of input, runs
    that finished) arrives in one queue, and each kind has its step."""

    def __init__(self, agent: Agent, io: Console, after_run: Callable[[], None] | None) -> None:
        self.agent, self.io, self.after_run = agent, io, after_run
        # Filled by the stdin reader thread ("line", "eof") and by runs' done callbacks ("done").
        self.inbox: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
        self.run: Run | None = None
        self.prompt_shown = False
        self.ctrl_c_at_prompt = False  # the last thing at the prompt was a Ctrl-C: another leaves
        self.compact_after = False  # /compact came during a run: compact once it ends

    def session(self) -> int:
        """Read and act until the user leaves; the process's exit code."""
        self._set_up()
        while True:
            try:
                if self.run is None and not self.prompt_shown:
                    self.io.note("> ", end="")
                    self.prompt_shown = True
                kind, number, value = get_item(lambda timeout: self.inbox.get(timeout=timeout))
                if kind == "done":
                    self._finished(value)
                elif kind == "eof":
                    return self._end_of_input()
                elif self._line(number, str(value).strip()) == "exit":
                    return 0
            except KeyboardInterrupt:
                # Ask the agent, not self.run: Ctrl-C may land before start() handed it back.
                if not self.agent.state.is_streaming:
                    if self._ctrl_c_at_prompt():
                        return EXIT_INTERRUPTED
                    continue
                abort_quietly(self.agent)
                self.io.err("agentkit: run aborted")
                self.run = None
                self.prompt_shown = False

    def _set_up(self) -> None:
        """Compaction on (trims for the embedded model), its notes, the reader, the banner."""
        agent, io = self.agent, self.io
        io.chat = True
        if agent.compaction is None:
            local = agent.state.model.provider == "local"  # the embedded model: cheap trims
            agent.compaction = Compaction(strategy="trim" if local else "summarize")
        agent.subscribe(lambda event: _note_compaction(event, io))
        reader = threading.Thread(
            target=_read_lines, args=(io, self.inbox), name="agentkit-stdin", daemon=True
        )
        reader.start()
        io.note(
            "agentkit chat: type a task; lines typed while the agent works steer it, "
            "!line interrupts it; Ctrl-C aborts a run; /compact compacts the conversation; "
            "/exit quits."
        )

    def _finished(self, run: Run) -> None:
        """A run ended: say what stopped it short, then ``after_run``."""
        if run is self.run:
            self.run = None
        # A run that failed raises from result(); its error was printed already.
        with contextlib.suppress(Exception):
            result = run.result()
            note_budget(self.agent, result, self.io)
            if result.stop_reason == "approval":  # asked after the input ended
                note_unanswered(self.io, result.pending_approvals)
        if self.after_run is not None:
            self.after_run()
        if self.compact_after and self.run is None:
            self.compact_after = False
            _compact(self.agent, self.io)

    def _end_of_input(self) -> int:
        """The input ended: answer "no" to any question, let the last task finish, leave."""
        self.io.end_input()  # a question waiting now, or asked later, is answered "no"
        if self.run is not None:
            self.run.wait()  # let the last task finish; Ctrl-C still aborts it
        return 0

    def _ctrl_c_at_prompt(self) -> bool:
        """Ctrl-C with no run going: whether the user leaves. One Ctrl-C does not leave: it may
        have been meant for a run that ended a moment before; a second in a row does."""
        self.io.note("")
        if self.ctrl_c_at_prompt:
            return True
        self.ctrl_c_at_prompt, self.prompt_shown = True, False
        self.io.err("agentkit: (to leave, press Ctrl-C again or type /exit)")
        return False

    def _line(self, number: int, line: str) -> str | None:
        """A typed line: an answer to a question, else steering or an interrupt of the run going
        on, else a command or a task; ``"exit"`` when the user leaves."""
        self.ctrl_c_at_prompt = False
        if self.io.answer(number, line):
            return None
        if self.run is not None:
            return self._during_run(line)
        self.prompt_shown = False
        if line in EXIT_COMMANDS:
            return "exit"
        line = line.removeprefix(INTERRUPT_PREFIX).strip()
        if line == "/compact":
            _compact(self.agent, self.io)
        elif line:
            self._start(line)
        return None

    def _during_run(self, line: str) -> str | None:
        """``!text`` interrupts the run with ``text``; ``/compact`` compacts once the run ends
        and ``/exit`` leaves then (a command is never sent to the model); any other line steers
        the run."""
        if line in EXIT_COMMANDS:
            self._end_of_input()  # the run finishes (Ctrl-C aborts it), then the chat ends
            return "exit"
        if line == "/compact":
            self.compact_after = True
            self.io.err("agentkit: the conversation is compacted when this run ends")
            return None
        interruption = line[1:].strip() if line.startswith(INTERRUPT_PREFIX) else ""
        if interruption:
            self.agent.interrupt(interruption)
            self.io.err(f"agentkit: interrupting: {interruption}")
        elif line:
            self.agent.steer(line)
            self.io.err(f"agentkit: steering: {line}")
        return None

    def _start(self, task: str) -> None:
        """Start a run on ``task``; its end comes back through the inbox."""
        try:
            self.run = self.agent.start(task)
        except ApprovalError as exc:  # the session's calls wait for approval
            self.io.err(f"agentkit: {exc}")
            return
        self.run.add_done_callback(lambda finished: self.inbox.put(("done", 0, finished)))


EXIT_COMMANDS = ("/exit", "/quit")
"""The lines that end the chat."""


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
            io.line_entered()
            with io.lock:
                io.lines_read += 1
                number = io.lines_read
            inbox.put(("line", number, line.rstrip("\n")))
    finally:
        inbox.put(("eof", 0, None))
