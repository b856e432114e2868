"""The harness on the embedded model, end to end: ``agentkit run`` on a task of two steps (read a
file, then write a file from it), as a user runs it. Protocol facts only: the file it names was
read before the file it asks for was written, and the run ended well; never the wording."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from agentkit.cli import main
from tests.support import NEEDS_EMBEDDED_MODEL

pytestmark = NEEDS_EMBEDDED_MODEL


def test_a_task_of_two_steps_is_finished_on_the_embedded_model(
    embedded_server: Any, tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("Shopping list:\n- milk\n- eggs\n- coffee\n")
    out, err = io.StringIO(), io.StringIO()
    status = main(
        ["run", "Read notes.txt, then write the number of items on the list to count.txt.",
         "--workspace", str(tmp_path), "--yes", "--json", "--no-keep-server"],
        stdout=out, stderr=err,
    )  # fmt: skip
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    done = [(e["tool_name"], e["args"]) for e in events if e["type"] == "tool_execution_start"]
    assert status == 0, (err.getvalue(), done)
    calls = [
        (e["tool_name"], e["args"].get("path"))
        for e in events
        if e["type"] == "tool_execution_start" and e["tool_name"] in ("read_file", "write_file")
    ]
    assert ("read_file", "notes.txt") in calls
    assert ("write_file", "count.txt") in calls
    assert calls.index(("read_file", "notes.txt")) < calls.index(("write_file", "count.txt"))
    assert (tmp_path / "count.txt").is_file()
