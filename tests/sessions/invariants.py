"""What every session must be, whatever happened to it: checked by the fault tests."""

from __future__ import annotations

from typing import Any

from agentkit.types import AssistantMessage, ToolCall


def assert_well_formed(messages: list[Any]) -> None:
    """Every tool call of a (non-failed) assistant message has exactly one result, right after
    that message, in call order; no result stands anywhere else."""
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool_result":
            raise AssertionError(f"a result with no call right before it: {roles(messages)}")
        if not isinstance(message, AssistantMessage) or message.stop_reason in ("error", "aborted"):
            continue
        calls = [block.id for block in message.content if isinstance(block, ToolCall)]
        results = messages[index : index + len(calls)]
        ids = [getattr(r, "tool_call_id", None) for r in results]
        assert ids == calls, f"calls {calls} answered by {ids}: {roles(messages)}"
        index += len(calls)


def roles(messages: list[Any]) -> list[str]:
    return [m.role if not isinstance(m, dict) else m["role"] for m in messages]
