"""``--mcp COMMAND`` and ``--mcp-url URL``: MCP servers whose tools join the agent's.

A command's server is started again if it dies during the session (``auto_restart``);
``--mcp-header 'Name: value'`` goes on every request to the ``--mcp-url`` servers (a bearer
token, say: ``--mcp-header "Authorization: Bearer $TOKEN"``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..agent import Agent
from ..errors import CliError
from ..integrations.mcp import MCPServer


def parse_headers(lines: Sequence[str]) -> dict[str, str]:
    """``--mcp-header`` values (``Name: value``) as headers; a malformed one raises
    :class:`CliError` saying which one by its place, quoting none of it (it may hold a secret)."""
    headers: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        name, sep, value = line.partition(":")
        name = name.strip()
        if not sep or not name or any(c.isspace() for c in name):
            raise CliError(f"--mcp-header number {number} is not 'Name: value'")
        headers[name] = value.strip()
    return headers


def attach_mcp_servers(
    agent: Agent,
    commands: Sequence[str] = (),
    urls: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
) -> list[MCPServer]:
    """Start the servers given on the command line (``--mcp`` commands, started again if they
    die; ``--mcp-url`` URLs, with ``headers`` on every request) and attach them to ``agent``:
    their tools join its tools, and they close with it.

    On a failure, the ones already started are closed and the ``MCPServerError`` is raised.
    """
    servers: list[MCPServer] = []
    try:
        for command in commands:
            servers.append(MCPServer.stdio(command, auto_restart=True).start())
        for url in urls:
            servers.append(MCPServer.http(url, headers=dict(headers or {})).start())
    except BaseException:
        for server in servers:
            server.close()
        raise
    for server in servers:
        server.attach(agent)
    return servers
