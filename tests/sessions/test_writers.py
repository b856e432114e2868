"""How an agent writes its session: each tool result durable when its end is announced, a
message another writer stores mid-turn taken like a steering message (never splitting a call
from its result), one agent per Session object, and settling with the agent's deps."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from agentkit import Agent, RunContext, tool
from agentkit.abort import AbortSignal
from agentkit.events import AgentEvent
from agentkit.sessions import Session, SessionConflictError, SessionError, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import AssistantMessage, TextContent, ToolCall, UserMessage
from tests.sessions.invariants import assert_well_formed, roles

WAIT = 30.0


def texts(messages: list[Any]) -> list[str]:
    return [
        m.content if isinstance(m.content, str) else "".join(
            c.text for c in m.content if isinstance(c, TextContent))
        for m in messages
        if m.role == "user"
    ]  # fmt: skip


def test_a_parallel_result_is_stored_when_its_end_is_announced(
    store: SessionStore, name: str
) -> None:
    release = threading.Event()
    stored_at_end: list[list[str]] = []

    @tool(idempotent=True)
    def lookup(key: str, signal: AbortSignal) -> str:
        """A slow read."""
        assert release.wait(WAIT)
        return f"value of {key}"

    @tool
    def charge(amount: int) -> str:
        """A fast charge."""
        return "charged"

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "charge":
            # What a crash right now would leave: read by another connection.
            stored = Session(name, store).load()
            stored_at_end.append([getattr(m, "tool_name", m.role) for m in stored])
            release.set()

    model = ScriptedModel([
        reply(tool_call("lookup", {"key": "k"}), tool_call("charge", {"amount": 5})), "Done."])  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[lookup, charge],
                  system_prompt="s", session=Session(name, store))  # fmt: skip
    agent.subscribe(listener)
    agent.prompt("go")
    assert stored_at_end == [["system", "user", "assistant", "charge"]]
    stored = Session(name, store).load()
    # The model read the results in call order, and so does every later reader.
    second = model.requests[1].messages
    assert [getattr(m, "tool_name", m.role) for m in second][-2:] == ["lookup", "charge"]
    assert stored == agent.state.messages
    assert_well_formed(stored)


def test_a_message_stored_by_another_writer_mid_batch_waits_like_a_steer(
    store: SessionStore, name: str
) -> None:
    """The way agentkit.celery.submit() stores a user's second message while the first is
    being answered: the run takes it after its batch, and the session stays well formed."""
    other = Session(name, store)

    @tool
    def slow() -> str:
        """A tool during which the user sends another message."""
        other.load()
        other.append(UserMessage(content="and also this"))
        return "slow done"

    model = ScriptedModel([reply(tool_call("slow")), "Answer to both.", "unused"])
    agent = Agent(model=model.model, stream_fn=model, tools=[slow], system_prompt="s",
                  session=Session(name, store))  # fmt: skip
    result = agent.prompt("first")
    assert result.error is None and result.text == "Answer to both."
    assert roles(model.requests[1].messages)[-3:] == ["assistant", "tool_result", "user"]
    stored = Session(name, store).load()
    assert roles(stored) == ["system", "user", "assistant", "tool_result", "user", "assistant"]
    assert texts(stored) == ["first", "and also this"]
    assert stored == agent.state.messages
    assert_well_formed(stored)
    # Going on from the store, in this agent or a fresh one, works and sees every result.
    agent.prompt("next")
    fresh = Agent(model=model.model, stream_fn=model, tools=[slow],
                  session=Session(name, store))  # fmt: skip
    assert fresh.state.messages == Session(name, store).load()
    assert_well_formed(fresh.state.messages)


def test_messages_stored_between_parallel_results_follow_the_batch(
    store: SessionStore, name: str
) -> None:
    other = Session(name, store)
    first_ended = threading.Event()

    @tool
    def fast() -> str:
        """Ends first."""
        return "fast"

    @tool
    def late() -> str:
        """Ends after another writer stored two messages."""
        assert first_ended.wait(WAIT)
        return "late"

    def listener(event: AgentEvent) -> None:
        if event.type == "tool_execution_end" and event.tool_name == "fast":
            other.load()
            other.append(UserMessage(content="one"))
            other.append(UserMessage(content="two"))
            first_ended.set()

    model = ScriptedModel([reply(tool_call("late"), tool_call("fast")), "Both read."])
    agent = Agent(model=model.model, stream_fn=model, tools=[fast, late], system_prompt="s",
                  steering_mode="one-at-a-time", session=Session(name, store))  # fmt: skip
    agent.subscribe(listener)
    agent.prompt("go")
    stored = Session(name, store).load()
    assert roles(stored) == [
        "system", "user", "assistant", "tool_result", "tool_result", "user", "user", "assistant"
    ]  # fmt: skip
    assert texts(stored) == ["go", "one", "two"]  # both in one steering poll, in order
    assert stored == agent.state.messages
    assert_well_formed(stored)


def test_a_message_stored_while_the_answer_streams_comes_after_it(
    store: SessionStore, name: str
) -> None:
    other = Session(name, store)
    sent = threading.Event()

    def listener(event: AgentEvent) -> None:
        if event.type == "message_update" and not sent.is_set():
            sent.set()
            other.load()
            other.append(UserMessage(content="while you type"))

    model = ScriptedModel(["A first answer.", "The second answer."])
    agent = Agent(model=model.model, stream_fn=model, system_prompt="s",
                  session=Session(name, store))  # fmt: skip
    agent.subscribe(listener)
    agent.prompt("hello")
    stored = Session(name, store).load()
    assert roles(stored) == ["system", "user", "assistant", "user", "assistant"]
    assert texts(stored) == ["hello", "while you type"]
    assert stored[-1].content[0].text == "The second answer."
    assert stored == agent.state.messages


def test_another_run_writing_the_session_is_still_a_conflict(
    store: SessionStore, name: str
) -> None:
    other = Session(name, store)

    @tool
    def slow() -> str:
        """Meanwhile another run answers on the same session."""
        other.load()
        other.append(AssistantMessage(content=[TextContent(text="someone else")]))
        return "done"

    model = ScriptedModel([reply(tool_call("slow")), "unused"])
    agent = Agent(model=model.model, stream_fn=model, tools=[slow], system_prompt="s",
                  session=Session(name, store))  # fmt: skip
    result = agent.prompt("go")
    assert result.stop_reason == "error"
    assert "changed by another writer" in (result.error_message or "")
    assert isinstance(result.error, SessionConflictError)


def test_one_session_object_serves_one_agent_at_a_time(store: SessionStore, name: str) -> None:
    session = Session(name, store)
    model = ScriptedModel(["one", "two"])
    first = Agent(model=model.model, stream_fn=model, system_prompt="s", session=session)
    with pytest.raises(SessionError, match="already attached to an agent"):
        Agent(model=model.model, stream_fn=model, system_prompt="s", session=session)
    first.prompt("hi")
    first.close()
    second = Agent(model=model.model, stream_fn=model, session=session)  # the first is done
    second.prompt("again")
    assert roles(Session(name, store).load()) == ["system", "user", "assistant"] * 1 + [
        "user", "assistant"]  # fmt: skip
    del second  # an agent dropped without close() lets the next one attach too
    gc.collect()
    Agent(model=model.model, stream_fn=model, session=session)


def test_two_agents_on_two_objects_conflict_instead_of_interleaving(
    store: SessionStore, name: str
) -> None:
    model = ScriptedModel(["one", "two"])
    first = Agent(model=model.model, stream_fn=model, system_prompt="s",
                  session=Session(name, store))  # fmt: skip
    second = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    first.prompt("hi")
    result = second.prompt("me too")  # the first agent's answer is in its way: a conflict
    assert result.stop_reason == "error" and isinstance(result.error, SessionConflictError)
    assert roles(Session(name, store).load()) == ["system", "user", "assistant"]


def test_settling_reruns_an_idempotent_tool_with_the_agents_deps(
    store: SessionStore, name: str
) -> None:
    seen: list[Any] = []

    @tool(idempotent=True)
    def lookup(ctx: RunContext[dict[str, str]], key: str) -> str:
        """Read through the application's client."""
        seen.append(ctx.deps)
        return ctx.deps[key]

    crashed = Session(name, store)
    crashed.append(UserMessage(content="go"), AssistantMessage(
        content=[ToolCall(id="c1", name="lookup", arguments={"key": "k"})],
        stop_reason="tool_use"))  # fmt: skip
    deps = {"k": "from the database"}
    model = ScriptedModel(["ok"])
    agent = Agent(model=model.model, stream_fn=model, tools=[lookup], deps=deps,
                  session=Session(name, store))  # fmt: skip
    assert seen == [deps]
    result = agent.state.messages[-1]
    assert not result.is_error and result.content[0].text == "from the database"


