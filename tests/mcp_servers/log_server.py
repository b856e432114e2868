"""A real MCP server (stdio) with one tool that does not page: ``read_log`` returns a whole
service log of about 1 MB (14,000 lines), for the tool-output limit's tests and benchmark:
``python log_server.py [CHARS]`` (default 1,000,000).

One line, two thirds of the way in, is the fact a question can ask about (:data:`NEEDLE`:
order 48213 failed with code Z7Q); no other line names that order or that code.
"""

from __future__ import annotations

import random
import sys
from typing import Any

NEEDLE = "2026-12-03T10:17:42Z ERROR payments order 48213 failed: card declined (code Z7Q)"
QUESTION = "What error code did order 48213 fail with? The service log is in the read_log tool."
CODE = "Z7Q"


def log_text(size: int = 1_000_000, seed: int = 7) -> str:
    """A service log of about ``size`` characters with :data:`NEEDLE` two thirds of the way in;
    no other line names order 48213 or the code."""
    rng = random.Random(seed)
    levels = ["INFO"] * 12 + ["DEBUG"] * 6 + ["WARN"]
    services = ["api", "worker", "payments", "search", "auth", "mailer"]
    lines: list[str] = []
    used = 0
    while used < size:
        n = len(lines)
        order = rng.randrange(10_000, 99_999)
        if order == 48213:
            continue
        line = (
            f"2026-12-03T{9 + n // 3600 % 10:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z "
            f"{rng.choice(levels)} {rng.choice(services)} order {order} "
            f"handled in {rng.randrange(1, 900)} ms (req {rng.getrandbits(32):08x})"
        )
        lines.append(line)
        used += len(line) + 1
    lines[len(lines) * 2 // 3] = NEEDLE
    return "\n".join(lines)


def tools(size: int) -> list[Any]:
    """The server's one tool, as an agentkit tool."""
    from agentkit.types import AgentTool, AgentToolResult

    text = log_text(size)
    return [
        AgentTool(
            name="read_log",
            description="Read the service's log file (all of it).",
            parameters={"type": "object", "properties": {}},
            execute=lambda *args: AgentToolResult(content=text),
        )
    ]


if __name__ == "__main__":
    from agentkit.integrations.mcp_server import serve

    serve(tools(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000), transport="stdio")
