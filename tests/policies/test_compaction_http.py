"""Context overflow over real HTTP: each API's refusal (and llama.cpp's) is one
ContextOverflowError, and an agent with compaction compacts and retries the refused request."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentkit import Agent
from agentkit.errors import ContextOverflowError, ProviderError
from agentkit.events import ErrorEvent
from agentkit.providers import stream
from agentkit.transcript import COMPACTION_ROLE, user_message
from agentkit.types import AssistantMessage, Context, TextContent, role_of
from tests.providers.replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    fixture_bytes,
    make_model,
    options,
)

OVERFLOW = Path(__file__).resolve().parents[1] / "fixtures" / "overflow"

REFUSALS = [
    ("openai-completions", {}, 400, "openai-chat-400.json"),
    ("openai-responses", {}, 400, "openai-responses-400.json"),
    ("anthropic-messages", {}, 400, "anthropic-400.json"),
    ("anthropic-messages", {}, 413, "anthropic-413.json"),
    ("google-generative-ai", {}, 400, "gemini-400.json"),
    ("openai-completions", {"provider": "local"}, 400, "llamacpp-chat-completions-400.json"),
    ("openai-responses", {"provider": "local"}, 400, "llamacpp-chat-completions-400.json"),
    ("anthropic-messages", {"provider": "local"}, 400, "llamacpp-chat-completions-400.json"),
]

ANSWERS = {
    "openai-completions": "vendor/openai-chat-text-usage.sse",
    "openai-responses": "vendor/openai-responses-text.sse",
    "anthropic-messages": "vendor/anthropic-thinking-text.sse",
    "google-generative-ai": "vendor/gemini-sse-thinking-text.sse",
}


def refusal(status: int, name: str) -> Reply:
    return Reply(body=(OVERFLOW / name).read_bytes(), status=status, content_type="application/json")


def final_event(model: Any, server: ReplayServer) -> tuple[ErrorEvent, AssistantMessage]:
    response = stream(model, Context(messages=[user_message("hi")]), options(max_retries=0))
    events = list(response)
    assert isinstance(events[-1], ErrorEvent)
    return events[-1], response.result(timeout=10)


@pytest.mark.parametrize(("api", "overrides", "status", "name"), REFUSALS)
def test_each_apis_overflow_is_a_context_overflow_error(
    server: ReplayServer, api: str, overrides: dict[str, Any], status: int, name: str
) -> None:
    server.enqueue(refusal(status, name))
    event, message = final_event(make_model(api, server.url, **overrides), server)
    assert isinstance(event.provider_error, ContextOverflowError), message.error_message
    assert event.provider_error.status == status
    assert message.stop_reason == "error" and API_KEY not in (message.error_message or "")


def test_the_streamed_responses_failure_is_recognised_by_its_words(server: ReplayServer) -> None:
    from agentkit.providers.overflow import any_api_overflow

    server.enqueue(Reply(body=(OVERFLOW / "openai-responses-failed.sse").read_bytes()))
    response = stream(
        make_model("openai-responses", server.url), Context(messages=[user_message("hi")]),
        options(max_retries=0),
    )  # fmt: skip
    message = response.result(timeout=10)
    assert message.stop_reason == "error"
    assert any_api_overflow(message.error_message or "")


@pytest.mark.parametrize(
    ("api", "status", "body"),
    [
        ("openai-completions", 400, {"error": {"message": "Invalid value for 'temperature'.",
                                               "type": "invalid_request_error"}}),
        ("anthropic-messages", 400, {"type": "error", "error": {
            "type": "invalid_request_error", "message": "max_tokens: Field required"}}),
        ("google-generative-ai", 400, {"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                                 "message": "Invalid JSON payload received."}}),
    ],
)  # fmt: skip
def test_other_refusals_stay_plain_provider_errors(
    server: ReplayServer, api: str, status: int, body: dict[str, Any]
) -> None:
    server.enqueue(Reply(body=json.dumps(body).encode(), status=status,
                         content_type="application/json"))  # fmt: skip
    event, _ = final_event(make_model(api, server.url), server)
    assert isinstance(event.provider_error, ProviderError)
    assert not isinstance(event.provider_error, ContextOverflowError)


@pytest.mark.parametrize(
    ("api", "overrides", "status", "name"),
    [REFUSALS[0], REFUSALS[1], REFUSALS[2], REFUSALS[4], REFUSALS[5]],
    ids=["openai-completions", "openai-responses", "anthropic", "google", "llama.cpp"],
)
def test_an_agent_compacts_and_retries_a_refused_request_over_http(
    server: ReplayServer, api: str, overrides: dict[str, Any], status: int, name: str
) -> None:
    answer = fixture_bytes(ANSWERS[api])
    server.enqueue(refusal(status, name), *(Reply(body=answer) for _ in range(6)))
    history: list[Any] = []
    for turn in range(6):
        history.append(user_message(f"question {turn}: " + "context " * 300))
        history.append(AssistantMessage(content=[TextContent(text=f"answer {turn}")]))
    agent = Agent(
        model=make_model(api, server.url, context_window=100_000, **overrides),
        system_prompt="You answer questions.", messages=history, compaction="summarize",
        api_key=API_KEY, retry_base_delay_ms=1, max_retries=0, timeout=(5, 5),
    )  # fmt: skip
    result = agent.prompt("the question that overflowed")
    assert result.stop_reason == "stop", result.error_message
    refused, *summaries, retried = (r.json for r in server.requests)
    text = json.dumps
    # the summary requests (the refused size, halved, a piece each): the summary prompt, the
    # old turns as text, no tools
    assert summaries and all("working memory" in text(s) for s in summaries)
    assert "question 0" in text(summaries[0]) and not any("tools" in s for s in summaries)
    # the retried request: the summary in place of the old turns, this turn's prompt kept
    assert "question 0" in text(refused) and "question 0" not in text(retried)
    assert "compacted to fit the context window" in text(retried)
    assert "the question that overflowed" in text(retried)
    assert len(text(retried)) < len(text(refused)) / 2
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    assert len(records) == 1 and records[0].reason == "overflow"
    assert records[0].requests == len(summaries)
    assert result.usage.requests == len(summaries) + 2
