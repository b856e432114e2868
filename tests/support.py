"""Helpers shared by the Agent and thread tests (kept out of conftest so they read as code)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agentkit import Agent, AgentTool, AgentToolResult, TextContent
from agentkit.abort import AbortSignal
from agentkit.testing import Script, ScriptedModel

WAIT = 5.0
"""Generous bound (seconds) for every wait on another thread; never reached when things work."""


class Recorder:
    """A listener that keeps every event and the thread it arrived on."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, event: Any) -> None:
        self.events.append(event)
        self.threads.append(threading.current_thread())

    def types(self) -> list[str]:
        return [e.type for e in self.events]

    def of(self, kind: str) -> list[Any]:
        return [e for e in self.events if e.type == kind]


def make_agent(replies: list[Script], **options: Any) -> tuple[Agent, ScriptedModel]:
    """An Agent on a ScriptedModel with ``replies``."""
    model = ScriptedModel(replies)
    agent = Agent(model=model.model, stream_fn=model, **options)
    return agent, model


def make_tool(
    name: str,
    run: Callable[[dict[str, Any], AbortSignal], Any] | None = None,
    *,
    parameters: dict[str, Any] | None = None,
    execution_mode: Any = None,
) -> AgentTool:
    """A tool whose ``run(params, signal)`` returns text (or a result); default: echoes params."""

    def execute(
        tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: Any
    ) -> AgentToolResult:
        value = run(params, signal) if run is not None else f"{name}: {params}"
        if isinstance(value, AgentToolResult):
            return value
        return AgentToolResult(content=[TextContent(text=str(value))])

    return AgentTool(
        name=name,
        description=f"The {name} tool.",
        parameters=parameters or {"type": "object", "properties": {}},
        execute=execute,
        execution_mode=execution_mode,
    )


def roles(messages: list[Any]) -> list[str]:
    return [m.role for m in messages]
