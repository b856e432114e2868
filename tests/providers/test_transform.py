"""Preparing transcripts across providers: ids, thinking, orphans, failed turns, images."""

from __future__ import annotations

import re

from agentkit.providers.anthropic import normalize_tool_call_id as anthropic_id
from agentkit.providers.openai_completions import normalize_tool_call_id as chat_id
from agentkit.providers.openai_responses import normalize_tool_call_id as responses_id
from agentkit.providers.transform import IMAGE_OMITTED, NO_RESULT, prepare_context, safe_id
from agentkit.types import (
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    SystemMessage,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

MODEL = Model(
    id="m", api="anthropic-messages", provider="anthropic", base_url="http://x", input=["text"]
)


def test_id_normalisation_per_api() -> None:
    long_id = "call_" + "x" * 100 + "|fc_" + "y" * 100
    for normalize, limit in ((anthropic_id, 64), (chat_id, 40)):
        out = normalize(long_id)
        assert re.fullmatch(r"[a-zA-Z0-9_-]+", out) and len(out) <= limit
        assert normalize(long_id) == out  # stable
    assert anthropic_id("toolu_01ABC") == "toolu_01ABC"
    assert anthropic_id("call_1|fc_2") == "call_1"
    assert chat_id("get_weather_1a2b") == "get_weather_1a2b"
    assert responses_id("call_1|fc_2") == "call_1|fc_2"
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", responses_id("weird id/with:chars"))
    # ids differing only in replaced characters stay distinct
    assert safe_id("a.b", 64) != safe_id("a:b", 64)


def test_transcript_preparation() -> None:
    tool = Tool(name="t")
    messages = [
        SystemMessage(content="Base", tools_added=[tool]),
        UserMessage(
            content=[TextContent(text="see"), ImageContent(data="x", mime_type="image/png")]
        ),
        AssistantMessage(
            api="openai-responses",
            provider="openai",
            model="g",
            stop_reason="error",
            content=[TextContent(text="failed")],
        ),
        AssistantMessage(
            api="openai-responses",
            provider="openai",
            model="g",
            stop_reason="tool_use",
            content=[
                ThinkingContent(thinking="thought", signature="{}"),
                ThinkingContent(thinking="secret", signature="s", redacted=True),
                ToolCall(id="call.1|fc_1", name="t", arguments={}),
                ToolCall(id="call.2|fc_2", name="t", arguments={}),
            ],
        ),
        ToolResultMessage(
            tool_call_id="call.1|fc_1", tool_name="t", content=[TextContent(text="r1")]
        ),
        ToolResultMessage(tool_call_id="unknown", tool_name="t", content=[]),
        SystemMessage(content="More"),
        {"role": "user", "content": "dict message"},
        {"role": "notification", "content": "app-only"},
    ]
    prepared = prepare_context(MODEL, Context(messages=messages), anthropic_id)
    assert prepared.system_prompt == "Base\n\nMore"
    assert [t.name for t in prepared.tools] == ["t"]
    roles = [m.role for m in prepared.messages]
    assert roles == ["user", "assistant", "tool_result", "tool_result", "user"]
    user = prepared.messages[0]
    assert isinstance(user, UserMessage) and user.content[1] == TextContent(text=IMAGE_OMITTED)  # type: ignore[index]
    assistant = prepared.messages[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content[0] == TextContent(text="thought")  # foreign thinking: plain text
    ids = [b.id for b in assistant.content if isinstance(b, ToolCall)]
    assert ids == [anthropic_id("call.1|fc_1"), anthropic_id("call.2|fc_2")]
    first, second = prepared.messages[2], prepared.messages[3]
    assert isinstance(first, ToolResultMessage) and first.tool_call_id == ids[0]
    assert isinstance(second, ToolResultMessage) and second.tool_call_id == ids[1]
    assert second.is_error and second.content == [TextContent(text=NO_RESULT)]
    # the caller's messages are not modified
    original = messages[3]
    assert isinstance(original, AssistantMessage) and original.content[2].id == "call.1|fc_1"  # type: ignore[union-attr]


def test_explicit_prompt_and_tools_win() -> None:
    ctx = Context(
        messages=[
            SystemMessage(content="replayed", tools_added=[Tool(name="a")]),
            UserMessage(content="q"),
        ],
        system_prompt="explicit",
        tools=[Tool(name="b")],
    )
    prepared = prepare_context(MODEL, ctx)
    assert prepared.system_prompt == "explicit"
    assert [t.name for t in prepared.tools] == ["b"]
