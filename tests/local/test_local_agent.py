"""End to end: a whole Agent tool loop on the real embedded model, through each wire API the
embedded llama.cpp server speaks. Protocol facts only (which tool, which argument names, then an
answer), never wording."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit import Agent, ToolCall, ToolResultMessage, tool
from agentkit.providers import stream_simple
from tests.support import NEEDS_EMBEDDED_MODEL

pytestmark = NEEDS_EMBEDDED_MODEL


@tool
def get_weather(city: str, unit: str = "c") -> str:
    """Get the current weather in a city.

    Args:
        city: The city name.
        unit: Temperature unit, c or f.
    """
    return f"18 degrees {unit.upper()} and cloudy in {city}"


@pytest.mark.parametrize("api", ["openai-completions", "openai-responses", "anthropic-messages"])
def test_tool_loop_on_the_embedded_model(embedded_server: Any, api: str) -> None:
    agent = Agent(
        model=embedded_server.model_for(api),
        stream_fn=stream_simple,
        system_prompt="You are a helpful assistant. Use the tools when they help.",
        tools=[get_weather],
    )
    # One tool turn, then the answer: stop a model that would keep calling the tool.
    agent.finish_turn = lambda turn, signal: "end" if len(turn.new_messages) > 6 else None
    new = agent.prompt("What is the weather in Paris right now?")

    first = new[1]
    assert first.role == "assistant" and first.stop_reason == "tool_use", first.error_message
    calls = [b for b in first.content if isinstance(b, ToolCall)]
    assert calls and calls[0].name == "get_weather"
    assert "city" in calls[0].arguments
    results = [m for m in new if isinstance(m, ToolResultMessage)]
    assert results and not results[0].is_error, results[0].content
    final = new[-1]
    assert final.role == "assistant" and final.stop_reason in ("stop", "length")
    assert final.usage.output > 0
