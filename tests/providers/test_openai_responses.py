"""OpenAI Responses over real HTTP: function calls, encrypted reasoning, text, request shape."""

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

from agentkit.providers import stream, stream_simple
from agentkit.types import (
    AssistantMessage,
    Context,
    SystemMessage,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

API = "openai-responses"
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
def test_function_call(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/openai-responses-function-call.sse", chunk)
    assert message.stop_reason == "tool_use"
    assert message.content == [
        ToolCall(
            id="call_kL0PCQV7M2WMoVX8V8OtYSAL|fc_67e554a1de488191af0831d35cbe082e0794405d35281ae2",
            name="get_capital",
            arguments={"country": "France"},
        )
    ]
    assert (message.usage.input, message.usage.output, message.usage.total_tokens) == (255, 16, 271)
    assert message.response_id == "resp_67e554a155508191900ee113293c4c830794405d35281ae2"


@pytest.mark.parametrize("chunk", CHUNKS)
def test_reasoning_then_function_call(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/openai-responses-reasoning-function-call.sse", chunk)
    assert message.stop_reason == "tool_use"
    thinking, call = message.content
    assert isinstance(thinking, ThinkingContent)
    item = json.loads(thinking.signature or "")
    assert item["type"] == "reasoning"
    assert item["id"] == "rs_0050471a34b36ae60068c97bac4dcc819595fd0f80d6b3c405"
    assert item["encrypted_content"].endswith("...TRIMMED")
    assert isinstance(call, ToolCall)
    assert call.name == "final_result" and call.arguments == {"result": 6666}
    assert call.id.startswith("call_CWXgs68YprAjp6t0371hiPOI|fc_")
    assert (message.usage.input, message.usage.output) == (53, 469)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_text(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/openai-responses-text.sse", chunk)
    assert message.stop_reason == "stop"
    assert message.content == [
        TextContent(
            text="2+2 = 4", text_signature="msg_0dbef2d9d14a548c00696d5e6fb1a08190941cffd38695ae38"
        )
    ]
    assert (message.usage.input, message.usage.output) == (20, 10)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_llamacpp_recording_without_output_index(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "local/llamacpp/responses-function-call.sse", chunk)
    assert message.stop_reason == "tool_use"
    call = message.content[0]
    assert isinstance(call, ToolCall)
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (67, 101, 17)


def test_aimock_text_then_function_call(server: ReplayServer) -> None:
    _, message = run(server, "local/aimock/responses-text-then-function-call.sse", 7)
    assert [b.type for b in message.content] == ["text", "tool_call"]
    assert message.content[0].text == "Let me check."  # type: ignore[union-attr]
    assert message.content[1].arguments == {"city": "Paris", "unit": "c"}  # type: ignore[union-attr]


def test_incomplete_response_is_length(server: ReplayServer) -> None:
    body = (
        b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
        b'"item":{"type":"message","id":"msg_1","content":[]}}\n\n'
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"msg_1","delta":"cut"}\n\n'
        b'event: response.incomplete\ndata: {"type":"response.incomplete","response":{"status":'
        b'"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":'
        b'{"input_tokens":5,"output_tokens":3}}}\n\n'
    )
    server.enqueue(Reply(body=body, chunk=11))
    events, message = collect(
        stream(make_model(API, server.url), Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    assert message.stop_reason == "length"
    assert message.content == [TextContent(text="cut")]


def test_failed_response_is_an_error(server: ReplayServer) -> None:
    body = (
        b'event: response.failed\ndata: {"type":"response.failed","response":{"status":"failed",'
        b'"error":{"code":"server_error","message":"The model crashed"}}}\n\n'
    )
    server.enqueue(Reply(body=body))
    _, message = collect(
        stream(make_model(API, server.url), Context(messages=[UserMessage(content="q")]), options())
    )
    assert message.stop_reason == "error"
    assert "The model crashed" in (message.error_message or "")


def test_request_body_echoes_reasoning_and_splits_ids(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/openai-responses-reasoning-function-call.sse")))
    server.enqueue(Reply(body=fixture_bytes("vendor/openai-responses-text.sse")))
    # the replay server is on 127.0.0.1, which by default is treated as a local server
    model = make_model(API, server.url, compat={"supports_store": True, "supports_include": True})
    tool = Tool(name="final_result", description="Report", parameters={"type": "object"})
    transcript: list[object] = [
        SystemMessage(content="Answer directly.", tools_added=[tool]),
        UserMessage(content="Compute"),
    ]
    first = stream_simple(model, Context(messages=transcript), options(reasoning="medium"))
    assistant = first.result()
    call = assistant.content[1]
    assert isinstance(call, ToolCall)
    transcript += [
        assistant,
        ToolResultMessage(
            tool_call_id=call.id, tool_name=call.name, content=[TextContent(text="ok")]
        ),
    ]
    collect(stream(model, Context(messages=transcript), options()))

    first_body = server.requests[0].json
    assert server.requests[0].path == "/v1/responses"
    assert server.requests[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert first_body["reasoning"] == {"effort": "medium", "summary": "auto"}
    assert first_body["include"] == ["reasoning.encrypted_content"]
    assert first_body["store"] is False
    assert first_body["instructions"] == "Answer directly."
    assert first_body["tools"] == [
        {
            "type": "function",
            "name": "final_result",
            "description": "Report",
            "parameters": {"type": "object"},
            "strict": False,
        }
    ]
    assert first_body["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Compute"}]}
    ]
    items = server.requests[1].json["input"]
    assert items[1]["type"] == "reasoning"
    assert items[1]["encrypted_content"].endswith("...TRIMMED")
    assert items[2] == {
        "type": "function_call",
        "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
        "name": "final_result",
        "arguments": '{"result": 6666}',
        "id": "fc_0050471a34b36ae60068c97bf19d9c819590eaf42c0edc1042",
    }
    assert items[3] == {
        "type": "function_call_output",
        "call_id": "call_CWXgs68YprAjp6t0371hiPOI",
        "output": "ok",
    }


def test_foreign_thinking_is_not_echoed_as_reasoning(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/openai-responses-text.sse")))
    foreign = AssistantMessage(
        api="anthropic-messages",
        provider="anthropic",
        model="claude",
        content=[
            ThinkingContent(thinking="Pondering.", signature="EvoC-anthropic-signature"),
            ToolCall(id="toolu_01ABC", name="lookup", arguments={}),
        ],
        stop_reason="tool_use",
    )
    ctx = Context(
        messages=[
            UserMessage(content="q"),
            foreign,
            ToolResultMessage(tool_call_id="toolu_01ABC", tool_name="lookup", content=[]),
        ]
    )
    collect(stream(make_model(API, server.url), ctx, options()))
    items = server.requests[0].json["input"]
    assert items[1]["content"][0]["text"] == "Pondering."  # as plain text, no signature
    assert items[2] == {
        "type": "function_call",
        "call_id": "toolu_01ABC",
        "name": "lookup",
        "arguments": "{}",
    }
    assert items[3]["call_id"] == "toolu_01ABC"


def test_reasoning_summary_parts_become_thinking(server: ReplayServer) -> None:
    def event(data: dict) -> bytes:  # type: ignore[type-arg]
        return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()

    body = b"".join(
        [
            event({"type": "response.created", "response": {"id": "resp_1"}}),
            event(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "reasoning", "id": "rs_1", "summary": []},
                }
            ),
            event(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": "rs_1",
                    "output_index": 0,
                }
            ),
            event(
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": "rs_1",
                    "output_index": 0,
                    "delta": "First.",
                }
            ),
            event(
                {
                    "type": "response.reasoning_summary_part.added",
                    "item_id": "rs_1",
                    "output_index": 0,
                }
            ),
            event(
                {
                    "type": "response.reasoning_summary_text.delta",
                    "item_id": "rs_1",
                    "output_index": 0,
                    "delta": "Second.",
                }
            ),
            event(
                {
                    "type": "response.output_item.done",
                    "output_index": 0,
                    "item": {
                        "type": "reasoning",
                        "id": "rs_1",
                        "summary": [
                            {"type": "summary_text", "text": "First."},
                            {"type": "summary_text", "text": "Second."},
                        ],
                        "encrypted_content": "ENC",
                    },
                }
            ),
            event(
                {
                    "type": "response.output_item.added",
                    "output_index": 1,
                    "item": {"type": "message", "id": "msg_1", "content": []},
                }
            ),
            event(
                {
                    "type": "response.output_text.delta",
                    "item_id": "msg_1",
                    "output_index": 1,
                    "delta": "Hi",
                }
            ),
            event(
                {
                    "type": "response.output_item.done",
                    "output_index": 1,
                    "item": {
                        "type": "message",
                        "id": "msg_1",
                        "content": [{"type": "output_text", "text": "Hi"}],
                    },
                }
            ),
            event(
                {
                    "type": "response.completed",
                    "response": {
                        "id": "resp_1",
                        "status": "completed",
                        "usage": {
                            "input_tokens": 9,
                            "output_tokens": 4,
                            "input_tokens_details": {"cached_tokens": 3},
                        },
                    },
                }
            ),
        ]
    )
    server.enqueue(Reply(body=body, chunk=13))
    events, message = collect(
        stream(make_model(API, server.url), Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    thinking, text = message.content
    assert isinstance(thinking, ThinkingContent)
    assert thinking.thinking == "First.\n\nSecond."
    assert json.loads(thinking.signature or "")["encrypted_content"] == "ENC"
    assert text == TextContent(text="Hi", text_signature="msg_1")
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (6, 3, 4)
