"""The CLI's tool search (``--tool-search``) over the real 200-tool catalog MCP server."""

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

CATALOG = shlex.join([sys.executable, str(Path(__file__).parents[1] / "mcp_servers" / "catalog_server.py"), "200"])


def run(tmp_path: Path, extra: list[str], replies: list[Any]) -> tuple[int, str, ScriptedModel]:
    model = ScriptedModel(replies)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        ["run", "--workspace", str(tmp_path), "--yes", "--mcp", CATALOG, *extra, "SKU-4411 stock?"],
        stream_fn=model, model=model.model, stdin=io.StringIO(""), stdout=out, stderr=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    return code, out.getvalue(), model


def names(request: Any) -> list[str]:
    tools = request.context.tools
    return [t.name for t in (tools if tools is not None else get_current_tools(request.messages))]


def test_a_large_mcp_server_is_searched_and_the_workspace_tools_stay(tmp_path: Path) -> None:
    _, out, model = run(tmp_path, [], [
        reply(tool_call("search_tools", {"query": "stock level"})),
        reply(tool_call("inventory_get_stock_level", {"sku": "SKU-4411"})),
        "37 units.",
    ])  # fmt: skip
    first, second, _ = model.requests
    assert "search_tools" in names(first) and "read_file" in names(first)
    assert "inventory_get_stock_level" not in names(first) and len(names(first)) < 20
    assert "inventory_get_stock_level" in names(second)
    result = [m for m in model.requests[-1].messages if m.role == "tool_result"][-1]
    assert "37 units" in result.content[0].text and "37 units." in out


def test_tool_search_off_declares_every_tool(tmp_path: Path) -> None:
    _, _, model = run(tmp_path, ["--tool-search", "off"], ["no"])
    assert len(names(model.requests[0])) > 200 and "search_tools" not in names(model.requests[0])
