"""A whole Agent tool loop through each wire API over real HTTP: the replay server answers the
first request with a recorded tool call and the second with a recorded text answer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from replay_server import API_KEY, ReplayServer, Reply, fixture_bytes, make_model

from agentkit import Agent, TextContent, ToolResultMessage
from agentkit.providers import stream_simple
from tests.support import make_tool

CASES = {
    "openai-completions": (
        "vendor/openai-chat-tool-call-usage.sse",
        "vendor/openai-chat-text-usage.sse",
        "get_capital",
    ),
    "openai-responses": (
        "vendor/openai-responses-function-call.sse",
        "vendor/openai-responses-text.sse",
        "get_capital",
    ),
    "anthropic-messages": (
        "vendor/anthropic-thinking-tool-use.sse",
        "vendor/anthropic-thinking-text.sse",
        "fixed_version",
    ),
    "google-generative-ai": (
        "vendor/gemini-sse-function-call-thought-signature.sse",
        "vendor/gemini-sse-thinking-text.sse",
        "get_country",
    ),
}


def tool_result_text(api: str, body: dict[str, Any]) -> str:
    """Where each API carries our tool result in the second request."""
    if api == "openai-completions":
        return next(m["content"] for m in body["messages"] if m["role"] == "tool")
    if api == "openai-responses":
        return next(i["output"] for i in body["input"] if i.get("type") == "function_call_output")
    if api == "anthropic-messages":
        blocks = [b for m in body["messages"] for b in m["content"] if isinstance(m["content"], list)]
        result = next(b for b in blocks if b.get("type") == "tool_result")
        content = result["content"]
        return content if isinstance(content, str) else content[0]["text"]
    parts = [p for c in body["contents"] for p in c["parts"]]
    response = next(p["functionResponse"] for p in parts if "functionResponse" in p)
    return str(response["response"])


@pytest.mark.parametrize("api", sorted(CASES))
@pytest.mark.parametrize("chunk", [None, 13])
def test_agent_tool_loop_over_http(server: ReplayServer, api: str, chunk: int | None) -> None:
    tool_fixture, text_fixture, tool_name = CASES[api]
    content_type = "text/event-stream"
    server.enqueue(
        Reply(fixture_bytes(tool_fixture), content_type=content_type, chunk=chunk),
        Reply(fixture_bytes(text_fixture), content_type=content_type, chunk=chunk),
    )
    tool = make_tool(tool_name, lambda *_: f"{tool_name} says 42")
    agent = Agent(
        model=make_model(api, server.url),
        stream_fn=stream_simple,
        api_key=API_KEY,
        system_prompt="Be brief.",
        tools=[tool],
    )
    kinds: list[str] = []
    agent.subscribe(lambda event: kinds.append(event.type))
    new = agent.prompt("Use the tool.")

    assert [m.role for m in new] == ["user", "assistant", "tool_result", "assistant"]
    first, result, final = new[1], new[2], new[3]
    assert first.stop_reason == "tool_use" and first.api == api
    assert first.usage.input > 0 and first.usage.cost.total > 0
    assert len(tool.calls) == 1 and tool.calls[0].thread.startswith("agentkit-tool")
    assert isinstance(result, ToolResultMessage) and not result.is_error
    assert final.stop_reason == "stop", final.error_message
    assert any(isinstance(b, TextContent) and b.text for b in final.content)
    assert "message_update" in kinds and kinds[-1] == "agent_end"

    first_body, second_body = (r.json for r in server.requests)
    assert "Be brief." in str(first_body)  # the transcript's system prompt was replayed
    assert tool_name in str(first_body)  # and so was the declared tool
    assert "42" in tool_result_text(api, second_body)
    assert API_KEY not in str(new) and API_KEY not in str(kinds)
    # No thread of ours is left (the replay server's own handler threads may still be closing).
    assert [t.name for t in threading.enumerate() if t.name.startswith("agentkit")] == []
