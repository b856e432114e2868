"""Anthropic Messages over real HTTP: thinking and signatures, tools, server tools, usage."""

from __future__ import annotations

import json

import pytest
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    check_protocol,
    collect,
    fixture_bytes,
    make_model,
    options,
)

from agentkit.events import ToolCallDeltaEvent
from agentkit.providers import stream, stream_simple
from agentkit.types import (
    AssistantMessage,
    Context,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

API = "anthropic-messages"
CHUNKS = [None, 7, 13]


def run(server: ReplayServer, name: str, chunk: int | None):  # type: ignore[no-untyped-def]
    server.enqueue(Reply(body=fixture_bytes(name), chunk=chunk))
    model = make_model(API, server.url)
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="hi")]), options())
    )
    check_protocol(events)
    return events, message


@pytest.mark.parametrize("chunk", CHUNKS)
def test_thinking_then_text(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/anthropic-thinking-text.sse", chunk)
    assert message.stop_reason == "stop"
    thinking, text = message.content
    assert isinstance(thinking, ThinkingContent)
    assert thinking.thinking.startswith("The user wants two names for a pet pelican,")
    assert thinking.thinking.endswith("I'll pick two good ones and keep it very short.")
    assert (thinking.signature or "").startswith("EvoCCkYICxgCKkCY593DZILKPT3")
    assert text == TextContent(text="- Captain\n- Scoop")
    # message_start said output_tokens 4 or so; the final message_delta (84) wins
    assert (message.usage.input, message.usage.output, message.usage.total_tokens) == (46, 84, 130)
    assert message.response_id == "msg_01RTjjePNDCQNgHXg3KeDPfv"


@pytest.mark.parametrize("chunk", CHUNKS)
def test_thinking_then_tool_use(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/anthropic-thinking-tool-use.sse", chunk)
    assert message.stop_reason == "tool_use"
    thinking, call = message.content
    assert isinstance(thinking, ThinkingContent) and (thinking.signature or "").startswith(
        "EoQDCm0I"
    )
    assert call == ToolCall(id="toolu_01825dXWLSoJwCst1qTsiWdb", name="fixed_version", arguments={})
    assert (message.usage.input, message.usage.output) == (598, 92)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_parallel_tool_use(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/anthropic-parallel-tool-use.sse", chunk)
    assert message.stop_reason == "tool_use"
    assert [(c.id, c.arguments) for c in message.content] == [  # type: ignore[union-attr]
        ("toolu_01LtHJmixrs9NcWQkK8hu8hj", {}),
        ("toolu_01N8a4jWyf116qKTMqKKmjyt", {}),
    ]


@pytest.mark.parametrize("chunk", CHUNKS)
def test_client_tool_json_args(server: ReplayServer, chunk: int | None) -> None:
    events, message = run(server, "vendor/anthropic-client-tool-json-args.reframed.sse", chunk)
    call = message.content[0]
    assert isinstance(call, ToolCall)
    assert call.arguments == {
        "elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]
    }
    # two non-empty vendor deltas (empty ones skipped), coalesced per network read
    assert 1 <= sum(isinstance(e, ToolCallDeltaEvent) for e in events) <= 2


@pytest.mark.parametrize("chunk", CHUNKS)
def test_server_tool_use_is_not_a_tool_call(server: ReplayServer, chunk: int | None) -> None:
    events, message = run(server, "vendor/anthropic-server-tool-split-json.sse", chunk)
    assert message.stop_reason == "stop"
    assert message.content == [
        TextContent(text="The result of **2 + 2 = 4**, as calculated by Python!")
    ]
    assert all(getattr(e, "content_index", 0) == 0 for e in events)
    assert (message.usage.input, message.usage.output) == (4627, 91)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_llamacpp_recording_without_input_key(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "local/llamacpp/messages-tool-use.sse", chunk)
    assert message.content == [
        ToolCall(
            id="XIiUdIgSgowH0CSccHBSXaxcIgAQEAdy", name="get_weather", arguments={"city": "Paris"}
        )
    ]
    # message_delta carries only output_tokens: the start's input counts stay
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (1, 167, 17)


def test_aimock_text_then_tool_use(server: ReplayServer) -> None:
    _, message = run(server, "local/aimock/messages-text-then-tool-use.sse", 7)
    assert [b.type for b in message.content] == ["text", "tool_call"]


def test_redacted_thinking_and_max_tokens(server: ReplayServer) -> None:
    body = (
        b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_1",'
        b'"usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":5,'
        b'"cache_creation_input_tokens":7}}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"redacted_thinking","data":"OPAQUE"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"text","text":""}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        b'"delta":{"type":"text_delta","text":"Trunc"}}\n\n'
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":1}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        b'"max_tokens"},"usage":{"output_tokens":20}}\n\n'
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    server.enqueue(Reply(body=body, chunk=9))
    model = make_model(API, server.url)
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    assert message.stop_reason == "length"
    assert message.content[0] == ThinkingContent(
        thinking="[Reasoning redacted]", signature="OPAQUE", redacted=True
    )
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write) == (10, 20, 5, 7)
    assert usage.total_tokens == 42
    # prices per million: input 1, output 2, cache read 0.5, cache write 4
    assert usage.cost.total == pytest.approx((10 * 1 + 20 * 2 + 5 * 0.5 + 7 * 4) / 1e6)


def test_request_body_shape(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/anthropic-thinking-text.sse")))
    model = make_model(API, server.url, max_tokens=64000)
    tool = Tool(name="fixed_version", description="Version", parameters={"type": "object"})
    transcript = [
        SystemMessage(content="Be brief.", tools_added=[tool]),
        UserMessage(
            content=[TextContent(text="Look"), ImageContent(data="aGk=", mime_type="image/png")]
        ),
        AssistantMessage(
            api=API,
            provider="anthropic",
            model="claude-sonnet-4-5",
            stop_reason="tool_use",
            content=[
                ThinkingContent(thinking="Hmm.", signature="SIG"),
                ThinkingContent(thinking="[Reasoning redacted]", signature="DATA", redacted=True),
                TextContent(text=""),
                ToolCall(id="call_abc|fc_def", name="fixed_version", arguments={}),
            ],
        ),
        ToolResultMessage(
            tool_call_id="call_abc|fc_def",
            tool_name="fixed_version",
            content=[TextContent(text="1.2.3"), ImageContent(data="aGk=", mime_type="image/png")],
            is_error=False,
        ),
        UserMessage(content="And?"),
    ]
    collect(stream_simple(model, Context(messages=transcript), options(reasoning="low")))
    request = server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    body = request.json
    cache = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Be brief.", "cache_control": cache}]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 64000
    assert body["stream"] is True
    assert body["tools"] == [
        {"name": "fixed_version", "description": "Version", "input_schema": {"type": "object"}}
    ]
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "aGk="},
    }
    assert body["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "Look"}, image],
    }
    assistant = body["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][0] == {"type": "thinking", "thinking": "Hmm.", "signature": "SIG"}
    assert assistant["content"][1] == {"type": "redacted_thinking", "data": "DATA"}
    call_id = assistant["content"][2]["id"]
    assert assistant["content"][2] == {
        "type": "tool_use",
        "id": call_id,
        "name": "fixed_version",
        "input": {},
    }
    assert call_id == "call_abc"  # the Responses item part is dropped
    # the tool result and the next user text share one user message (roles alternate)
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": [{"type": "text", "text": "1.2.3"}, image],
            },
            {"type": "text", "text": "And?", "cache_control": cache},
        ],
    }


