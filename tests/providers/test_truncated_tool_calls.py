"""A tool call whose streamed arguments end inside their JSON never runs, over real HTTP.

The vendor's finish reason says the calls are ready (``tool_calls``, ``tool_use``,
``completed``), but the arguments' text stops in the middle (``{"path": "/srv/data/cache/tmp``
with no closing quote). The partial-JSON parser would complete it to a value the model never
meant; the message ends as truncated (``length``) instead, so the call gets the same error result
as a call of a response cut at the token limit, and the model reads it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    call_delta,
    chat_sse,
    fixture_bytes,
    make_model,
)

from agentkit import Agent, ToolResultMessage
from agentkit.providers import complete, stream_simple
from agentkit.providers.json_stream import ToolArgsBuffer, parse_json_arguments
from agentkit.types import Context, UserMessage
from tests.support import make_tool

CUT = '{"path": "/srv/data/cache/tmp'
WHOLE = '{"path": "/srv/data/cache/tmp/old-build"}'


def sse(*events: dict[str, Any]) -> bytes:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def chat_call(arguments: str) -> bytes:
    return chat_sse(call_delta("call_1", "delete", arguments), finish="tool_calls")


def anthropic_call(arguments: str) -> bytes:
    return sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [],
                "stop_reason": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "delete", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": arguments},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 20},
        },
        {"type": "message_stop"},
    )


def responses_call(arguments: str, *, in_done_only: bool = False) -> bytes:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "delete"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
    ]
    if not in_done_only:
        events.append(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_1",
                "output_index": 0,
                "delta": arguments,
            }
        )
    events += [
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {**item, "arguments": arguments, "status": "completed"},
        },
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "status": "completed",
                "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
            },
        },
    ]
    return sse(*events)


CALLS = {
    "openai-completions": chat_call,
    "anthropic-messages": anthropic_call,
    "openai-responses": responses_call,
    "openai-responses, arguments in the done item only": lambda a: responses_call(
        a, in_done_only=True
    ),
}
ANSWERS = {
    "openai-completions": "vendor/openai-chat-text-usage.sse",
    "anthropic-messages": "vendor/anthropic-thinking-text.sse",
    "openai-responses": "vendor/openai-responses-text.sse",
}


def api_of(case: str) -> str:
    return case.split(",")[0]


@pytest.mark.parametrize("case", sorted(CALLS))
def test_a_call_cut_inside_its_arguments_never_runs(server: ReplayServer, case: str) -> None:
    api = api_of(case)
    server.enqueue(Reply(CALLS[case](CUT), chunk=9), Reply(fixture_bytes(ANSWERS[api])))
    delete = make_tool("delete", parameters={"type": "object", "properties": {"path": {}}})
    agent = Agent(
        model=make_model(api, server.url), stream_fn=stream_simple, api_key=API_KEY, tools=[delete]
    )
    new = agent.prompt("Clean the cache.")

    assert delete.calls == []  # nothing was deleted, on any path
    assert [m.role for m in new] == ["user", "assistant", "tool_result", "assistant"]
    call_message, result = new[1], new[2]
    assert call_message.stop_reason == "length"  # a truncated response, whatever the vendor said
    assert isinstance(result, ToolResultMessage) and result.is_error
    assert "not executed" in result.content[0].text  # type: ignore[union-attr]
    assert new[3].stop_reason == "stop"  # the model read the error and answered
    assert "not executed" in json.dumps(server.requests[1].json)


@pytest.mark.parametrize("case", sorted(CALLS))
def test_a_whole_call_still_runs(server: ReplayServer, case: str) -> None:
    api = api_of(case)
    server.enqueue(Reply(CALLS[case](WHOLE), chunk=9))
    message = complete(
        make_model(api, server.url),
        Context(messages=[UserMessage(content="Clean the cache.")]),
        {"api_key": API_KEY},
    )
    assert message.stop_reason == "tool_use"
    assert message.content[-1].arguments == {"path": "/srv/data/cache/tmp/old-build"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("", False),
        ("{}", False),
        (WHOLE, False),
        ('{"a": "line\nbreak"}', False),  # a raw newline is repaired, not completed
        (CUT, True),
        ('{"a": 1', True),
        ('{"a": [1, 2', True),
        ('{"a": tr', True),
    ],
)
def test_cut_off_arguments_are_told_apart_from_complete_ones(text: str, cut: bool) -> None:
    assert parse_json_arguments(text)[1] is cut
    buffer = ToolArgsBuffer()
    for piece in (text[:3], text[3:]):
        buffer.append(piece)
        buffer.partial()  # the live parse has seen all the text: final() must still know
    buffer.final()
    assert buffer.cut_off is cut
