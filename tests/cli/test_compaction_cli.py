"""``agentkit chat`` compacts: automatically, and on ``/compact``."""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from agentkit import cli
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import role_of
from tests.support import Watched, text_of


def typed_chat(
    argv: list[str], model: ScriptedModel, out: TextIO, err: TextIO,
    typing: Callable[[TextIO], None], left: threading.Event | None = None,
) -> int:  # fmt: skip
    """``agentkit chat ARGV`` on ``model``, its standard input what ``typing(writer)`` writes
    from a thread of its own (the input ends when it returns); ``left`` is set once the chat
    has returned."""
    read_fd, write_fd = os.pipe()
    stdin, writer = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")

    def drive() -> None:
        try:
            typing(writer)
        finally:
            writer.close()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        return cli.main(["chat", *argv], stream_fn=model, model=model.model, stdin=stdin,
                        stdout=out, stderr=err)  # fmt: skip
    finally:
        if left is not None:
            left.set()  # the chat left: the typing ends the input (if it had not)
        driver.join(60)


def test_chat_compacts_on_slash_compact(tmp_path: Path) -> None:
    model = ScriptedModel(["first answer", "- the user asked for a first task", "second answer"])
    out, err = Watched("first answer"), Watched("agentkit: compacted (summarize)")

    def typing(writer: TextIO) -> None:
        writer.write("first task\n")
        writer.flush()
        assert out.seen.wait(60)
        writer.write("/compact\n")
        writer.flush()
        assert err.seen.wait(60)
        writer.write("second task\n")

    code = typed_chat(["--workspace", str(tmp_path)], model, out, err, typing)
    assert code == 0, err.getvalue()
    assert len(model.requests) == 3
    summary_request, after = model.requests[1], model.requests[2]
    assert "first task" in summary_request.messages[-1].content[0].text
    user_texts = [m.content[0].text for m in after.messages if role_of(m) == "user"]
    assert "first task" not in user_texts  # dropped from the view, summarised instead
    assert "the user asked for a first task" in user_texts[0]
    assert user_texts[-1] == "second task"
    assert "second answer" in out.getvalue()


def test_chat_turns_compaction_on() -> None:
    from agentkit import Agent
    from agentkit.cli.chat import chat
    from agentkit.cli.console import Console

    agent = Agent(stream_fn=ScriptedModel())
    console = Console(stdin=io.StringIO(""), stdout=io.StringIO(), stderr=io.StringIO())
    assert chat(agent, console) == 0
    assert agent.compaction is not None and agent.compaction.strategy == "summarize"


def gated_chat(
    tmp_path: Path, line: str, replies: list[object], until: str
) -> tuple[int, ScriptedModel, str]:
    """A chat whose first task runs a command that waits on a FIFO (``gate``): ``line`` is
    typed while it waits, then the gate opens; the input ends once ``until`` is on stderr, or
    once the chat has left by itself."""
    model = ScriptedModel([reply(tool_call("run_command", {"command": "cat gate"})), *replies])
    os.mkfifo(tmp_path / "gate")
    out, err = Watched("-> run_command"), Watched(until)

    def typing(writer: TextIO) -> None:
        writer.write("first task\n")
        writer.flush()
        assert out.seen.wait(60)  # the command waits at the gate: the run goes on
        writer.write(line + "\n")
        writer.flush()
        with open(tmp_path / "gate", "w") as gate:  # opens once the command reads it
            gate.write("open\n")
        err.seen.wait(60)  # set by ``until``, or when the chat left by itself

    argv = ["--yes", "--workspace", str(tmp_path)]
    code = typed_chat(argv, model, out, err, typing, left=err.seen)
    return code, model, err.getvalue()


def test_slash_compact_during_a_run_compacts_when_it_ends_and_never_reaches_the_model(
    tmp_path: Path,
) -> None:
    code, model, err = gated_chat(tmp_path, "/compact", ["first answer", "- a summary"],
                                  until="agentkit: compacted (summarize)")  # fmt: skip
    assert code == 0, err
    assert "compacted when this run ends" in err and "agentkit: compacted (summarize)" in err
    assert "steering" not in err
    assert len(model.requests) == 3  # the call, the answer, then the summary
    sent = [text_of(m) for r in model.requests for m in r.messages if role_of(m) == "user"]
    assert "/compact" not in sent


def test_slash_exit_during_a_run_lets_it_finish_then_leaves(tmp_path: Path) -> None:
    code, model, err = gated_chat(tmp_path, "/exit", ["first answer"], until="never said")
    assert code == 0, err
    assert "steering" not in err and len(model.requests) == 2
    sent = [text_of(m) for r in model.requests for m in r.messages if role_of(m) == "user"]
    assert "/exit" not in sent
