"""Each transcript message is converted once and remembered (``transform.ConversionMemo``), and
the memory never answers for a message that was edited in place, replaced, or handed to an
``on_payload`` hook that may change the body."""

from __future__ import annotations

import gc
import json
from collections.abc import Callable
from typing import Any

import pytest
from replay_server import API_KEY, ReplayServer, Reply, call_delta, chat_sse, make_model

from agentkit import Agent, AgentTool, AgentToolResult
from agentkit.providers import stream_simple
from agentkit.providers.openai_completions import build_messages, prepare, resolve_compat
from agentkit.providers.transform import MEMO, fingerprint
from agentkit.types import (
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    StreamOptions,
    SystemMessage,
    TextContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

MODEL = Model(
    id="m", api="openai-completions", provider="openai", base_url="http://x/v1", input=["text"]
)
COMPAT = resolve_compat(MODEL)


def transcript() -> list[Any]:
    return [
        SystemMessage(content="Be brief.", tools_added=[Tool(name="look")]),
        UserMessage(content=[TextContent(text="find it")]),
        AssistantMessage(
            api=MODEL.api,
            provider=MODEL.provider,
            model="m",
            stop_reason="tool_use",
            content=[
                TextContent(text="Looking."),
                ToolCall(id="call_1", name="look", arguments={"where": "here", "deep": True}),
            ],
        ),
        ToolResultMessage(
            tool_call_id="call_1", tool_name="look", content=[TextContent(text="found")]
        ),
    ]


def wire(messages: list[Any], model: Model = MODEL) -> list[dict[str, Any]]:
    entries, _ = build_messages(model, Context(messages=messages), resolve_compat(model))
    return entries


def fresh(messages: list[Any], model: Model = MODEL) -> list[dict[str, Any]]:
    """The same request built without any memory (deep copies are new objects)."""
    return json.loads(json.dumps(wire([m.model_copy(deep=True) for m in messages], model)))


def test_an_unchanged_transcript_is_answered_from_memory() -> None:
    messages = transcript()
    first, second = wire(messages), wire(messages)
    assert first == second == fresh(messages)
    # the very same entries: nothing was converted again
    assert all(a is b for a, b in zip(first[1:], second[1:], strict=True))


def _edit_arguments_value(m: list[Any]) -> None:
    m[2].content[1].arguments["where"] = "there"


def _add_argument(m: list[Any]) -> None:
    m[2].content[1].arguments["limit"] = 3


def _bool_to_equal_int(m: list[Any]) -> None:
    m[2].content[1].arguments["deep"] = 1  # == True, but sent as 1, not true


def _nested_argument(m: list[Any]) -> None:
    m[2].content[1].arguments["paths"] = ["a"]


def _reorder_arguments(m: list[Any]) -> None:
    args = m[2].content[1].arguments
    args["where"] = args.pop("where")


def _edit_text_block(m: list[Any]) -> None:
    m[2].content[0].text = "Searching."


def _append_block(m: list[Any]) -> None:
    m[1].content.append(TextContent(text="quickly"))


def _replace_block(m: list[Any]) -> None:
    m[3].content[0] = TextContent(text="lost")


def _edit_result_text(m: list[Any]) -> None:
    m[3].content[0].text = "[redacted]"


def _reassign_field(m: list[Any]) -> None:
    m[2].stop_reason = "error"  # a failed turn is not sent, nor is its result


def _rename_call(m: list[Any]) -> None:
    m[2].content[1].id = "call_2"
    m[3].tool_call_id = "call_2"


EDITS: list[Callable[[list[Any]], None]] = [
    _edit_arguments_value,
    _add_argument,
    _bool_to_equal_int,
    _nested_argument,
    _reorder_arguments,
    _edit_text_block,
    _append_block,
    _replace_block,
    _edit_result_text,
    _reassign_field,
    _rename_call,
]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__.strip("_") for e in EDITS])
def test_an_edit_in_place_is_seen(edit: Callable[[list[Any]], None]) -> None:
    messages = transcript()
    before = json.dumps(wire(messages))
    edit(messages)
    after = wire(messages)
    assert json.dumps(after) != before
    assert after == fresh(messages)
    assert wire(messages) == after  # and the new conversion is the one remembered


def test_nested_arguments_are_never_remembered_and_still_seen() -> None:
    messages = transcript()
    paths: list[str] = ["a"]
    messages[2].content[1].arguments["paths"] = paths
    assert fingerprint(messages[2]) is None
    wire(messages)
    paths.append("b")  # the list inside the arguments, changed in place
    sent = json.loads(wire(messages)[2]["tool_calls"][0]["function"]["arguments"])
    assert sent["paths"] == ["a", "b"]


