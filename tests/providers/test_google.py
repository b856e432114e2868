"""Google Gemini over real HTTP: SSE and JSON-array streams, thought signatures, usage."""

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

API = "google-generative-ai"
CHUNKS = [None, 7, 13]


def run(server: ReplayServer, name: str, chunk: int | None, **overrides: object):  # type: ignore[no-untyped-def]
    content_type = "application/json" if name.endswith(".json") else "text/event-stream"
    server.enqueue(Reply(body=fixture_bytes(name), chunk=chunk, content_type=content_type))
    model = make_model(API, server.url, **overrides)
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="hi")]), options())
    )
    check_protocol(events)
    return events, message


@pytest.mark.parametrize("chunk", CHUNKS)
def test_sse_function_call_with_thought_signature(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/gemini-sse-function-call-thought-signature.sse", chunk)
    assert message.stop_reason == "tool_use"  # STOP with a function call
    (call,) = message.content
    assert isinstance(call, ToolCall)
    assert call.name == "get_country" and call.arguments == {}
    assert call.id.startswith("get_country_") and len(call.id) > len("get_country_")
    assert call.thought_signature == "EpwICpkIAXLI2nxlU6gsWZaZHRYkX1orzuM8vSUFwaAt1JRx...TRIMMED"
    # output counts candidates (10) plus thoughts (202)
    assert (message.usage.input, message.usage.output, message.usage.total_tokens) == (29, 212, 241)
    assert server.requests[0].query == {"alt": ["sse"]}


@pytest.mark.parametrize("chunk", CHUNKS)
def test_json_array_function_call(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(
        server, "vendor/gemini-json-array-function-call.json", chunk, compat={"sse": False}
    )
    assert server.requests[0].query == {}
    assert server.requests[0].path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert message.stop_reason == "tool_use"
    (call,) = message.content
    assert isinstance(call, ToolCall)
    assert (call.name, call.arguments) == ("multiply", {"y": 3, "x": 5})
    assert (call.thought_signature or "").startswith("Et0BCtoBAXLI2nwMB4mo")
    assert (message.usage.input, message.usage.output) == (60, 48)
    assert message.response_id == "6XJFadi3PJOx-sAPgJ3S6Qs"


@pytest.mark.parametrize("chunk", CHUNKS)
def test_thinking_then_text_with_signature(server: ReplayServer, chunk: int | None) -> None:
    _, message = run(server, "vendor/gemini-sse-thinking-text.sse", chunk)
    assert message.stop_reason == "stop"
    thinking, text = message.content
    assert isinstance(thinking, ThinkingContent) and isinstance(text, TextContent)
    assert thinking.thinking.startswith("**Clarifying User Goals**")
    assert "**Developing a Safety Protocol**" in thinking.thinking
    assert text.text.startswith("This is a great question!")
    assert text.text.endswith("Always assume a driver might not see you.")
    assert text.text_signature == "CiIB0e2Kb6Syj1a961EfbWv4W5C8RgAA/hGleV9VYJtnJFh4...TRIMMED"
    # cumulative usage: the last chunk's counts, output = 469 + 787
    assert (message.usage.input, message.usage.output, message.usage.total_tokens) == (
        34,
        1256,
        1290,
    )


def test_aimock_sse_without_alt_and_function_call_finish(server: ReplayServer) -> None:
    _, message = run(
        server, "local/aimock/gemini-text-then-function-call.sse", 5, compat={"sse": False}
    )
    assert [b.type for b in message.content] == ["text", "tool_call"]
    assert message.stop_reason == "tool_use"


def test_safety_finish_is_an_error(server: ReplayServer) -> None:
    body = (
        b'data: {"candidates":[{"content":{"parts":[{"text":"Well"}]},"finishReason":"SAFETY"}]}'
        b"\r\n\r\n"
    )
    server.enqueue(Reply(body=body))
    _, message = collect(
        stream(make_model(API, server.url), Context(messages=[UserMessage(content="q")]), options())
    )
    assert message.stop_reason == "error"
    assert "SAFETY" in (message.error_message or "")
    assert message.content == [TextContent(text="Well")]


def test_request_body_shape(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/gemini-sse-thinking-text.sse")))
    model = make_model(API, server.url)
    tool = Tool(name="get_country", description="Country", parameters={"type": "object"})
    transcript = [
        SystemMessage(content="Be brief.", tools_added=[tool]),
        UserMessage(
            content=[TextContent(text="Look"), ImageContent(data="aGk=", mime_type="image/png")]
        ),
        AssistantMessage(
            api=API,
            provider="google",
            model="gemini-2.5-pro",
            stop_reason="tool_use",
            content=[
                ThinkingContent(thinking="Thought.", signature=None),
                TextContent(text="Calling.", text_signature="TSIG"),
                ToolCall(
                    id="get_country_1", name="get_country", arguments={}, thought_signature="SIG"
                ),
            ],
        ),
        ToolResultMessage(
            tool_call_id="get_country_1",
            tool_name="get_country",
            content=[TextContent(text="France")],
        ),
    ]
    collect(
        stream_simple(
            model, Context(messages=transcript), options(reasoning="medium", max_tokens=99)
        )
    )
    request = server.requests[0]
    assert request.path == "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    assert request.headers["x-goog-api-key"] == API_KEY
    assert "key" not in request.query
    body = request.json
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_country",
                    "description": "Country",
                    "parametersJsonSchema": {"type": "object"},
                }
            ]
        }
    ]
    assert body["generationConfig"] == {
        "maxOutputTokens": 99,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8192},
    }
    assert body["contents"] == [
        {
            "role": "user",
            "parts": [{"text": "Look"}, {"inlineData": {"mimeType": "image/png", "data": "aGk="}}],
        },
        {
            "role": "model",
            "parts": [
                {"text": "Thought.", "thought": True},
                {"text": "Calling.", "thoughtSignature": "TSIG"},
                {"functionCall": {"name": "get_country", "args": {}}, "thoughtSignature": "SIG"},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_country", "response": {"output": "France"}}}
            ],
        },
    ]


