"""MCPServer against a server nobody on the project wrote: the reference
``@modelcontextprotocol/server-everything`` from npm (installed by ``scripts/test`` into
``.venv/npm``), over stdio and streamable HTTP. Skipped, with the reason, where it is missing."""

from __future__ import annotations

import os
import signal as signals
import threading
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from agentkit import Agent, AgentToolResult, ToolResultMessage  # noqa: E402
from agentkit.abort import AbortController  # noqa: E402
from agentkit.integrations.mcp import MCPServer  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.mcp_servers.processes import (  # noqa: E402
    HttpServerProcess,
    everything_http,
    everything_stdio,
    npm_bin,
    npm_skip_reason,
)

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(
        npm_bin("mcp-server-everything") is None, reason=npm_skip_reason("server-everything")
    ),
]

WAIT = 60.0
"""Generous bound (seconds) for waits on the server; never reached when things work."""

LONG = "trigger-long-running-operation"


class Everything:
    """server-everything on one transport: the client, and the HTTP process if any."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.process: HttpServerProcess | None = None
        if transport == "http":
            self.process = everything_http()

    def client(self, **options: Any) -> MCPServer:
        if self.process is not None:
            return MCPServer.http(self.process.url, name="everything", **options)
        command, *args = everything_stdio()
        return MCPServer.stdio(command, args, name="everything", **options)

    def kill(self, server: MCPServer) -> None:
        if self.process is not None:
            self.process.process.kill()
            self.process.process.wait(WAIT)
        else:
            connection = server._connection
            assert connection is not None and connection.process.process is not None
            os.kill(connection.process.process.pid, signals.SIGKILL)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture(params=["stdio", "http"])
def everything(request: pytest.FixtureRequest) -> Iterator[Everything]:
    reference = Everything(request.param)
    yield reference
    reference.stop()


def test_tools_calls_and_progress(everything: Everything) -> None:
    with everything.client() as server:
        names = {t.name for t in server.tools}
        assert {"echo", "get-sum", LONG} <= names
        assert server.call_tool("echo", {"message": "hi"}).text == "Echo: hi"
        updates: list[AgentToolResult] = []
        done = server.call_tool(LONG, {"duration": 0.3, "steps": 3}, on_update=updates.append)
        assert not done.is_error and "completed" in done.text
        assert [u.details["progress"] for u in updates] == [1, 2, 3]


def test_abort_ends_a_long_call_at_once(everything: Everything) -> None:
    with everything.client() as server:
        controller = AbortController()
        started = threading.Event()

        def on_update(_update: AgentToolResult) -> None:
            started.set()
            controller.abort()

        result = server.call_tool(LONG, {"duration": 600, "steps": 600}, controller.signal, on_update)
        assert started.is_set()
        assert result.is_error and "aborted" in result.text.lower()
        assert server.call_tool("echo", {"message": "after"}).text == "Echo: after"


def test_a_dead_server_fails_calls_at_once_and_restart_brings_it_back(
    everything: Everything,
) -> None:
    with everything.client() as server:
        assert server.alive
        everything.kill(server)
        result = server.call_tool("echo", {"message": "x"})
        assert result.is_error and "'everything'" in result.text
        assert not server.alive
        if everything.process is not None:  # the hosted server comes back on its port
            port = everything.process.port
            everything.process = everything_http(port)
        server.restart()
        assert server.alive
        assert server.call_tool("echo", {"message": "back"}).text == "Echo: back"


def test_reconnecting_gives_the_agent_each_tool_once_on_the_live_server(
    everything: Everything,
) -> None:
    model = ScriptedModel([reply(tool_call("get-sum", {"a": 2, "b": 40}, id="s1")), "42"])
    agent = Agent(model=model.model, stream_fn=model)
    old = everything.client().start()
    old.attach(agent)
    count = len(agent.state.tools)
    old.close()
    everything.client().start().attach(agent)
    names = [t.name for t in agent.state.tools]
    assert len(names) == len(set(names)) == count
    with agent:
        messages = agent.prompt("add")
    result = next(m for m in messages if isinstance(m, ToolResultMessage))
    assert not result.is_error and "42" in result.content[0].text


def test_auto_restart_of_the_stdio_reference_server() -> None:
    reference = Everything("stdio")
    with reference.client(auto_restart=True) as server:
        first = server._connection
        assert first is not None
        reference.kill(server)
        assert first.ended.wait(WAIT)  # the death was noticed (and the restart begun)
        assert server.call_tool("echo", {"message": "again"}).text == "Echo: again"
        assert server.alive and server._connection is not first
