"""What the compaction tests share with the child process of the crash test (and the compaction
benchmark): a scripted model with an 8k window that measures every request and refuses one over
the window in Anthropic's words, a tool with a large result, and the checks of a request."""

from __future__ import annotations

import json
from typing import Any

from agentkit import Agent, tool
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import (
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    ToolCall,
    ToolResultMessage,
    Usage,
    role_of,
)

WINDOW = 8000
BIG = "lorem ipsum dolor sit amet " * 240  # about 6,500 characters: 1,600 tokens a result

SUMMARY_MARK = "working memory"  # words of the summarize strategy's system prompt


def request_tokens(context: Context) -> int:
    """What a request costs, measured independently of the compaction's own estimate: the
    JSON of every message's content, 4 characters a token."""
    total = 0
    for message in context.messages:
        data = message.model_dump(mode="json") if hasattr(message, "model_dump") else message
        total += len(json.dumps(data.get("content", ""))) // 4 + 4
        for decl in data.get("tools_added") or ():
            total += len(json.dumps(decl)) // 4
    return total


def pairs_whole(messages: list[Any]) -> bool:
    """Whether every tool call in ``messages`` has its result there, and every result its
    call (an errored or aborted reply's calls never ran, so they need none)."""
    calls = {
        block.id
        for m in messages
        if isinstance(m, AssistantMessage) and m.stop_reason not in ("error", "aborted")
        for block in m.content
        if isinstance(block, ToolCall)
    }
    return calls == {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}


def is_summary_request(context: Context) -> bool:
    first = context.messages[0]
    return role_of(first) == "system" and SUMMARY_MARK in str(getattr(first, "content", ""))


class Windowed:
    """A scripted model with an 8k window: a request over it is refused as Anthropic words it;
    a user message gets a tool call, a tool result a short answer, a summary request a
    summary. Every request is measured."""

    def __init__(self, window: int = WINDOW, overflow_text: str | None = None) -> None:
        self.window = window
        self.overflow_text = overflow_text or "prompt is too long: {n} tokens > {w} maximum"
        self.sizes: list[int] = []
        self.summaries = 0
        self.always_call = False
        self.model = ScriptedModel(
            [self.answer] * 5000,
            model=Model(
                id="windowed", api="scripted", provider="scripted", base_url="",
                context_window=window,
            ),
        )  # fmt: skip

    def answer(self, context: Context, options: StreamOptions) -> Any:
        tokens = request_tokens(context)
        self.sizes.append(tokens)
        if tokens > self.window:
            return reply(error=self.overflow_text.format(n=tokens, w=self.window))
        usage = Usage(input=tokens, output=20, total_tokens=tokens + 20)
        if is_summary_request(context):
            self.summaries += 1
            return reply(f"- the user asked for pages; summary #{self.summaries}", usage=usage)
        last = context.messages[-1]
        if role_of(last) == "user" or self.always_call:
            return reply(tool_call("fetch", {"page": len(self.sizes)}), usage=usage)
        return reply("Fetched.", usage=usage)


@tool
def fetch(page: int) -> str:
    """Fetch a large page."""
    return f"page {page}: {BIG}"


def agent_for(windowed: Windowed, **options: Any) -> Agent:
    return Agent(
        model=windowed.model.model, stream_fn=windowed.model, tools=[fetch],
        system_prompt="You fetch pages.", **options,
    )  # fmt: skip


def view_key(messages: list[Any]) -> list[list[Any]]:
    """A view as comparable data: each message's role and content (timestamps left out, as
    the summary's user message is made afresh for each request)."""
    key = []
    for message in messages:
        data = message.model_dump(mode="json") if hasattr(message, "model_dump") else message
        key.append([data.get("role"), data.get("content"), data.get("tool_call_id")])
    return key
