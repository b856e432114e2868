"""A real MCP server for agentkit's tests, written with the SDK's own server API.

Run as ``python tool_server.py`` (stdio) or ``python tool_server.py http PORT`` (streamable
HTTP on 127.0.0.1:PORT, path /mcp). Its tools cover what the client must handle: structured
results, images, a barrier that only opens when calls run at the same time, a slow call that
records its cancellation, a tool that adds another and announces the new list.
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

server = MCPServer("agentkit-test-tools")
# What the tests ask about after the fact (one process per test, so module state is fine).
state = {"cancelled": 0, "in_flight": 0}
barrier_open = anyio.Event()
cancelled_event = anyio.Event()

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@server.tool()
def image() -> Image:
    """A one-pixel PNG."""
    return Image(data=PNG, format="png")


@server.tool()
def fail(message: str) -> str:
    """Always fails with ``message``."""
    raise ToolError(message)


@server.tool()
async def gather(n: int) -> str:
    """Return once ``n`` calls of this tool are running at the same time (or fail after 20 s)."""
    state["in_flight"] += 1
    if state["in_flight"] >= n:
        barrier_open.set()
    with anyio.fail_after(20):
        await barrier_open.wait()
    return f"met {n}"


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Sleep ``seconds`` (reporting progress first); a cancellation is counted."""
    await ctx.report_progress(0, 1, "started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        state["cancelled"] += 1
        cancelled_event.set()
        raise
    return "slept"


@server.tool()
async def wait_cancelled() -> int:
    """Wait (up to 20 s) until a ``slow`` call has been cancelled; return how many were."""
    with anyio.fail_after(20):
        await cancelled_event.wait()
    return state["cancelled"]


def secret() -> str:
    """The secret, once unlocked."""
    return "the secret is 42"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Add the ``secret`` tool and announce the new tool list."""
    server.add_tool(secret)
    await ctx.notify_tools_changed()
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # a 2026-era connection has no session notifications
        pass
    return "unlocked"


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