def test_thinking_from_another_provider_becomes_text(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/anthropic-thinking-text.sse")))
    foreign = AssistantMessage(
        api="openai-responses",
        provider="openai",
        model="gpt-5",
        stop_reason="tool_use",
        content=[
            ThinkingContent(thinking="Reasoned.", signature='{"type": "reasoning"}'),
            ThinkingContent(thinking="", signature='{"type": "reasoning"}'),
            ToolCall(id="call_X.Y:Z|" + "f" * 80, name="t", arguments={"a": 1}),
        ],
    )
    ctx = Context(
        messages=[
            UserMessage(content="q"),
            foreign,
            ToolResultMessage(tool_call_id=foreign.content[2].id, tool_name="t", content=[]),  # type: ignore[union-attr]
        ]
    )
    collect(stream(make_model(API, server.url), ctx, options()))
    assistant = server.requests[0].json["messages"][1]["content"]
    assert assistant[0] == {"type": "text", "text": "Reasoned."}
    tool_use = assistant[1]
    import re

    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", tool_use["id"])
    result = server.requests[0].json["messages"][2]["content"][0]
    assert result["tool_use_id"] == tool_use["id"]


def test_prompt_cache_retention(server: ReplayServer) -> None:
    server.enqueue(
        Reply(body=fixture_bytes("vendor/anthropic-thinking-text.sse")),
        Reply(body=fixture_bytes("vendor/anthropic-thinking-text.sse")),
    )
    ctx = Context(messages=[SystemMessage(content="S"), UserMessage(content="q")])
    collect(stream(make_model(API, server.url), ctx, options(anthropic={"cache_retention": "long"})))
    collect(stream(make_model(API, server.url), ctx, options(anthropic={"cache_retention": "none"})))
    long_body, no_cache = server.requests[0].json, server.requests[1].json
    assert long_body["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert long_body["messages"][0]["content"][0]["cache_control"] == {
        "type": "ephemeral",
        "ttl": "1h",
    }
    assert "cache_control" not in json.dumps(no_cache)
