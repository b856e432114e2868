"""``--mcp COMMAND`` and ``--mcp-url URL``: MCP servers whose tools join the agent's."""

from __future__ import annotations

from collections.abc import Sequence

from ..agent import Agent
from ..integrations.mcp import MCPServer


def attach_mcp_servers(
    agent: Agent, commands: Sequence[str] = (), urls: Sequence[str] = ()
) -> list[MCPServer]:
    """Start the servers given on the command line (``--mcp`` commands, ``--mcp-url`` URLs)
    and attach them to ``agent``: their tools join its tools, and they close with it.

    On a failure, the ones already started are closed and the ``MCPServerError`` is raised.
    """
    servers: list[MCPServer] = []
    try:
        for command in commands:
            servers.append(MCPServer.stdio(command).start())
        for url in urls:
            servers.append(MCPServer.http(url).start())
    except BaseException:
        for server in servers:
            server.close()
        raise
    for server in servers:
        server.attach(agent)
    return servers
