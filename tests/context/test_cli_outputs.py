"""The command line's small model gets the tool-output limit: a read longer than a quarter of
its window is previewed, and the next request asks for a read of the kept output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentkit.testing import reply, tool_call
from tests.cli.test_cli import SMALL, run_cli, workspace  # noqa: F401 - the fixture

LOG = "\n".join(f"line {n}: request {n} served" for n in range(1, 150))  # 4,000 characters


def search_it(context: Any, options: Any) -> Any:
    preview = [m for m in context.messages if m.role == "tool_result"][-1].content[0].text
    output_id = re.search(r'kept as "(out-[0-9a-f]+)"', preview).group(1)  # type: ignore[union-attr]
    return reply(tool_call("read_output", {"id": output_id, "search": "request 121 "}))


def test_a_long_read_is_previewed_and_the_model_asked_to_read_it(workspace: Path) -> None:  # noqa: F811
    (workspace / "big.log").write_text(LOG)
    code, out, err, model = run_cli(
        ["run", "what does line 121 of big.log say?", "--workspace", str(workspace)],
        [reply(tool_call("read_file", {"path": "big.log"})), search_it, "It was served."],
        on=SMALL,
    )
    assert code == 0, err
    assert model.requests[1].options.tool_choice == {"name": "read_output"}
    found = [m for m in model.requests[2].messages if m.role == "tool_result"][-1]
    assert "121: line 121: request 121 served" in found.content[0].text


def test_a_large_window_gets_no_limit(workspace: Path) -> None:  # noqa: F811
    (workspace / "big.log").write_text(LOG)
    code, _, err, model = run_cli(
        ["run", "what does line 121 of big.log say?", "--workspace", str(workspace)],
        [reply(tool_call("read_file", {"path": "big.log"})), "It was served."],
    )
    assert code == 0, err
    read = [m for m in model.requests[1].messages if m.role == "tool_result"][-1]
    assert "line 121: request 121 served" in read.content[-1].text
