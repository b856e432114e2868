"""The CLI's tool-output limit (``--output-limit``) over a real MCP server whose one tool
returns a whole 1 MB log (tests/mcp_servers/log_server.py)."""

from __future__ import annotations

import io
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from agentkit import cli  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from agentkit.transcript import get_current_tools  # noqa: E402

pytestmark = pytest.mark.processes

SERVER = shlex.join([sys.executable, str(Path(__file__).parents[1] / "mcp_servers" / "log_server.py")])
QUESTION = "What error code did order 48213 fail with?"


def run(tmp_path: Path, extra: list[str], replies: list[Any], window: int) -> ScriptedModel:
    model = ScriptedModel(replies)
    sized = model.model.model_copy(update={"context_window": window})
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        ["run", "--workspace", str(tmp_path), "--yes", "--tools", "none", "--harness", "off",
         "--mcp", SERVER, *extra, QUESTION],
        stream_fn=model, model=sized, stdin=io.StringIO(""), stdout=out, stderr=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    return model


def last_result(request: Any) -> str:
    result = [m for m in request.messages if m.role == "tool_result"][-1]
    return "".join(block.text for block in result.content)


def names(request: Any) -> list[str]:
    tools = request.context.tools
    return [t.name for t in (tools if tools is not None else get_current_tools(request.messages))]


def test_a_small_window_gets_a_preview_a_read_tool_and_is_asked_to_read(tmp_path: Path) -> None:
    model = run(tmp_path, [], [
        reply(tool_call("read_log", {})),
        reply(tool_call("read_output", {"id": "?", "search": "order 48213"})),
        "Z7Q",
    ], window=4096)  # fmt: skip
    preview = last_result(model.requests[1])
    assert preview.startswith("[Output cut: 1,000,029 characters, 12,871 lines")
    assert len(preview) < 4096 and "read_output" in names(model.requests[1])
    assert model.requests[1].options.tool_choice is not None  # the read is asked for


def test_off_sends_the_whole_result(tmp_path: Path) -> None:
    model = run(tmp_path, ["--output-limit", "off"], [reply(tool_call("read_log", {})), "?"],
                window=4096)  # fmt: skip
    assert len(last_result(model.requests[1])) == 1_000_029
    assert "read_output" not in names(model.requests[1])


def test_auto_leaves_a_large_window_alone_and_on_cuts_without_asking(tmp_path: Path) -> None:
    large = run(tmp_path, [], [reply(tool_call("read_log", {})), "?"], window=200_000)
    assert len(last_result(large.requests[1])) == 1_000_029
    cut = run(tmp_path, ["--output-limit", "on"], [reply(tool_call("read_log", {})), "?"],
              window=200_000)  # fmt: skip
    preview = last_result(cut.requests[1])
    assert preview.startswith("[Output cut: 1,000,029 characters") and len(preview) < 200_000
    assert cut.requests[1].options.tool_choice is None  # a large model is not pushed to read
