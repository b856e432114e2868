"""The harness on the embedded model, end to end: ``agentkit run`` on a task of two steps (read a
file, then write a file from it), as a user runs it. Protocol facts only, never the wording nor
whether the small model gets the task right: the file the task names is read, each send-back is
answered by a call of the tool it asked for (the grammar holds the reply to it), and a read
repeated with nothing written since is not run again."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from agentkit.cli import main
from tests.support import NEEDS_EMBEDDED_MODEL

pytestmark = NEEDS_EMBEDDED_MODEL


def test_a_task_of_two_steps_is_held_to_its_steps_on_the_embedded_model(
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
    messages = [e["message"] for e in events if e["type"] == "message_end"]
    calls = [
        (c["name"], c["arguments"].get("path"))
        for m in messages
        if m["role"] == "assistant"
        for c in m["content"]
        if c["type"] == "tool_call"
    ]
    assert status in (0, 1), err.getvalue()  # 1: stopped for a repeated failure, said on stderr
    assert ("read_file", "notes.txt") in calls, calls
    texts = ["".join(c.get("text", "") for c in m["content"]) for m in messages]
    sent_back = [
        i for i, m in enumerate(messages) if m["role"] == "user" and texts[i].startswith("Not done")
    ]
    for i in sent_back:
        asked = re.search(r"\(call (\w+)\)", texts[i])
        answer = messages[i + 1]
        assert answer["role"] == "assistant"
        named = [c["name"] for c in answer["content"] if c["type"] == "tool_call"]
        assert asked is not None and named == [asked.group(1)], (texts[i], answer)
    # A read repeated with nothing written since is not run again: its result says so.
    results = {m["tool_call_id"]: m for m in messages if m["role"] == "tool_result"}
    looked: set[str] = set()
    for m in messages:
        for c in m["content"] if m["role"] == "assistant" else []:
            if c["type"] != "tool_call" or c["id"] not in results:
                continue
            result = results[c["id"]]
            if c["name"] in ("write_file", "edit_file", "run_command"):
                looked.clear()  # what a read shows may have changed
            if c["name"] != "read_file":
                continue
            key = json.dumps(c["arguments"], sort_keys=True)
            if key in looked and not result["is_error"]:
                assert (result.get("details") or {}).get("repeated") is True, result
            looked.add(key)
