"""The order a session is read in (agentkit.sessions.order), as a pure function of the stored
records: results after their calls in call order, deferred messages after their turn."""

from __future__ import annotations

from typing import Any

from agentkit.sessions.order import (
    deferral_marker,
    in_turn_order,
    read_in_turn_order,
    release_marker,
)
from agentkit.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage


def user(text: str) -> UserMessage:
    return UserMessage(content=text)


def asks(*ids: str, stop_reason: Any = "tool_use") -> AssistantMessage:
    return AssistantMessage(
        content=[ToolCall(id=i, name="t", arguments={}) for i in ids], stop_reason=stop_reason
    )


def says(text: str) -> AssistantMessage:
    return AssistantMessage(content=[TextContent(text=text)])


def result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call_id, tool_name="t")


def label(message: Any) -> str:
    if isinstance(message, ToolResultMessage):
        return f"r:{message.tool_call_id}"
    if isinstance(message, UserMessage):
        return f"u:{message.content}"
    if isinstance(message, AssistantMessage):
        return f"a:{message.text}" if message.text else "a"
    return str(message)


def order(messages: list[Any]) -> list[str]:
    return [label(m) for m in in_turn_order(messages)]


def test_a_session_written_by_one_run_is_unchanged() -> None:
    messages = [user("go"), asks("c1", "c2"), result("c1"), result("c2"), says("done")]
    assert in_turn_order(messages) == messages


def test_parallel_results_are_read_in_call_order() -> None:
    assert order([user("go"), asks("c1", "c2"), result("c2"), result("c1"), says("ok")]) == [
        "u:go", "a", "r:c1", "r:c2", "a:ok"]  # fmt: skip


def test_a_message_inside_a_batch_follows_its_results() -> None:
    stored = [asks("c1", "c2"), result("c2"), user("U"), deferral_marker(1), result("c1")]
    assert order(stored) == ["a", "r:c1", "r:c2", "u:U"]
    # Without the marker (the run crashed before its next append) the same holds.
    assert order([asks("c1", "c2"), result("c2"), user("U"), result("c1")]) == [
        "a", "r:c1", "r:c2", "u:U"]  # fmt: skip


def test_a_message_stored_while_an_answer_streamed_follows_that_turn() -> None:
    stored = [user("go"), user("U"), deferral_marker(1), asks("c1"), result("c1"), says("x")]
    assert order(stored) == ["u:go", "a", "r:c1", "u:U", "a:x"]
    assert order([user("go"), user("U"), deferral_marker(1), says("hi")]) == [
        "u:go", "a:hi", "u:U"]  # fmt: skip


def test_messages_still_waiting_are_read_last_and_pinned_by_a_release() -> None:
    stored = [user("go"), user("U"), deferral_marker(1), user("steer")]
    messages, waiting = read_in_turn_order(stored)
    assert [label(m) for m in messages] == ["u:go", "u:steer", "u:U"] and waiting
    # A later run's answer does not take them once released where they were read.
    pinned = [*stored, release_marker(), says("later")]
    assert order(pinned) == ["u:go", "u:steer", "u:U", "a:later"]
    assert read_in_turn_order(pinned)[1] is False


def test_a_failed_answer_has_no_open_calls() -> None:
    stored = [asks("c1", stop_reason="aborted"), user("again"), says("ok")]
    assert in_turn_order(stored) == stored
