"""The continue entry points, the stream wrappers and the default stream function
(SPEC 2.6, 4.1, B52-B57; API.md: the stream wrappers re-raise)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from agentkit import (
    Agent,
    AgentContext,
    AssistantMessage,
    CannotContinueError,
    NoStreamFunctionError,
    agent_loop,
    agent_loop_continue,
    get_default_stream_fn,
    run_agent_loop,
    run_agent_loop_continue,
    set_default_stream_fn,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import Recorder, make_config, make_tool, roles, text_of, user


@dataclass
class Reminder:
    """An application's own message that its converter turns into a user message."""

    text: str
    role: str = "reminder"


def _collect(stream: Any) -> Recorder:
    rec = Recorder()
    for event in stream:
        rec(event)
    return rec


def test_b52_continue_on_empty_context_raises_at_once() -> None:
    model = ScriptedModel(["never"])
    with pytest.raises(CannotContinueError) as raised:
        agent_loop_continue(AgentContext(), make_config(model), stream_fn=model)
    assert str(raised.value) == "Cannot continue: no messages in context"

    rec = Recorder()
    with pytest.raises(CannotContinueError, match="^Cannot continue: no messages in context$"):
        run_agent_loop_continue(AgentContext(), make_config(model), rec, stream_fn=model)
    assert rec.events == []
    assert model.requests == []


def test_b53_continue_from_assistant_tail_raises_at_once() -> None:
    model = ScriptedModel(["never"])
    context = AgentContext(messages=[user("hi"), AssistantMessage(content=[])])
    with pytest.raises(CannotContinueError) as raised:
        agent_loop_continue(context, make_config(model), stream_fn=model)
    assert str(raised.value) == "Cannot continue from message role: assistant"

    rec = Recorder()
    with pytest.raises(CannotContinueError, match="^Cannot continue from message role: assistant$"):
        run_agent_loop_continue(context, make_config(model), rec, stream_fn=model)
    assert rec.events == []
    assert model.requests == []
    assert len(context.messages) == 2


def test_b54_continue_from_user_tail_emits_nothing_for_existing_messages() -> None:
    model = ScriptedModel(["the answer"])
    existing = user("question")
    stream = agent_loop_continue(
        AgentContext(messages=[existing]), make_config(model), stream_fn=model
    )
    rec = _collect(stream)
    result = stream.result()

    assert rec.labels() == [
        "agent_start",
        "turn_start",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    assert roles(result) == ["assistant"]
    assert text_of(result[0]) == "the answer"
    assert [e.message for e in rec.of("message_end")] == [result[0]]
    assert all(e.message is not existing for e in rec.of("message_start"))
    assert model.requests[0].messages == [existing]


def test_b55_custom_role_tail_is_continuable() -> None:
    model = ScriptedModel(["noted"])

    def convert(messages: list[Any]) -> list[Any]:
        return [user(m.text) if m.role == "reminder" else m for m in messages]

    stream = agent_loop_continue(
        AgentContext(messages=[Reminder("water the plants")]),
        make_config(model, convert_to_llm=convert),
        stream_fn=model,
    )
    _collect(stream)
    result = stream.result()

    assert roles(result) == ["assistant"]
    assert roles(model.requests[0].messages) == ["user"]
    assert text_of(model.requests[0].messages[0]) == "water the plants"


def test_b56_continue_mutates_callers_messages_but_agent_loop_does_not() -> None:
    model = ScriptedModel(["continued", "prompted"])
    continued = AgentContext(messages=[user("hi")])
    original_list = continued.messages
    stream = agent_loop_continue(continued, make_config(model), stream_fn=model)
    _collect(stream)
    result = stream.result()

    assert continued.messages is original_list
    assert roles(continued.messages) == ["user", "assistant"]
    assert continued.messages[-1] is result[-1]

    prompted = AgentContext(messages=[user("earlier")])
    before = list(prompted.messages)
    stream = agent_loop([user("again")], prompted, make_config(model), stream_fn=model)
    _collect(stream)
    assert roles(stream.result()) == ["user", "assistant"]
    assert prompted.messages == before
    assert len(prompted.messages) == 1


def test_b56_run_agent_loop_continue_appends_tool_results_too() -> None:
    model = ScriptedModel([reply(tool_call("t", {}, id="c1")), "done"])
    context = AgentContext(messages=[user("hi")], tools=[make_tool("t")])
    new_messages = run_agent_loop_continue(context, make_config(model), Recorder(), stream_fn=model)

    assert roles(new_messages) == ["system", "assistant", "tool_result", "assistant"]
    assert roles(context.messages) == ["user", *roles(new_messages)]


def test_b57_default_stream_fn_used_by_loop_and_agent(restore_default_stream_fn: None) -> None:
    model = ScriptedModel([reply(tool_call("t", {}, id="c1")), "loop done", "agent done"])
    calls: list[Any] = []

    def default(m: Any, context: Any, options: Any) -> Any:
        calls.append(context)
        return model(m, context, options)

    set_default_stream_fn(default)
    assert get_default_stream_fn() is default

    new_messages = run_agent_loop(
        [user("hi")], AgentContext(tools=[make_tool("t")]), make_config(model), Recorder()
    )
    assert len(calls) == 2  # one per request
    assert text_of(new_messages[-1]) == "loop done"

    agent = Agent(model=model.model)
    assert agent.prompt("again")[-1].role == "assistant"
    assert len(calls) == 3
    assert text_of(agent.state.messages[-1]) == "agent done"

    set_default_stream_fn(None)
    try:
        restored = get_default_stream_fn()
    except NoStreamFunctionError as exc:  # this build has no providers package
        assert str(exc) == (
            "No default stream function configured. Pass stream_fn explicitly or call "
            "set_default_stream_fn()."
        )
    else:
        assert restored is not default


# --- the stream wrappers re-raise the loop's exception -------------------------------------------


def test_d2_agent_loop_reraises_the_loops_exception() -> None:
    model = ScriptedModel([reply(raise_error=RuntimeError("provider exploded"))])
    stream = agent_loop([user("hi")], AgentContext(), make_config(model), stream_fn=model)
    seen: list[str] = []

    with pytest.raises(RuntimeError, match="^provider exploded$"):
        for event in stream:
            seen.append(event.type)
    with pytest.raises(RuntimeError, match="^provider exploded$"):
        stream.result(timeout=5)
    assert seen == ["agent_start", "turn_start", "message_start", "message_end"]


def test_d2_agent_loop_continue_reraises_a_hook_failure() -> None:
    model = ScriptedModel(["never"])

    def convert(messages: list[Any]) -> list[Any]:
        raise ValueError("cannot convert")

    stream = agent_loop_continue(
        AgentContext(messages=[user("hi")]),
        make_config(model, convert_to_llm=convert),
        stream_fn=model,
    )
    with pytest.raises(ValueError, match="^cannot convert$"):
        stream.result(timeout=5)
    with pytest.raises(ValueError, match="^cannot convert$"):
        list(stream)
    assert model.requests == []
