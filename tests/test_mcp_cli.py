"""The CLI's ``--mcp`` and ``--mcp-url`` options, against the real MCP test server."""

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

from .servers import MCP_SERVER, MCPHttpServer  # noqa: E402


def run_cli(args: list[str], replies: list[Any]) -> tuple[int, str, str, ScriptedModel]:
    model = ScriptedModel(replies)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        args, stream_fn=model, model=model.model, stdin=io.StringIO(""), stdout=out, stderr=err
    )
    return code, out.getvalue(), err.getvalue(), model


def test_mcp_command_adds_the_servers_tools(tmp_path: Path) -> None:
    command = shlex.join([sys.executable, MCP_SERVER])
    code, out, err, model = run_cli(
        ["run", "--workspace", str(tmp_path), "--mcp", command, "add them"],
        [reply(tool_call("add", {"a": 19, "b": 23})), "19 + 23 = 42"],
    )
    assert code == 0, err
    assert "<- add ok" in out and "19 + 23 = 42" in out
    result = [m for m in model.requests[-1].messages if m.role == "tool_result"][-1]
    assert result.content[0].text == "42"


def test_mcp_url_adds_the_servers_tools(tmp_path: Path) -> None:
    server = MCPHttpServer()
    try:
        code, out, err, _model = run_cli(
            ["run", "--workspace", str(tmp_path), "--mcp-url", server.url, "add"],
            [reply(tool_call("add", {"a": 1, "b": 2})), "3"],
        )
    finally:
        server.stop()
    assert code == 0, err
    assert "<- add ok" in out


def test_a_broken_mcp_command_is_a_clear_error(tmp_path: Path) -> None:
    command = shlex.join([sys.executable, "-c", "raise SystemExit(3)"])
    code, _out, err, _model = run_cli(
        ["run", "--workspace", str(tmp_path), "--mcp", command, "x"], ["never"]
    )
    assert code == 2
    assert "agentkit: MCP server" in err and "could not be started" in err
