"""The loop's basics (SPEC 4.1, 4.4, B1-B9): events of a simple run, conversion, request order,
stream options, and how a provider stream becomes message events."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from agentkit import (
    AbortController,
    AgentContext,
    AssistantMessage,
    AssistantMessageEventStream,
    DoneEvent,
    StartEvent,
    StreamOptions,
    TextContent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    run_agent_loop,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import WAIT, Recorder, make_config, make_tool, roles, run_loop, text_of, user


@dataclass
class Notification:
    """An application's own transcript entry."""

    text: str
    role: str = "notification"


def test_b1_text_reply_returns_user_and_assistant_with_lifecycle_events() -> None:
    run = run_loop(["Hello there, how can I help?"], "hi")

    assert roles(run.new_messages) == ["user", "assistant"]
    assert text_of(run.new_messages[0]) == "hi"
    assert text_of(run.new_messages[1]) == "Hello there, how can I help?"
    for kind in (
        "agent_start",
        "turn_start",
        "message_start",
        "message_end",
        "turn_end",
        "agent_end",
    ):
        assert kind in run.rec.types
    # SPEC 3.3 "Simple prompt", updates aside.
    assert run.rec.labels() == [
        "agent_start",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    updates = run.rec.of("message_update")
    assert updates, "a streamed reply produces message_update events"
    labels = run.rec.labels(updates=True)
    first, last = labels.index("mu:assistant"), len(labels) - 1 - labels[::-1].index("mu:assistant")
    assert labels.index("ms:assistant") < first and last < labels.index("me:assistant")
    assert run.rec.of("agent_end")[0].messages == run.new_messages


def test_b2_custom_message_reaches_convert_to_llm_which_may_drop_it() -> None:
    seen: list[list[Any]] = []

    def convert(messages: list[Any]) -> list[Any]:
        seen.append(list(messages))
        return [m for m in messages if m.role != "notification"]

    note = Notification("build finished")
    run = run_loop(["ok"], "hi", messages=[note], convert_to_llm=convert)

    assert len(seen) == 1
    assert seen[0][0] is note
    assert roles(seen[0]) == ["notification", "user"]
    assert roles(run.requests[0].messages) == ["user"]
    assert text_of(run.requests[0].messages[0]) == "hi"


def test_b3_transform_context_runs_before_convert_to_llm() -> None:
    order: list[str] = []
    converted: list[list[Any]] = []
    signal = AbortController().signal
    transform_signals: list[Any] = []

    live: list[Any] = []

    def prepare_request(request: Any, sig: Any) -> None:
        live.append(request.context.messages)

    def transform(messages: list[Any], sig: Any) -> list[Any]:
        order.append("transform")
        transform_signals.append(sig)
        assert messages is live[-1]  # the loop's live list, not a copy
        return messages[-2:]

    def convert(messages: list[Any]) -> list[Any]:
        order.append("convert")
        converted.append(list(messages))
        return list(messages)

    history = [user("one"), user("two"), user("three")]
    run = run_loop(
        ["ok"],
        "four",
        messages=history,
        transform_context=transform,
        convert_to_llm=convert,
        prepare_request=prepare_request,
        signal=signal,
    )

    assert order == ["transform", "convert"]
    assert transform_signals == [signal]
    assert len(converted[0]) == 2
    assert [text_of(m) for m in converted[0]] == ["three", "four"]
    assert [text_of(m) for m in run.requests[0].messages] == ["three", "four"]


def test_b4_request_pipeline_order_for_every_request() -> None:
    log: list[str] = []
    model = ScriptedModel([reply(tool_call("echo", {}, id="c1")), "done"])

    def stream_fn(m: Any, context: Any, options: Any) -> Any:
        log.append("stream_fn")
        return model(m, context, options)

    def prepare_request(request: Any, signal: Any) -> None:
        log.append("prepare_request")

    def transform(messages: list[Any], signal: Any) -> list[Any]:
        log.append("transform_context")
        return messages

    def convert(messages: list[Any]) -> list[Any]:
        log.append("convert_to_llm")
        return list(messages)

    def get_api_key(provider: str) -> str:
        log.append(f"get_api_key:{provider}")
        return "key"

    config = make_config(
        model,
        prepare_request=prepare_request,
        transform_context=transform,
        convert_to_llm=convert,
        get_api_key=get_api_key,
    )
    context = AgentContext(tools=[make_tool("echo")])
    run_agent_loop([user("hi")], context, config, Recorder(), None, stream_fn)

    one = [
        "prepare_request",
        "transform_context",
        "convert_to_llm",
        "get_api_key:scripted",
        "stream_fn",
    ]
    assert log == one + one
    assert model.requests[0].options.api_key == "key"


def test_b5_empty_api_key_from_hook_falls_back_to_config_api_key() -> None:
    keys = iter(["", None, "from-hook"])
    run = run_loop(
        [
            reply(tool_call("echo", {}, id="c1")),
            reply(tool_call("echo", {}, id="c2")),
            "done",
        ],
        tools=[make_tool("echo")],
        get_api_key=lambda provider: next(keys),
        stream_options=StreamOptions(api_key="from-config"),
    )

    assert [r.options.api_key for r in run.requests] == ["from-config", "from-config", "from-hook"]


def test_b6_stream_options_carry_request_options_reasoning_and_signal_but_no_hooks() -> None:
    # Unlike the reference: providers get request options only, so no
    # provider can reach a hook or drain a queue.
    controller = AbortController()

    def before(ctx: Any, signal: Any) -> None:
        return None

    def finish(turn: Any, signal: Any) -> None:
        return None

    run = run_loop(
        ["ok"],
        reasoning="high",
        stream_options=StreamOptions(session_id="session-42", max_tokens=99),
        tool_execution="sequential",
        before_tool_call=before,
        finish_turn=finish,
        get_steering_messages=lambda: [],
        signal=controller.signal,
    )

    options = run.requests[0].options
    assert type(options) is StreamOptions
    assert options.reasoning == "high"
    assert (options.session_id, options.max_tokens) == ("session-42", 99)
    assert options.signal is controller.signal
    dumped = dict(options)
    for name in ("tool_execution", "before_tool_call", "finish_turn", "get_steering_messages"):
        assert name not in dumped


def _stream_of(*events: Any) -> Any:
    """A stream function that returns a stream holding ``events`` (already pushed)."""
    requests: list[Any] = []

    def stream_fn(model: Any, context: Any, options: Any) -> AssistantMessageEventStream:
        requests.append(context)
        stream = AssistantMessageEventStream()
        for event in events:
            stream.push(event)
        return stream

    stream_fn.requests = requests  # type: ignore[attr-defined]
    return stream_fn


def _assistant(text: str) -> AssistantMessage:
    return AssistantMessage(
        content=[TextContent(text=text)], api="scripted", provider="scripted", model="scripted"
    )


def test_b7_deltas_before_start_are_ignored_and_no_start_still_gives_start_and_end() -> None:
    partial = _assistant("")
    final = _assistant("hello")
    stream_fn = _stream_of(
        TextStartEvent(0, partial),
        TextDeltaEvent(0, "hel", partial),
        TextEndEvent(0, "hello", partial),
        DoneEvent("stop", final),
    )
    rec = Recorder()
    new_messages = run_agent_loop([user("hi")], AgentContext(), make_config(), rec, None, stream_fn)

    assert rec.of("message_update") == []
    assert rec.labels(updates=True) == [
        "agent_start",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    assert new_messages[-1] is final
    assert rec.of("message_end")[-1].message is final
    assert text_of(rec.of("message_start")[-1].message) == "hello"


def test_b7_delta_before_start_ignored_but_deltas_after_start_update() -> None:
    partial = _assistant("")
    final = _assistant("hello")
    stream_fn = _stream_of(
        TextDeltaEvent(0, "early", partial),
        StartEvent(partial),
        TextDeltaEvent(0, "hello", partial),
        DoneEvent("stop", final),
    )
    rec = Recorder()
    run_agent_loop([user("hi")], AgentContext(), make_config(), rec, None, stream_fn)

    updates = rec.of("message_update")
    assert len(updates) == 1
    assert updates[0].assistant_message_event.delta == "hello"
    assert rec.index("ms:assistant") < rec.index("mu:assistant") < rec.index("me:assistant")


def test_b8_message_start_is_a_shallow_copy_and_message_end_the_final_object() -> None:
    partial = _assistant("")
    final = _assistant("hello")
    stream_fn = _stream_of(
        StartEvent(partial),
        TextDeltaEvent(0, "hello", partial),
        DoneEvent("stop", final),
    )
    rec = Recorder()
    new_messages = run_agent_loop([user("hi")], AgentContext(), make_config(), rec, None, stream_fn)

    start = [e for e in rec.of("message_start") if e.message.role == "assistant"][0]
    assert start.message is not partial
    assert start.message == partial
    # A shallow copy of the message, with its own content list (the blocks are shared): the
    # provider's later appends never show up in an event a listener already holds.
    assert start.message.content is not partial.content
    assert start.message.content[0] is partial.content[0]
    update = rec.of("message_update")[0]
    assert update.message is not partial and update.message == partial
    end = [e for e in rec.of("message_end") if e.message.role == "assistant"][0]
    assert end.message is final
    assert new_messages[-1] is final


def test_message_start_does_not_see_blocks_the_provider_appends_later() -> None:
    partial = AssistantMessage(api="scripted", provider="scripted", model="scripted")
    final = _assistant("hello")
    rec = Recorder()
    started = rec.when(lambda e: e.type == "message_start" and e.message.role == "assistant")

    def stream_fn(model: Any, context: Any, options: Any) -> AssistantMessageEventStream:
        stream = AssistantMessageEventStream()

        def produce() -> None:
            stream.push(StartEvent(partial))
            started.wait(WAIT)  # the loop has emitted message_start for the empty partial
            partial.content.append(TextContent(text="hello"))
            stream.push(TextDeltaEvent(0, "hello", partial))
            stream.push(DoneEvent("stop", final))

        threading.Thread(target=produce, name="test-provider").start()
        return stream

    run_agent_loop([user("hi")], AgentContext(), make_config(), rec, None, stream_fn)

    start = [e for e in rec.of("message_start") if e.message.role == "assistant"][0]
    update = rec.of("message_update")[0]
    assert start.message.content == []
    assert [c.text for c in update.message.content] == ["hello"]


def test_b9_final_message_records_requested_thinking_level() -> None:
    with_level = run_loop(["ok"], reasoning="medium")
    without = run_loop(["ok"])

    assert with_level.new_messages[-1].thinking_level == "medium"
    assert with_level.rec.of("message_end")[-1].message.thinking_level == "medium"
    assert without.new_messages[-1].thinking_level == "off"