def test_a_replaced_message_is_seen() -> None:
    messages = transcript()
    wire(messages)
    messages[3] = ToolResultMessage(
        tool_call_id="call_1", tool_name="look", content=[TextContent(text="elsewhere")]
    )
    assert wire(messages)[-1]["content"] == "elsewhere"


def test_another_model_gets_its_own_conversion() -> None:
    messages = transcript()
    messages[1].content.append(ImageContent(data="aGk=", mime_type="image/png"))
    with_images = MODEL.model_copy(update={"input": ["text", "image"]})
    assert wire(messages, with_images)[1]["content"][1]["type"] == "image_url"
    text_only = wire(messages)[1]["content"]
    assert isinstance(text_only, str) and "image omitted" in text_only
    assert wire(messages, with_images) == fresh(messages, with_images)


def test_a_body_an_on_payload_hook_may_change_is_never_remembered() -> None:
    messages = transcript()
    context = Context(messages=messages)
    hooked = prepare(MODEL, context, StreamOptions(on_payload=lambda p: p), API_KEY)
    hooked.payload["messages"][-1]["content"] = "changed by the hook"  # in place
    plain = prepare(MODEL, context, StreamOptions(), API_KEY)
    assert plain.payload["messages"][-1]["content"] == "found"
    # and what a plain request remembered is not handed to a hooked one
    again = prepare(MODEL, context, StreamOptions(on_payload=lambda p: p), API_KEY)
    assert again.payload["messages"][-1] is not plain.payload["messages"][-1]


def test_memory_goes_with_its_messages() -> None:
    gc.collect()
    before = len(MEMO)
    messages = transcript()
    wire(messages)
    assert len(MEMO) == before + 3  # the user, assistant and tool result messages
    del messages
    gc.collect()
    assert len(MEMO) == before


def test_dict_messages_are_not_remembered() -> None:
    gc.collect()
    before = len(MEMO)
    messages = [m.model_dump() for m in transcript()]
    assert wire(messages) == fresh(transcript())
    assert len(MEMO) == before


def look_call(call_id: str, n: int) -> dict[str, Any]:
    """A streamed delta calling the ``look`` tool with ``{"n": n}``."""
    return call_delta(call_id, "look", {"n": n})


def test_hooks_that_edit_the_transcript_are_seen_over_http(server: ReplayServer) -> None:
    """A run of three requests whose ``transform_context`` edits an earlier tool result in place
    before each request, and whose ``convert_to_llm`` returns a new list each time: every
    request body carries the transcript as it is at that moment."""
    server.enqueue(
        Reply(chat_sse(look_call("c1", 1), finish="tool_calls")),
        Reply(chat_sse(look_call("c2", 2), finish="tool_calls")),
        Reply(chat_sse({"content": "done"})),
    )
    requests = 0

    def transform_context(messages: list[Any], signal: Any) -> list[Any]:
        nonlocal requests
        requests += 1
        for message in messages:
            if isinstance(message, ToolResultMessage) and message.tool_call_id == "c1":
                message.content[0].text = f"edited before request {requests}"
            if isinstance(message, AssistantMessage) and message.content:
                block = message.content[-1]
                if isinstance(block, ToolCall):
                    block.arguments["seen"] = requests
        return messages

    def look(tool_call_id: str, params: dict[str, Any], signal: Any, on_update: Any) -> Any:
        return AgentToolResult(content=[TextContent(text=f"looked {params['n']}")])

    agent = Agent(
        model=make_model("openai-completions", server.url),
        stream_fn=stream_simple,
        api_key=API_KEY,
        tools=[AgentTool("look", "Look.", {"type": "object"}, look)],
        transform_context=transform_context,
        convert_to_llm=lambda messages: [m for m in messages],
    )
    agent.prompt("Look twice.")

    bodies = [r.json for r in server.requests]
    assert len(bodies) == 3
    results = [[m["content"] for m in b["messages"] if m["role"] == "tool"] for b in bodies]
    assert results == [
        [],
        ["edited before request 2"],
        ["edited before request 3", "looked 2"],
    ]
    calls = [
        [
            json.loads(m["tool_calls"][0]["function"]["arguments"])
            for m in b["messages"]
            if m.get("tool_calls")
        ]
        for b in bodies
    ]
    assert calls[2] == [{"n": 1, "seen": 3}, {"n": 2, "seen": 3}]
    assert calls[1] == [{"n": 1, "seen": 2}]
