"""OpenAI Chat Completions over real HTTP: recorded vendor and local streams, request shape."""

from __future__ import annotations

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

from agentkit.events import TextDeltaEvent, ToolCallDeltaEvent
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

API = "openai-completions"
CHUNKS = [None, 7, 13]


def run(server: ReplayServer, name: str, chunk: int | None, **model_overrides: object):  # type: ignore[no-untyped-def]
    server.enqueue(Reply(body=fixture_bytes(name), chunk=chunk))
    model = make_model(API, server.url, **model_overrides)
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="hi")]), options())
    )
    check_protocol(events)
    return events, message


@pytest.mark.parametrize("chunk", CHUNKS)
def test_tool_call_with_usage(server: ReplayServer, chunk: int | None) -> None:
    events, message = run(server, "vendor/openai-chat-tool-call-usage.sse", chunk)
    assert message.stop_reason == "tool_use"
    assert message.content == [
        ToolCall(
            id="call_ZR5UUuTt3pf61kjwAJIYdVMj", name="get_capital", arguments={"country": "UK"}
        )
    ]
    deltas = [e.delta for e in events if isinstance(e, ToolCallDeltaEvent)]
    assert "".join(deltas) == '{"country":"UK"}'
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.total_tokens) == (53, 15, 0, 68)
    # cost from the test model's prices: $1 / $2 per million input / output tokens
    assert usage.cost.input == pytest.approx(53e-6)
    assert usage.cost.output == pytest.approx(30e-6)
    assert usage.cost.total == pytest.approx(83e-6)
    assert message.response_id == "chatcmpl-Dx0XpqH8w09uBXwq1zFGYdETjtnEl"
    assert (message.api, message.provider, message.model) == (API, "openai", "gpt-4o-mini")


@pytest.mark.parametrize("chunk", CHUNKS)
def test_text_with_usage(server: ReplayServer, chunk: int | None) -> None:
    events, message = run(server, "vendor/openai-chat-text-usage.sse", chunk)
    assert message.stop_reason == "stop"
    assert message.content == [TextContent(text="The capital of the UK is London.")]
    assert [e.delta for e in events if isinstance(e, TextDeltaEvent)][:2] == ["The", " capital"]
    assert (message.usage.input, message.usage.output, message.usage.total_tokens) == (78, 9, 87)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_llamacpp_recording(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "local/llamacpp/chat-tool-call-usage.sse", chunk)
    assert message.stop_reason == "tool_use"
    call = message.content[0]
    assert isinstance(call, ToolCall)
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris", "unit": "c"})
    # prompt_tokens 183 of which 182 cached
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (1, 182, 23)


def test_aimock_text_then_tool_call(server: ReplayServer) -> None:
    _, message = run(server, "local/aimock/chat-text-then-tool-call-usage.sse", 13)
    assert [b.type for b in message.content] == ["text", "tool_call"]
    assert message.content[0] == TextContent(text="Let me check.")
    assert message.content[1].arguments == {"city": "Paris", "unit": "c"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"


def test_reasoning_field_becomes_thinking(server: ReplayServer) -> None:
    body = (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Let me '
        b'think"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"reasoning_content":" hard."}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"42"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    server.enqueue(Reply(body=body, chunk=5))
    model = make_model(API, server.url, provider="deepseek", id="deepseek-reasoner")
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    assert message.content[0] == ThinkingContent(
        thinking="Let me think hard.", signature="reasoning_content"
    )
    assert message.content[1] == TextContent(text="42")
    assert message.stop_reason == "length"


def test_request_body_shape(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/openai-chat-text-usage.sse")))
    model = make_model(API, server.url, reasoning=True)
    tool = Tool(
        name="get_capital", description="Capital of a country", parameters={"type": "object"}
    )
    transcript = [
        SystemMessage(content="Be brief.", tools_added=[tool]),
        UserMessage(
            content=[TextContent(text="Look"), ImageContent(data="aGk=", mime_type="image/png")]
        ),
        AssistantMessage(
            api=API,
            provider="openai",
            model="gpt-4o-mini",
            stop_reason="tool_use",
            content=[
                TextContent(text="Checking."),
                ToolCall(id="call_1", name="get_capital", arguments={"country": "UK"}),
            ],
        ),
        ToolResultMessage(
            tool_call_id="call_1",
            tool_name="get_capital",
            content=[TextContent(text="London"), ImageContent(data="aGk=", mime_type="image/png")],
        ),
    ]
    _, message = collect(
        stream(model, Context(messages=transcript), options(max_tokens=100, temperature=0.5))
    )
    assert message.stop_reason == "stop"
    request = server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    body = request.json
    assert body["model"] == "gpt-4o-mini"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 100
    assert body["temperature"] == 0.5
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_capital",
                "description": "Capital of a country",
                "parameters": {"type": "object"},
            },
        }
    ]
    messages = body["messages"]
    assert messages[0] == {"role": "developer", "content": "Be brief."}
    assert messages[1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
        ],
    }
    assert messages[2] == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_capital", "arguments": '{"country": "UK"}'},
            }
        ],
    }
    assert messages[3] == {"role": "tool", "tool_call_id": "call_1", "content": "London"}
    assert messages[4]["role"] == "user"  # the tool result's image follows as a user message
    assert messages[4]["content"][1]["image_url"]["url"] == "data:image/png;base64,aGk="