def test_a_message_stored_while_settling_waits_for_the_settled_results(
    store: SessionStore, name: str
) -> None:
    """A user's message stored while an idempotent call is re-run on load (submit() racing a
    redelivered task): the settled result still goes right after its call."""
    other = Session(name, store)

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read a value; meanwhile the user writes again."""
        other.load()
        other.append(UserMessage(content="are you there?"))
        return "value"

    crashed = Session(name, store)
    crashed.append(UserMessage(content="go"), AssistantMessage(
        content=[ToolCall(id="c1", name="lookup", arguments={"key": "k"})],
        stop_reason="tool_use"))  # fmt: skip
    model = ScriptedModel(["Here it is."])
    agent = Agent(model=model.model, stream_fn=model, tools=[lookup],
                  session=Session(name, store))  # fmt: skip
    stored = Session(name, store).load()
    assert roles(stored) == ["user", "assistant", "tool_result", "user"]
    assert stored == agent.state.messages[1:]  # after the agent's own system message, unstored
    assert_well_formed(stored)
    agent.continue_()
    assert roles(Session(name, store).load())[-1] == "assistant"


def test_an_application_record_stored_mid_run_is_placed_without_an_extra_turn(
    store: SessionStore, name: str
) -> None:
    """Another writer's own record (a custom role) is not for the model to answer: it is read
    after the turn, in the store and (once the run ends) in the agent's memory, and costs no
    request."""
    other = Session(name, store)

    @tool
    def slow() -> str:
        """Meanwhile an application stores a note of its own."""
        other.load()
        other.append({"role": "note", "text": "audited"})
        return "done"

    model = ScriptedModel([reply(tool_call("slow")), "Finished."])
    agent = Agent(model=model.model, stream_fn=model, tools=[slow], system_prompt="s",
                  session=Session(name, store))  # fmt: skip
    agent.prompt("go")
    assert len(model.requests) == 2
    stored = Session(name, store).load()
    assert roles(stored) == ["system", "user", "assistant", "tool_result", "note", "assistant"]
    assert stored == agent.state.messages
