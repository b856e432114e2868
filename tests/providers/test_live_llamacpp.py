"""End to end against the embedded llama.cpp server (``agentkit.local``), when it is installed.

Asserts protocol facts only (a call to the right tool with the right argument names, then an
answer), never wording. Skipped when the ``local`` extra or its weights are missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replay_server import check_protocol, collect, http_threads

from agentkit import providers
from agentkit.providers import stream
from agentkit.types import (
    Context,
    SystemMessage,
    TextContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from tests.support import running_local_model

pytestmark = pytest.mark.embedded

WEATHER = Tool(
    name="get_weather",
    description="Get the current weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["city"],
    },
)


@pytest.fixture(scope="module")
def local_server() -> Iterator[Any]:
    local = pytest.importorskip("agentkit.local")
    here = Path(providers.__file__).resolve().parent.parent
    if Path(local.__file__).resolve().parent.parent != here:
        pytest.skip("agentkit.local comes from another checkout than these providers")
    with running_local_model() as server:
        yield server


@pytest.mark.parametrize("api", ["openai-completions", "openai-responses", "anthropic-messages"])
def test_tool_call_round_trip(local_server: Any, api: str) -> None:
    model = local_server.model_for(api)
    messages: list[Any] = [
        SystemMessage(content="You are a helpful assistant.", tools_added=[WEATHER]),
        UserMessage(content="What is the weather in Paris right now?"),
    ]
    events, first = collect(stream(model, Context(messages=messages), {"max_tokens": 128}), 120)
    check_protocol(events)
    assert first.stop_reason == "tool_use", first.error_message
    calls = [b for b in first.content if isinstance(b, ToolCall)]
    assert calls and calls[0].name == "get_weather"
    assert "city" in calls[0].arguments
    assert first.usage.output > 0
    messages += [first] + [
        ToolResultMessage(
            tool_call_id=c.id, tool_name=c.name, content=[TextContent(text="18 C and cloudy")]
        )
        for c in calls
    ]
    events, second = collect(stream(model, Context(messages=messages), {"max_tokens": 128}), 120)
    check_protocol(events)
    assert second.stop_reason in ("stop", "length"), second.error_message
    assert any(isinstance(b, TextContent) and b.text.strip() for b in second.content)
    assert not http_threads()
