"""The Agent: state, lifecycle, errors and queues (SPEC section 5; behaviours B58-B89)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentkit import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AssistantMessage,
    Budgets,
    CannotContinueError,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agentkit.config import AgentLoopConfig
from agentkit.options import Envelope, merge_options
from agentkit.testing import ScriptedModel, reply, text, thinking, tool_call
from agentkit.types import Model, placeholder_model
from tests.support import Recorder, make_agent, make_tool, roles

A = make_tool("A")
B = make_tool("B")


def test_b58_initial_system_message_declares_prompt_and_tools() -> None:
    agent, _ = make_agent([], system_prompt="SYS", tools=[A])
    [first] = agent.state.messages
    assert isinstance(first, SystemMessage)
    assert first.content == "SYS" and first.timestamp == 0
    assert [t.name for t in first.tools_added or []] == ["A"]
    assert first.tools_added[0].parameters == A.parameters  # type: ignore[index]

    tools_only, _ = make_agent([], tools=[A])
    assert tools_only.state.messages[0].content == ""
    nothing, _ = make_agent([])
    assert nothing.state.messages == []


def test_b58_a_given_system_message_owns_the_prompt() -> None:
    given = SystemMessage(content="MINE", timestamp=5)
    agent, _ = make_agent([], system_prompt="IGNORED", tools=[A], messages=[given])
    assert agent.state.messages == [given]
    assert agent.state.system_prompt == "MINE"


def test_b59_first_request_sees_system_then_user() -> None:
    agent, model = make_agent(["hi"], system_prompt="SYS")
    agent.prompt("hello")
    assert roles(model.requests[0].messages) == ["system", "user"]


def test_b60_changed_tools_are_declared_before_the_next_prompt() -> None:
    agent, model = make_agent(["one", "two"], system_prompt="SYS", tools=[A])
    agent.prompt("first")
    agent.state.tools = [B]
    new = agent.prompt("second")
    declaration = new[0]
    assert roles(new) == ["system", "user", "assistant"]
    assert declaration.content == ""
    assert [t.name for t in declaration.tools_added] == ["B"]
    assert [t.name for t in declaration.tools_removed] == ["A"]
    assert agent.state.system_prompt == "SYS"
    assert roles(model.requests[1].messages)[-2:] == ["system", "user"]


def test_b61_prompted_system_message_keeps_sections_and_drops_bogus_tools() -> None:
    agent, _ = make_agent(["ok"], system_prompt="SYS", tools=[A])
    bogus = {"name": "Z", "description": "", "parameters": {"type": "object"}}
    system = SystemMessage(content="", sections={"skills": "SK"}, tools_added=[bogus])  # type: ignore[list-item]
    new = agent.prompt([system, UserMessage(content="go")])
    assert new[0].sections == {"skills": "SK"}
    assert new[0].tools_added is None and new[0].tools_removed is None
    assert agent.state.system_prompt == "SYS\n\nSK"


def test_b62_continue_declares_undeclared_tools_first() -> None:
    agent, _ = make_agent(["answer"], tools=[A])
    agent.state.messages = [UserMessage(content="hi")]
    recorder = Recorder()
    agent.subscribe(recorder)
    agent.continue_()
    assert roles(agent.state.messages) == ["user", "system", "assistant"]
    assert [t.name for t in agent.state.messages[1].tools_added] == ["A"]
    starts = recorder.of("message_start")
    assert starts[0].message.role == "system"


def test_b63_reset_collapses_to_one_system_message() -> None:
    agent, _ = make_agent(["a"], system_prompt="SYS", tools=[A])
    agent.prompt("hi")
    agent.state.tools = [A, B]
    agent.steer("later")
    agent.reset()
    [only] = agent.state.messages
    assert only.content == "SYS" and only.timestamp == 0
    assert [t.name for t in only.tools_added] == ["A"]  # the declared tools, replayed
    assert not agent.has_queued_messages()
    assert agent.state.error_message is None


def test_b64_defaults() -> None:
    agent = Agent(stream_fn=ScriptedModel())
    state = agent.state
    assert state.system_prompt == ""
    assert state.model is not None and state.model.id == "unknown"
    assert state.thinking_level == "off"
    assert state.tools == [] and state.messages == []
    assert state.is_streaming is False
    assert state.streaming_message is None
    assert state.pending_tool_calls == frozenset()
    assert state.error_message is None


def test_b65_custom_initial_state_is_kept() -> None:
    model = Model(id="m", api="x", provider="p", base_url="")
    agent = Agent(stream_fn=ScriptedModel(), model=model, system_prompt="S", thinking_level="low")
    assert agent.state.system_prompt == "S"
    assert agent.state.model is model
    assert agent.state.thinking_level == "low"


def test_b66_subscribe_emits_nothing_and_unsubscribe_stops_events() -> None:
    agent, _ = make_agent(["one", "two"])
    recorder = Recorder()
    unsubscribe = agent.subscribe(recorder)
    assert recorder.events == []
    agent.prompt("first")
    seen = len(recorder.events)
    assert seen > 0
    unsubscribe()
    agent.prompt("second")
    assert len(recorder.events) == seen


def test_b67_stream_fn_that_raises_becomes_a_failure_message() -> None:
    agent, _ = make_agent([reply(raise_error=RuntimeError("provider exploded"))])
    recorder = Recorder()
    agent.subscribe(recorder)
    agent.prompt("hi")
    assert recorder.types == [
        "agent_start", "turn_start", "message_start", "message_end",
        "message_start", "message_end", "turn_end", "agent_end",
    ]  # fmt: skip
    last = agent.state.messages[-1]
    assert isinstance(last, AssistantMessage)
    assert last.stop_reason == "error" and last.error_message == "provider exploded"
    assert agent.state.error_message == "provider exploded"
    assert agent.state.is_streaming is False


def test_b68_listener_raising_on_message_end_fails_the_run() -> None:
    agent, _ = make_agent(["the answer"])
    calls = {"n": 0}

    def listener(event: Any) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            calls["n"] += 1
            if calls["n"] == 1:
                raise ValueError("listener broke")

    agent.subscribe(listener)
    agent.prompt("hi")
    messages = agent.state.messages
    assert roles(messages) == ["user", "assistant", "assistant"]
    assert messages[1].content[0].text == "the answer"
    assert messages[2].stop_reason == "error"
    assert messages[2].error_message == "listener broke"


def test_b69_prompt_waits_for_a_slow_agent_end_listener() -> None:
    agent, _ = make_agent(["hi"])
    entered, release = threading.Event(), threading.Event()

    def listener(event: Any) -> None:
        if event.type == "agent_end":
            entered.set()
            release.wait(5)

    agent.subscribe(listener)
    run = agent.start("go")
    assert entered.wait(5)
    assert agent.state.is_streaming is True
    assert not run.wait(0.05)
    release.set()
    assert run.wait(5)
    assert agent.state.is_streaming is False


def test_b70_wait_for_idle_waits_for_a_blocked_listener() -> None:
    agent, _ = make_agent(["hi"])
    entered, release = threading.Event(), threading.Event()

    def listener(event: Any) -> None:
        if event.type == "message_end" and event.message.role == "assistant":
            entered.set()
            release.wait(5)

    agent.subscribe(listener)
    agent.start("go")
    assert entered.wait(5)
    assert agent.wait_for_idle(0.05) is False
    assert agent.state.is_streaming is True
    release.set()
    assert agent.wait_for_idle(5) is True
    assert agent.state.is_streaming is False


def test_b71_listeners_see_the_runs_signal() -> None:
    agent, _ = make_agent([reply("thinking...", hang=True)])
    seen: dict[str, Any] = {}

    def listener(event: Any) -> None:
        if event.type == "agent_start":
            seen["signal"] = agent.signal
            seen["aborted_at_start"] = agent.signal.aborted  # type: ignore[union-attr]
        if event.type == "message_update" and "aborted" not in seen:
            seen["aborted"] = True
            agent.abort()

    agent.subscribe(listener)
    agent.prompt("go")
    assert isinstance(seen["signal"], AbortSignal)
    assert seen["aborted_at_start"] is False
    assert seen["signal"].aborted is True
    assert agent.signal is None


def test_b72_busy_errors_carry_the_reference_messages() -> None:
    agent, _ = make_agent([reply("x", hang=True)])
    run = agent.start("go")
    with pytest.raises(AgentBusyError) as prompt_error:
        agent.prompt("again")
    assert str(prompt_error.value) == (
        "Agent is already processing a prompt. Use steer() or follow_up() to queue messages, "
        "or wait for completion."
    )
    with pytest.raises(AgentBusyError, match=r"^Agent is already processing\. Wait for completion before continuing\.$"):
        agent.continue_()
    with pytest.raises(AgentBusyError, match=r"^Agent is already processing\. Wait for completion before resetting\.$"):
        agent.reset()
    run.abort()
    run.result(5)


def test_b73_is_streaming_is_true_as_soon_as_a_run_starts() -> None:
    agent, _ = make_agent([reply("x", hang=True)])
    run = agent.start("go")
    assert agent.state.is_streaming is True
    run.abort()
    run.wait(5)


def test_b74_abort_while_idle_does_nothing() -> None:
    agent, _ = make_agent([])
    agent.abort()
    assert agent.state.is_streaming is False


def test_b75_an_aborted_stream_ends_the_run_as_aborted() -> None:
    agent, _ = make_agent([reply("partial answer", hang=True)])
    agent.subscribe(lambda e: agent.abort() if e.type == "message_update" else None)
    agent.prompt("go")
    last = agent.state.messages[-1]
    assert last.stop_reason == "aborted" and last.error_message
    assert agent.state.error_message == last.error_message
    assert agent.state.is_streaming is False


def test_b76_abort_during_sequential_tools_gives_every_call_a_result() -> None:
    started = threading.Event()

    def slow(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        if signal.wait(5):
            raise RuntimeError("stopped by abort")
        return "finished"

    never = []
    tools = [make_tool("slow", slow), make_tool("other", lambda _id, p, s, _u: never.append(1) or "ran")]
    agent, model = make_agent(
        [reply(tool_call("slow"), tool_call("other"), tool_call("other")), "unreachable"],
        tools=tools,
        tool_execution="sequential",
    )
    run = agent.start("go")
    assert started.wait(5)
    agent.abort()
    new = run.result(5)
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert [r.is_error for r in results] == [True, True, True]
    assert results[0].content[0].text == "stopped by abort"
    assert [r.content[0].text for r in results[1:]] == ["Operation aborted"] * 2
    assert results[0].duration_ms is not None and results[1].duration_ms is None
    assert never == []
    assert len(model.requests) == 1  # an abort during tools ends the run after its batch
    assert agent.state.is_streaming is False


def test_b77_state_setters_copy_and_system_prompt_is_read_only() -> None:
    agent, _ = make_agent([])
    tools = [A]
    agent.state.tools = tools
    assert agent.state.tools == tools and agent.state.tools is not tools
    messages = [UserMessage(content="x")]
    agent.state.messages = messages
    assert agent.state.messages == messages and agent.state.messages is not messages
    agent.state.messages.append(UserMessage(content="y"))
    assert len(agent.state.messages) == 2
    model = Model(id="n", api="a", provider="p", base_url="")
    agent.state.model = model
    agent.state.thinking_level = "high"
    assert agent.state.model is model and agent.state.thinking_level == "high"
    with pytest.raises(AttributeError):
        agent.state.system_prompt = "nope"  # type: ignore[misc]


def test_b78_steer_and_follow_up_do_not_touch_the_transcript() -> None:
    agent, _ = make_agent([])
    agent.steer("a")
    agent.follow_up(UserMessage(content="b"))
    assert agent.state.messages == []
    assert agent.has_queued_messages()


def test_b79_continue_from_assistant_tail_runs_a_queued_follow_up() -> None:
    agent, _ = make_agent(["first", "after follow-up"])
    agent.prompt("hi")
    agent.follow_up("more please")
    agent.continue_()
    assert roles(agent.state.messages)[-2:] == ["user", "assistant"]
    assert agent.state.messages[-2].content[0].text == "more please"
    assert not agent.has_queued_messages()


def test_b80_continue_with_two_steering_messages_one_at_a_time() -> None:
    agent, model = make_agent(["first", "s1 done", "s2 done", "follow-up done"])
    agent.prompt("hi")
    before = len(model.requests)
    agent.steer("s1")
    agent.steer("s2")
    agent.continue_()
    assert roles(agent.state.messages)[-4:] == ["user", "assistant", "user", "assistant"]
    assert len(model.requests) - before == 2

    agent2, model2 = make_agent(["first", "s1 done", "s2 done", "f done"])
    agent2.prompt("hi")
    agent2.steer("s1")
    agent2.steer("s2")
    agent2.follow_up("f")
    agent2.continue_()
    assert len(model2.requests) == 4
    assert agent2.state.messages[-2].content[0].text == "f"


def test_b81_continue_errors() -> None:
    empty, _ = make_agent([])
    with pytest.raises(CannotContinueError, match="^No messages to continue from$"):
        empty.continue_()
    system_only, _ = make_agent([], system_prompt="S")
    system_only.follow_up("kept")
    with pytest.raises(CannotContinueError, match="^No messages to continue from$"):
        system_only.continue_()
    assert system_only.has_queued_messages()
    tail = AssistantMessage(content=[TextContent(text="done")])
    assistant_tail, _ = make_agent([], messages=[tail])
    with pytest.raises(CannotContinueError, match="^Cannot continue from message role: assistant$"):
        assistant_tail.continue_()


def test_b82_continue_from_user_and_tool_result_tails() -> None:
    agent, _ = make_agent(["answer"], messages=[UserMessage(content="q")])
    new = agent.continue_()
    assert roles(new) == ["assistant"]
    assert roles(agent.state.messages) == ["user", "assistant"]

    call = ToolCall(id="c1", name="A", arguments={})
    transcript = [
        UserMessage(content="q"),
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="A", content=[TextContent(text="r")]),
    ]
    agent2, _ = make_agent(["final"], messages=transcript)
    agent2.continue_()
    assert agent2.state.messages[-1].role == "assistant"


def test_b83_prepare_next_turn_can_read_the_runs_signal() -> None:
    seen: list[Any] = []

    def prepare_next_turn(turn: Any) -> None:
        seen.append((turn.message.role, agent.signal))

    agent, model = make_agent(
        [reply(tool_call("A")), "done"], tools=[A], prepare_next_turn=prepare_next_turn
    )
    agent.prompt("go")
    assert len(model.requests) == 2
    assert len(seen) == 1 and isinstance(seen[0][1], AbortSignal)


def test_b84_session_id_reaches_the_stream_fn_and_changes_take_effect() -> None:
    agent, model = make_agent(["a", "b"], session_id="s-1")
    agent.prompt("x")
    agent.session_id = "s-2"
    agent.prompt("y")
    assert [r.options.session_id for r in model.requests] == ["s-1", "s-2"]


def test_b85_images_follow_the_prompt_text() -> None:
    agent, _ = make_agent(["a", "b"])
    image = ImageContent(data="aGk=", mime_type="image/png")
    agent.prompt("look", [image])
    assert [c.type for c in agent.state.messages[0].content] == ["text", "image"]
    agent.prompt("again", [])
    assert [c.type for c in agent.state.messages[2].content] == ["text"]


def test_b86_peek_prefers_steering_and_takes_nothing() -> None:
    agent, _ = make_agent([])
    assert agent.peek_queued_messages() == []
    agent.follow_up("f1")
    agent.follow_up("f2")
    assert [m.content[0].text for m in agent.peek_queued_messages()] == ["f1"]
    agent.follow_up_mode = "all"
    assert [m.content[0].text for m in agent.peek_queued_messages()] == ["f1", "f2"]
    agent.steer("s1")
    assert [m.content[0].text for m in agent.peek_queued_messages()] == ["s1"]
    assert agent.has_queued_messages()
    agent.clear_steering_queue()
    assert [m.content[0].text for m in agent.peek_queued_messages()] == ["f1", "f2"]
    agent.clear_all_queues()
    assert not agent.has_queued_messages()


def test_b87_context_carries_over_between_prompts() -> None:
    agent, model = make_agent(["Hi Alice", "You are Alice"], system_prompt="S")
    agent.prompt("My name is Alice")
    assert len(agent.state.messages) == 3
    agent.prompt("What is my name?")
    assert len(agent.state.messages) == 5
    second = model.requests[1].messages
    assert roles(second) == ["system", "user", "assistant", "user"]
    assert second[1].content[0].text == "My name is Alice"


def test_b88_thinking_blocks_are_kept() -> None:
    agent, _ = make_agent([reply(thinking("hmm", signature="sig"), text("answer"))])
    agent.prompt("q")
    content = agent.state.messages[-1].content
    assert isinstance(content[0], ThinkingContent) and content[0].signature == "sig"
    assert [c.type for c in content] == ["thinking", "text"]


def test_b89_agent_end_messages_include_the_declaration() -> None:
    agent, _ = make_agent(["ok"])
    agent.state.tools = [A]
    recorder = Recorder()
    agent.subscribe(recorder)
    agent.prompt("go")
    [end] = recorder.of("agent_end")
    assert roles(end.messages) == ["system", "user", "assistant"]


def test_stream_yields_events_and_result() -> None:
    agent, _ = make_agent(["streamed answer"])
    with agent.stream("go") as events:
        kinds = [e.type for e in events]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert events.result()[-1].content[0].text == "streamed answer"


def test_stream_left_early_aborts_the_run() -> None:
    agent, _ = make_agent([reply("a long answer", hang=True)])
    for event in agent.stream("go"):
        if event.type == "message_update":
            break
    assert agent.state.is_streaming is False
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_run_handle() -> None:
    agent, _ = make_agent(["done"])
    finished: list[Any] = []
    run = agent.start("go")
    run.add_done_callback(finished.append)
    assert run.result(5)[-1].role == "assistant"
    assert run.done() and finished == [run]
    late: list[Any] = []
    run.add_done_callback(late.append)
    assert late == [run]


def test_close_refuses_new_runs() -> None:
    with make_agent(["a"])[0] as agent:
        agent.prompt("x")
    with pytest.raises(Exception, match="closed"):
        agent.prompt("y")


def test_stream_left_by_an_exception_aborts_the_run() -> None:
    agent, _ = make_agent([reply("a long answer", hang=True)])

    def consume() -> None:
        for event in agent.stream("go"):
            if event.type == "message_update":
                raise ValueError("the consumer failed")

    with pytest.raises(ValueError):
        consume()
    assert agent.state.is_streaming is False
    assert agent.state.messages[-1].stop_reason == "aborted"


def test_stream_close_aborts_and_waits() -> None:
    agent, _ = make_agent([reply("a long answer", hang=True)])
    events = agent.stream("go")
    first = next(events)
    assert first.type == "agent_start"
    events.close()
    assert agent.state.is_streaming is False
    assert list(events) == []


def test_request_options_reach_the_stream_fn() -> None:
    agent, model = make_agent(
        ["a"], max_tokens=256, temperature=0.0, max_retries=5, timeout=(3, 30), headers={"X": "1"}
    )
    agent.prompt("x")
    options = model.requests[0].options
    assert (options.max_tokens, options.temperature, options.max_retries) == (256, 0.0, 5)
    assert options.timeout == (3, 30) and options.headers == {"X": "1"}


def test_options_are_defined_once_and_a_misspelt_one_raises() -> None:
    agent, model = make_agent(["a", "b"], max_tokens=64, tool_abort_grace=0.5)
    assert (agent.max_tokens, agent.tool_abort_grace) == (64, 0.5)
    agent.max_tokens = 128
    agent.before_tool_call = None
    agent.prompt("one")
    assert model.requests[0].options.max_tokens == 128
    with pytest.raises(TypeError, match="unknown option 'sesion_id'.*session_id"):
        make_agent([], sesion_id="typo")
    with pytest.raises(AttributeError):
        agent.no_such_option  # noqa: B018
    # Set as attributes, options are checked as the constructor checks them.
    with pytest.raises(ValueError, match="cache_retension"):
        agent.anthropic = {"cache_retension": "long"}
    with pytest.raises(ValueError, match="max_retries"):
        agent.max_retries = "lots"
    agent.stream_options = {"max_tokens": 32}
    agent.prompt("two")
    assert model.requests[-1].options.max_tokens == 32
    with pytest.raises(ValueError, match="max_retires"):
        agent.stream_options = {"max_retires": 3}


def test_an_unknown_attribute_raises_naming_the_valid_ones() -> None:
    agent, _ = make_agent([])
    with pytest.raises(AttributeError, match="before_tool_cal'.*before_tool_call.*session_id"):
        agent.before_tool_cal = lambda ctx, signal: None  # type: ignore[attr-defined]
    assert agent.before_tool_call is None
    with pytest.raises(AttributeError):
        agent.state = None  # type: ignore[misc]  # read-only: no setter
    agent._scratch = 1  # private names stay free for subclasses and tests


def test_an_option_set_as_an_attribute_is_used_by_the_next_run() -> None:
    agent, model = make_agent([reply(tool_call("A", {"text": "x"}, id="a")), "done", "again"],
                              tools=[A])
    blocked: list[str] = []

    def block(ctx: Any, signal: AbortSignal) -> dict[str, Any]:
        blocked.append(ctx.tool_call.name)
        return {"block": True, "reason": "not now"}

    agent.before_tool_call = block
    agent.budgets = {"max_turns": 5}  # checked and kept in its working form
    agent.temperature = 0.25
    new = agent.prompt("go")
    assert blocked == ["A"] and new[2].is_error and new[2].content[0].text == "not now"
    assert agent.budgets == Budgets(max_turns=5)
    assert model.requests[0].options.temperature == 0.25
    with pytest.raises(ValueError, match="above zero"):
        agent.budgets = {"max_turns": 0}  # the constructor's check, on assignment
    with pytest.raises(ValueError, match="output_retries"):
        agent.output_retries = -1


def test_run_options_beat_agent_options_beat_defaults() -> None:
    agent, model = make_agent(["1", "2", "3"])
    agent.prompt("defaults")
    assert model.requests[0].options.tool_choice is None  # StreamOptions' default
    agent.tool_choice = "required"
    agent.output_retries = 4
    agent.prompt("agent")
    agent.prompt("run", tool_choice="none", output_retries=0)
    assert [r.options.tool_choice for r in model.requests] == [None, "required", "none"]
    assert (agent.tool_choice, agent.output_retries) == ("required", 4)  # run options don't stick

    config = AgentLoopConfig(model=placeholder_model())
    envelope = Envelope(output_type=int, output_retries=3)
    assert envelope.output_type.retries == 3  # the spec carries the one retry count
    merged, outer = merge_options(
        config, envelope, {"output_retries": 1, "deps": "d"}, reasoning="low"
    )
    assert (outer.output_type.retries, merged.deps, merged.reasoning) == (1, "d", "low")
    assert merge_options(config, envelope, {"output_type": None})[1].output_type is None
    assert (envelope.output_type.retries, config.deps) == (3, None)  # the agent's unchanged