def test_signatures_are_not_sent_to_gemini_from_other_providers(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/gemini-sse-thinking-text.sse")))
    foreign = AssistantMessage(
        api="anthropic-messages",
        provider="anthropic",
        model="claude",
        stop_reason="tool_use",
        content=[
            ThinkingContent(thinking="Hidden", signature="X", redacted=True),
            ToolCall(id="toolu_1", name="f", arguments={"a": 1}, thought_signature="NOPE"),
        ],
    )
    ctx = Context(
        messages=[
            UserMessage(content="q"),
            foreign,
            ToolResultMessage(tool_call_id="toolu_1", tool_name="f", content=[], is_error=True),
        ]
    )
    collect(stream(make_model(API, server.url), ctx, options()))
    contents = server.requests[0].json["contents"]
    assert contents[1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "f", "args": {"a": 1}}}],
    }
    assert contents[2]["parts"][0]["functionResponse"]["response"] == {"error": "(no output)"}


def test_gemini_3_uses_thinking_level(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes("vendor/gemini-sse-thinking-text.sse")))
    model = make_model(API, server.url, id="gemini-3-pro-preview")
    collect(
        stream_simple(
            model, Context(messages=[UserMessage(content="q")]), options(reasoning="high")
        )
    )
    config = server.requests[0].json["generationConfig"]
    assert config["thinkingConfig"] == {"includeThoughts": True, "thinkingLevel": "high"}


def test_gzip_json_array_as_recorded(server: ReplayServer) -> None:
    import gzip

    body = gzip.compress(fixture_bytes("vendor/gemini-json-array-function-call.json"))
    server.enqueue(
        Reply(
            body=body,
            chunk=7,
            content_type="application/json",
            headers={"Content-Encoding": "gzip"},
        )
    )
    model = make_model(API, server.url, compat={"sse": False})
    events, message = collect(
        stream(model, Context(messages=[UserMessage(content="q")]), options())
    )
    check_protocol(events)
    assert message.stop_reason == "tool_use"
    assert message.content[0].arguments == {"y": 3, "x": 5}  # type: ignore[union-attr]
