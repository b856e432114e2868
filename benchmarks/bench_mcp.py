"""MCP per-call overhead: the same function as a plain ``@tool`` and as an MCP server's tool
(stdio and streamable HTTP, the test server of tests/mcp_servers), called through
``AgentTool.execute`` as the loop calls it. Run: ``python benchmarks/bench_mcp.py``.
Numbers go to stdout (medians, and the ratio to the plain tool); nothing asserts."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from agentkit import AbortController, AgentTool, tool
from agentkit.integrations.mcp import MCPServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integrations.test_mcp import SERVER, HttpServerProcess  # noqa: E402

CALLS = 300


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def per_call_ms(agent_tool: AgentTool, calls: int = CALLS) -> float:
    """Median milliseconds of one ``execute`` call, over ``calls`` calls in batches of 10."""
    signal = AbortController().signal
    samples: list[float] = []
    for batch in range(calls // 10):
        start = time.perf_counter()
        for i in range(10):
            result: Any = agent_tool.execute(
                f"c{batch}-{i}", {"a": i, "b": 1}, signal, lambda _: None
            )
            assert not result.is_error, result
        samples.append((time.perf_counter() - start) * 100)  # ms per call
    return statistics.median(samples)


def sdk_floor_ms(server: MCPServer, calls: int = CALLS) -> float:
    """Median milliseconds of the SDK's own ``call_tool`` awaited on the server's loop thread:
    what a call costs with no thread hop, the floor under agentkit's ``execute``."""
    import asyncio

    async def batch() -> float:
        start = time.perf_counter()
        for i in range(10):
            await server._client.call_tool("add", {"a": i, "b": 1})
        return (time.perf_counter() - start) * 100

    assert server._loop is not None
    runs = [
        asyncio.run_coroutine_threadsafe(batch(), server._loop).result() for _ in range(calls // 10)
    ]
    return statistics.median(runs)


def find(tools: list[AgentTool], name: str) -> AgentTool:
    return next(t for t in tools if t.name == name)


def main() -> None:
    plain = per_call_ms(add)
    print(f"plain @tool:        {plain * 1000:8.1f} us per call")
    with MCPServer.stdio(sys.executable, [SERVER]) as server:
        per_call_ms(find(server.tools, "add"), 20)  # warm up
        stdio = per_call_ms(find(server.tools, "add"))
        floor = sdk_floor_ms(server)
    print(f"MCP stdio:          {stdio * 1000:8.1f} us per call ({stdio / plain:.0f}x plain)")
    print(f"  SDK alone (floor):{floor * 1000:8.1f} us per call (agentkit {stdio / floor:.2f}x)")
    process = HttpServerProcess()
    try:
        with MCPServer.http(process.url) as server:
            per_call_ms(find(server.tools, "add"), 20)
            http = per_call_ms(find(server.tools, "add"))
            floor = sdk_floor_ms(server)
    finally:
        process.stop()
    print(f"MCP streamable HTTP:{http * 1000:8.1f} us per call ({http / plain:.0f}x plain)")
    print(f"  SDK alone (floor):{floor * 1000:8.1f} us per call (agentkit {http / floor:.2f}x)")


if __name__ == "__main__":
    main()
