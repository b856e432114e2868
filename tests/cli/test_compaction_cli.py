"""``agentkit chat`` compacts: automatically, and on ``/compact``."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

from agentkit import cli
from agentkit.testing import ScriptedModel
from agentkit.types import role_of
from tests.support import Watched


def test_chat_compacts_on_slash_compact(tmp_path: Path) -> None:
    model = ScriptedModel(["first answer", "- the user asked for a first task", "second answer"])
    read_fd, write_fd = os.pipe()
    stdin, writer = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")
    out, err = Watched("first answer"), Watched("agentkit: compacted (summarize)")

    def drive() -> None:
        try:
            writer.write("first task\n")
            writer.flush()
            assert out.seen.wait(60)
            writer.write("/compact\n")
            writer.flush()
            assert err.seen.wait(60)
            writer.write("second task\n")
        finally:
            writer.close()

    driver = threading.Thread(target=drive)
    driver.start()
    try:
        code = cli.main(
            ["chat", "--workspace", str(tmp_path)], stream_fn=model, model=model.model,
            stdin=stdin, stdout=out, stderr=err,
        )  # fmt: skip
    finally:
        driver.join(60)
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
