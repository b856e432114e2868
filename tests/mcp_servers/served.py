"""What the ``agentkit mcp serve`` tests serve (``tests.mcp_servers.served:<factory>``): agents on
a scripted model, and plain tools.

- ``research_agent``: looks a key up with its ``lookup`` tool, then answers "The answer is 42."
- ``toolbox``: ``lookup``; ``stuck`` (an agent whose one tool waits until its run is aborted);
  ``wait_aborted`` (answers once a ``stuck`` run was aborted in this process, or after 60 s).
  When ``AGENTKIT_TEST_ABORT_MARKER`` names a file, an abort is also written there (and the
  start of the wait to that name plus ``.blocked``), so a test can see it from outside.
- ``stdin_reader``: ``lookup`` and ``read_stdin`` (what the served process's stdin holds).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from agentkit import Agent, AgentTool, AgentToolResult, tool
from agentkit.abort import AbortSignal
from agentkit.integrations.mcp_server import agent_tool
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.tools import OnUpdate

aborted = threading.Event()  # a stuck run was aborted in this process


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return {"answer": "42"}.get(key, "unknown")


def research_agent() -> Agent:
    model = ScriptedModel([reply(tool_call("lookup", {"key": "answer"})), "The answer is 42."])
    return Agent(model=model.model, stream_fn=model, tools=[lookup])


def _block(
    tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: OnUpdate
) -> AgentToolResult:
    marker = os.environ.get("AGENTKIT_TEST_ABORT_MARKER")
    if marker:
        with open(marker + ".blocked", "w", encoding="utf-8") as file:
            file.write("blocked")
    on_update(AgentToolResult(content="waiting"))  # the wait has begun: an abort reaches it
    signal.wait(600)
    if signal.aborted:
        aborted.set()
        if marker:
            with open(marker, "w", encoding="utf-8") as file:
                file.write("aborted")
    return AgentToolResult(content="unblocked")


BLOCK = AgentTool(
    name="block",
    description="Wait until aborted.",
    parameters={"type": "object", "properties": {}},
    execute=_block,
)


def stuck_agent() -> Agent:
    model = ScriptedModel([reply(tool_call("block")), "never"])
    return Agent(model=model.model, stream_fn=model, tools=[BLOCK])


@tool
def wait_aborted() -> str:
    """Answer once a stuck run was aborted (or after 60 s)."""
    return "aborted" if aborted.wait(60) else "not aborted"


@tool
def read_stdin() -> str:
    """Read what standard input holds (served over stdio: end-of-file, not the client's
    messages)."""
    import sys

    return repr(sys.stdin.read())


def stdin_reader() -> list[AgentTool]:
    return [lookup, read_stdin]


def toolbox() -> list[AgentTool]:
    return [lookup, agent_tool(stuck_agent, name="stuck"), wait_aborted]
