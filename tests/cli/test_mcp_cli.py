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
from tests.mcp_servers.processes import auth_server  # noqa: E402
from tests.servers import MCP_SERVER, MCPHttpServer  # noqa: E402

pytestmark = pytest.mark.processes

FAULT_SERVER = str(Path(__file__).parents[1] / "mcp_servers" / "fault_server.py")


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


def _results(model: ScriptedModel) -> list[Any]:
    return [m for m in model.requests[-1].messages if m.role == "tool_result"]


def test_mcp_header_goes_to_the_url_servers(tmp_path: Path) -> None:
    server = auth_server("bearer")
    try:
        code, out, err, model = run_cli(
            ["run", "--workspace", str(tmp_path), "--mcp-url", server.url,
             "--mcp-header", "Authorization: Bearer alice-token", "who am I"],
            [reply(tool_call("whoami", {})), "you are alice"],
        )  # fmt: skip
        assert code == 0, err
        assert _results(model)[-1].content[0].text == "alice"
        code, _out, err, _model = run_cli(
            ["run", "--workspace", str(tmp_path), "--mcp-url", server.url,
             "--mcp-header", "Authorization: Bearer wrong-secret-token", "x"], ["never"],
        )  # fmt: skip
        assert code == 2 and "HTTP 401" in err and "wrong-secret-token" not in err
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--mcp-url", "http://127.0.0.1:9/mcp", "--mcp-header", "no colon secret"],
         "--mcp-header number 1 is not 'Name: value'"),
        (["--mcp-header", "Authorization: Bearer secret"], "none was given"),
    ],
)  # fmt: skip
def test_a_bad_mcp_header_is_a_clear_error_that_quotes_no_value(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    code, _out, err, _model = run_cli(["run", "--workspace", str(tmp_path), *extra, "x"], ["never"])
    assert code == 2 and says in err
    assert "secret" not in err


def test_an_mcp_command_that_dies_is_started_again(tmp_path: Path) -> None:
    command = shlex.join([sys.executable, FAULT_SERVER])
    code, out, err, model = run_cli(
        ["run", "--workspace", str(tmp_path), "--mcp", command, "go"],
        [reply(tool_call("pid", {}, id="a")), reply(tool_call("crash", {}, id="b")),
         reply(tool_call("pid", {}, id="c")), "done"],
    )  # fmt: skip
    assert code == 0, err
    first, crashed, again = _results(model)
    assert crashed.is_error and "exited" in crashed.content[0].text
    assert not again.is_error and again.content[0].text != first.content[0].text
