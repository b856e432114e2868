"""agentkit.integrations.mcp against a real MCP server (tests/mcp_servers/tool_server.py, written with the
SDK's server API), started as a subprocess over stdio and over streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import signal as signals
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from agentkit import Agent, ImageContent, ToolResultMessage  # noqa: E402
from agentkit._extras import install_command  # noqa: E402
from agentkit.integrations.mcp import MCPServer, MCPServerError  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.servers import MCP_SERVER, MCPHttpServer  # noqa: E402

pytestmark = pytest.mark.processes

WAIT = 20.0
"""Generous bound (seconds) for waits on the server; never reached when things work."""


def _connect(transport: str) -> tuple[MCPServer, MCPHttpServer | None]:
    if transport == "stdio":
        return MCPServer.stdio(sys.executable, [MCP_SERVER], name="tools").start(), None
    if transport == "stdio-legacy":  # the initialize handshake and session notifications
        client = MCPServer.stdio(sys.executable, [MCP_SERVER], name="tools", protocol="legacy")
        return client.start(), None
    process = MCPHttpServer()
    try:
        return MCPServer.http(process.url, name="tools").start(), process
    except BaseException:
        process.stop()
        raise


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest) -> Iterator[MCPServer]:
    """A started MCPServer on a fresh test server, over each transport."""
    before = set(threading.enumerate())
    client, process = _connect(request.param)
    try:
        yield client
    finally:
        client.close()
        if process is not None:
            process.stop()
    leftover = {t for t in set(threading.enumerate()) - before if t.name.startswith("agentkit")}
    assert not leftover, f"threads outlived close(): {leftover}"


def _agent(server: MCPServer, replies: list[Any]) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(replies)
    agent = Agent(model=model.model, stream_fn=model)
    server.attach(agent)
    return agent, model


def _results(messages: list[Any]) -> dict[str, ToolResultMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}


def test_tools_carry_schemas_and_results_carry_text_images_structure(server: MCPServer) -> None:
    tools = {t.name: t for t in server.tools}
    assert {"add", "image", "fail", "slow", "gather", "unlock"} <= set(tools)
    add = tools["add"]
    assert add.description == "Add two integers."
    assert add.parameters["properties"]["a"]["type"] == "integer"
    assert add.parameters["required"] == ["a", "b"]

    result = server.call_tool("add", {"a": 2, "b": 3})
    assert (result.text, result.structured_content, result.is_error) == ("5", {"result": 5}, False)

    image = server.call_tool("image", {})
    assert isinstance(image.content[0], ImageContent)
    assert image.content[0].mime_type == "image/png"

    failed = server.call_tool("fail", {"message": "no such file"})
    assert failed.is_error and "no such file" in failed.text


def test_parallel_batch_runs_the_calls_at_once(server: MCPServer) -> None:
    # gather(3) only returns once three calls are in flight on the server at the same time.
    calls = [tool_call("gather", {"n": 3}, id=f"g{i}") for i in range(3)]
    agent, _model = _agent(server, [reply(*calls), "all met"])
    with agent:
        messages = agent.prompt("meet")
    results = _results(messages)
    assert [results[f"g{i}"].content[0].text for i in range(3)] == ["met 3"] * 3
    assert not any(r.is_error for r in results.values())


ALL_TRANSPORTS = pytest.mark.parametrize("server", ["stdio", "http", "stdio-legacy"], indirect=True)


@ALL_TRANSPORTS
def test_abort_cancels_the_call_on_the_server_and_ends_it(server: MCPServer) -> None:
    agent, _model = _agent(server, [reply(tool_call("slow", {"seconds": 600}, id="s1"))])
    # The server reports progress once the call is running there; then we abort.
    agent.subscribe(lambda e: agent.abort() if e.type == "tool_execution_update" else None)
    with agent:
        run = agent.start("sleep")
        messages = run.result(timeout=WAIT)
        result = _results(messages)["s1"]
        assert result.is_error and "aborted" in result.content[0].text.lower()
        # The server saw MCP cancellation: its handler was interrupted.
        assert server.call_tool("wait_cancelled", {}).text == "1"


def _kill(server: MCPServer, process: MCPHttpServer | None) -> None:
    if process is not None:
        process.process.kill()
    else:
        os.kill(int(server.call_tool("pid", {}).text), signals.SIGKILL)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_server_killed_mid_call_gives_error_results_not_a_hang(transport: str) -> None:
    client, process = _connect(transport)
    try:
        agent, _model = _agent(
            client, [reply(tool_call("slow", {"seconds": 600}, id="s1")), "it failed"]
        )
        agent.subscribe(
            lambda e: _kill(client, process) if e.type == "tool_execution_update" else None
        )
        with agent:
            messages = agent.start("sleep").result(timeout=WAIT)
        result = _results(messages)["s1"]
        assert result.is_error
        assert "tools" in result.content[0].text  # names the server
        later = client.call_tool("add", {"a": 1, "b": 1})
        assert later.is_error and "tools" in later.text
    finally:
        client.close()
        if process is not None:
            process.stop()


@ALL_TRANSPORTS
def test_tool_list_change_during_a_run_reaches_the_next_turn(server: MCPServer) -> None:
    changed = threading.Event()
    server.on_tools_changed(
        lambda tools: changed.set() if any(t.name == "secret" for t in tools) else None
    )
    agent, model = _agent(
        server,
        [
            reply(tool_call("unlock", id="u1")),
            reply(tool_call("secret", id="s1")),
            "The secret is 42.",
        ],
    )

    def wait_for_change(event: Any) -> None:
        # The notification travels apart from the call's result: let it land before turn 2.
        if event.type == "tool_execution_end" and event.tool_name == "unlock":
            assert changed.wait(WAIT)

    agent.subscribe(wait_for_change)
    requested: list[list[str]] = []  # the executable tools of each request
    agent.prepare_request = lambda request, signal: requested.append(
        [t.name for t in request.context.tools]
    )
    with agent:
        messages = agent.prompt("unlock it")
        results = _results(messages)
        assert results["s1"].content[0].text == "the secret is 42"
        assert not results["s1"].is_error
        # The second request declared the new tool to the model.
        declared = [
            added.name
            for m in model.requests[1].messages
            if m.role == "system"
            for added in (m.tools_added or [])
        ]
        assert "secret" in declared
        assert "secret" not in requested[0] and "secret" in requested[1]
        for names in [*requested, [t.name for t in agent.state.tools]]:
            assert len(names) == len(set(names)), names  # replaced, not added twice
        assert "secret" in [t.name for t in agent.state.tools]


def test_closing_the_agent_closes_an_attached_server() -> None:
    before = set(threading.enumerate())
    client = MCPServer.stdio(f"{sys.executable} {MCP_SERVER}")
    agent, _model = _agent(client, ["hi"])
    agent.prompt("hello")
    agent.close()
    assert not client.alive
    after = client.call_tool("add", {"a": 1, "b": 2})
    assert after.is_error and after.text.endswith("is closed")
    assert {t for t in threading.enumerate() if t not in before} == set()


def test_closing_the_server_mid_call_ends_the_call() -> None:
    client = MCPServer.stdio(sys.executable, [MCP_SERVER], name="tools")
    agent, _model = _agent(client, [reply(tool_call("slow", {"seconds": 600}, id="s1")), "ok"])
    agent.subscribe(lambda e: client.close() if e.type == "tool_execution_update" else None)
    with agent:
        messages = agent.start("sleep").result(timeout=WAIT)
    result = _results(messages)["s1"]
    assert result.is_error
    assert re.search(r"'tools' (was closed during slow|is closed)", result.content[0].text)


def test_works_from_inside_a_running_event_loop() -> None:
    async def notebook_cell() -> str:
        # Plain sync calls, as in a Jupyter cell, while this thread runs an event loop.
        with MCPServer.stdio(sys.executable, [MCP_SERVER]) as client:
            return client.call_tool("add", {"a": 20, "b": 22}).text

    assert asyncio.run(notebook_cell()) == "42"


def test_a_server_that_cannot_start_raises_a_clear_error() -> None:
    before = set(threading.enumerate())
    bad = MCPServer.stdio(sys.executable, ["-c", "import sys; sys.exit(3)"], name="broken")
    with pytest.raises(MCPServerError, match="'broken' could not be started"):
        bad.start()
    assert {t for t in threading.enumerate() if t not in before} == set()
    assert bad.call_tool("add", {}).is_error


def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    before = set(threading.enumerate())
    mute = MCPServer.stdio(
        sys.executable, ["-c", "import sys; sys.stdin.read()"], name="mute", connect_timeout=1
    )
    with pytest.raises(MCPServerError, match="'mute' did not answer within 1 s"):
        mute.start()
    assert {t for t in threading.enumerate() if t not in before} == set()


def test_bad_url_is_refused() -> None:
    with pytest.raises(MCPServerError, match="http"):
        MCPServer.http("localhost:1234/mcp")


def test_without_the_sdk_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from agentkit.integrations.mcp import MCPServer, MCPServerError\n"
        "try:\n"
        "    MCPServer.stdio('python server.py')\n"
        "except MCPServerError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert install_command("mcp") in done.stdout