def test_compat_settings_change_the_request(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("local/llamacpp/chat-tool-call-usage.sse")))
    model = make_model(
        API,
        server.url,
        provider="local",
        reasoning=True,
        compat={
            "max_tokens_field": "max_tokens",
            "supports_developer_role": False,
            "supports_usage_in_streaming": False,
        },
    )
    ctx = Context(messages=[SystemMessage(content="sys"), UserMessage(content="hi")])
    collect(stream(model, ctx, {"max_tokens": 50}))  # local URL: no key needed
    body = server.requests[0].json
    assert body["max_tokens"] == 50 and "max_completion_tokens" not in body
    assert "stream_options" not in body
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert "authorization" not in server.requests[0].headers


def test_stream_simple_maps_reasoning_to_effort(server: ReplayServer) -> None:
    server.enqueue(
        Reply(body=fixture_bytes("vendor/openai-chat-text-usage.sse")),
        Reply(body=fixture_bytes("vendor/openai-chat-text-usage.sse")),
    )
    model = make_model(API, server.url, reasoning=True)
    ctx = Context(messages=[UserMessage(content="hi")])
    collect(stream_simple(model, ctx, options(reasoning="xhigh")))
    assert server.requests[0].json["reasoning_effort"] == "high"
    plain = make_model(API, server.url, reasoning=False)
    collect(stream_simple(plain, ctx, options(reasoning="high")))
    assert "reasoning_effort" not in server.requests[1].json


def test_huge_tool_argument_stays_linear_through_the_parser() -> None:
    import time

    from agentkit.event_stream import AssistantMessageEventStream
    from agentkit.providers.builder import MessageBuilder
    from agentkit.providers.openai_completions import ChatCompletionsParser
    from agentkit.types import Model

    model = Model(id="m", api=API, provider="openai", base_url="http://127.0.0.1:1/v1")

    def run_once(size: int) -> tuple[float, AssistantMessage, int]:
        out = AssistantMessageEventStream()
        parser = ChatCompletionsParser(MessageBuilder(model, out))
        text = '{"data": "' + "y" * size + '"}'
        start = time.perf_counter()
        parser.handle(
            "message",
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "c1",
                                    "function": {"name": "save", "arguments": ""},
                                }
                            ]
                        },
                    }
                ]
            },
        )
        for i in range(0, len(text), 16):
            parser.handle(
                "message",
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {"index": 0, "function": {"arguments": text[i : i + 16]}}
                                ]
                            },
                        }
                    ]
                },
            )
        parser.handle(
            "message", {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
        )
        parser.handle("done", None)
        parser.finish()
        elapsed = time.perf_counter() - start
        deltas = sum(isinstance(e, ToolCallDeltaEvent) for e in out)
        return elapsed, out.result(), deltas

    run_once(50_000)
    small, _, _ = min(run_once(250_000) for _ in range(2))
    large, message, deltas = min(run_once(1_000_000) for _ in range(2))
    assert deltas == 1  # coalesced: no network read (flush) between the 16-byte pieces
    assert len(message.content[0].arguments["data"]) == 1_000_000  # type: ignore[union-attr]
    assert large / small < 7, f"{small:.3f}s for 250 kB, {large:.3f}s for 1 MB"


def test_parallel_tool_calls_by_index(server: ReplayServer) -> None:
    def chunk(delta: dict, finish: str | None = None) -> bytes:  # type: ignore[type-arg]
        import json

        data = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    def call(index: int, args: str, **first: str) -> dict:  # type: ignore[type-arg]
        function = {"arguments": args}
        if "name" in first:
            function["name"] = first["name"]
        entry: dict = {"index": index, "function": function}  # type: ignore[type-arg]
        if "id" in first:
            entry["id"] = first["id"]
        return {"tool_calls": [entry]}

    body = b"".join(
        [
            chunk(call(0, "", id="call_a", name="first")),
            chunk(call(0, '{"x": 1}')),
            chunk(call(1, '{"y":', id="call_b", name="second")),
            chunk(call(1, " 2}")),
            chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )
    server.enqueue(Reply(body=body, chunk=7))
    events, message = collect(
        stream(make_model(API, server.url), Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    assert message.content == [
        ToolCall(id="call_a", name="first", arguments={"x": 1}),
        ToolCall(id="call_b", name="second", arguments={"y": 2}),
    ]
    assert message.stop_reason == "tool_use"
