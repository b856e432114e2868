"""Bad input of every kind becomes a readable error in the transcript; the agent stays usable."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentkit import (
    AbortSignal,
    AgentTool,
    AssistantMessageEventStream,
    Context,
    Model,
    StartEvent,
    TextDeltaEvent,
    ToolResultMessage,
)
from agentkit.testing import reply, tool_call
from tests.support import make_agent, make_tool

NUMBER = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
}


def tool_results(messages: list[Any]) -> list[ToolResultMessage]:
    return [m for m in messages if isinstance(m, ToolResultMessage)]


def assert_usable(agent: Any, model: Any) -> None:
    model.add("still here")
    assert agent.prompt("are you ok?")[-1].content[0].text == "still here"
    assert agent.state.is_streaming is False


def test_tool_that_raises_becomes_an_error_result() -> None:
    def broken(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        raise ValueError("disk on fire")

    agent, model = make_agent([reply(tool_call("broken")), "sorry"], tools=[make_tool("broken", broken)])
    [result] = tool_results(agent.prompt("go"))
    assert result.is_error and result.content[0].text == "disk on fire"
    assert result.details == {}
    assert_usable(agent, model)


def test_tool_that_raises_without_a_message_names_the_exception() -> None:
    def broken(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        raise KeyError()

    agent, _ = make_agent([reply(tool_call("broken")), "sorry"], tools=[make_tool("broken", broken)])
    [result] = tool_results(agent.prompt("go"))
    assert result.content[0].text == "KeyError"


def test_tool_returning_a_non_result_is_an_error() -> None:
    def execute(*args: Any) -> Any:
        return 42

    weird = AgentTool("weird", "Returns junk.", {"type": "object"}, execute)
    agent, model = make_agent([reply(tool_call("weird")), "ok"], tools=[weird])
    [result] = tool_results(agent.prompt("go"))
    assert result.is_error
    assert result.content[0].text == "Tool weird returned int, not an AgentToolResult"
    assert_usable(agent, model)


def test_tool_that_hangs_until_aborted() -> None:
    started = threading.Event()

    def hang(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        signal.wait()
        signal.throw_if_aborted()
        return "unreachable"

    agent, model = make_agent([reply(tool_call("hang"))], tools=[make_tool("hang", hang)])
    run = agent.start("go")
    assert started.wait(5)
    agent.abort()
    [result] = tool_results(run.result(5))
    assert result.is_error and result.content[0].text == "Operation aborted"
    assert_usable(agent, model)


def test_tool_that_ignores_abort_is_given_up_on_after_the_grace_period() -> None:
    started, release = threading.Event(), threading.Event()

    def stubborn(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        release.wait(10)
        return "too late"

    agent, model = make_agent(
        [reply(tool_call("stubborn"))], tools=[make_tool("stubborn", stubborn)], tool_abort_grace=0.2
    )
    run = agent.start("go")
    assert started.wait(5)
    agent.abort()
    [result] = tool_results(run.result(5))
    release.set()
    assert result.is_error
    assert result.content[0].text == "Operation aborted: tool stubborn did not stop within 0.2 s"
    assert_usable(agent, model)


def test_unknown_tool() -> None:
    agent, model = make_agent([reply(tool_call("nope")), "ok"])
    [result] = tool_results(agent.prompt("go"))
    assert result.is_error and result.content[0].text == "Tool nope not found"
    assert_usable(agent, model)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "  - n: must have required property 'n'"),
        ({"n": "many"}, "  - n: must be integer"),
    ],
)
def test_invalid_arguments_are_reported_to_the_model(arguments: dict[str, Any], expected: str) -> None:
    ran: list[Any] = []
    counter = make_tool("count", lambda _id, p, s, _u: ran.append(p) or "ran", parameters=NUMBER)
    agent, model = make_agent([reply(tool_call("count", arguments)), "ok"], tools=[counter])
    [result] = tool_results(agent.prompt("go"))
    assert ran == []
    text = result.content[0].text
    assert text.startswith('Validation failed for tool "count":\n')
    assert expected in text.splitlines()
    assert text.endswith("Received arguments:\n" + __import__("json").dumps(arguments, indent=2))
    assert_usable(agent, model)


def test_truncated_arguments_from_a_length_stop_are_not_executed() -> None:
    ran: list[Any] = []
    counter = make_tool("count", lambda _id, p, s, _u: ran.append(p) or "ran", parameters=NUMBER)
    agent, model = make_agent(
        [reply(tool_call("count", {"n": 1}), stop_reason="length"), "re-issued"], tools=[counter]
    )
    new = agent.prompt("go")
    [result] = tool_results(new)
    assert ran == [] and result.is_error and "output token limit" in result.content[0].text
    assert new[-1].content[0].text == "re-issued"


@pytest.mark.parametrize("hook", ["before_tool_call", "after_tool_call"])
def test_tool_hooks_that_raise_become_error_results(hook: str) -> None:
    def broken_hook(ctx: Any, signal: AbortSignal) -> None:
        raise RuntimeError(f"{hook} failed")

    agent, model = make_agent(
        [reply(tool_call("echo")), "ok"], tools=[make_tool("echo")], **{hook: broken_hook}
    )
    [result] = tool_results(agent.prompt("go"))
    assert result.is_error and result.content[0].text == f"{hook} failed"
    assert_usable(agent, model)


@pytest.mark.parametrize(
    "hook", ["transform_context", "prepare_request", "finish_turn", "convert_to_llm", "get_api_key"]
)
def test_run_hooks_that_raise_fail_the_run_readably(hook: str) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError(f"{hook} exploded")

    agent, model = make_agent([], **{hook: broken})
    new = agent.prompt("go")
    assert new[-1].stop_reason == "error"
    assert new[-1].error_message == f"{hook} exploded"
    assert agent.state.error_message == f"{hook} exploded"
    setattr(agent, hook, None if hook != "convert_to_llm" else (lambda m: m))
    assert_usable(agent, model)


def test_listener_that_always_raises_never_reaches_the_caller() -> None:
    agent, model = make_agent([])

    def listener(event: Any) -> None:
        raise RuntimeError("listener is broken")

    unsubscribe = agent.subscribe(listener)
    new = agent.prompt("go")
    assert new[-1].error_message == "listener is broken"
    assert agent.state.messages[-1].stop_reason == "error"
    unsubscribe()
    assert_usable(agent, model)


def test_stream_that_ends_without_done_or_error() -> None:
    agent, model = make_agent([reply("half an answer", end_without_done=True)])
    new = agent.prompt("go")
    assert new[-1].stop_reason == "error"
    assert new[-1].error_message == "Stream ended without a done or error event"
    assert_usable(agent, model)


def test_stream_fn_that_ignores_abort_is_ended_by_the_loop() -> None:
    release = threading.Event()

    def deaf_stream_fn(model: Model, context: Context, options: Any) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()
        from agentkit import AssistantMessage, TextContent

        partial = AssistantMessage(content=[TextContent(text="so far")])
        stream.push(StartEvent(partial))
        stream.push(TextDeltaEvent(0, "so far", partial))
        return stream  # never ends, never looks at the signal

    agent, _ = make_agent([], tool_abort_grace=0.1)
    agent.stream_fn = deaf_stream_fn
    agent.subscribe(lambda e: agent.abort() if e.type == "message_update" else None)
    run = agent.start("go")
    new = run.result(5)
    release.set()
    assert new[-1].stop_reason == "aborted"
    assert new[-1].content[0].text == "so far"


def test_stream_error_event_is_recorded() -> None:
    agent, model = make_agent([reply("partial", error="upstream 500")])
    new = agent.prompt("go")
    assert new[-1].stop_reason == "error" and new[-1].error_message == "upstream 500"
    assert new[-1].content[0].text == "partial"
    assert_usable(agent, model)


def test_script_exhausted_is_an_error_message_not_a_hang() -> None:
    agent, model = make_agent([])
    new = agent.prompt("go")
    assert new[-1].error_message == "ScriptedModel: no scripted reply left"
