"""Tool search over real HTTP against the local replay server: Anthropic's native deferred
loading (``defer_loading`` on the deferred tools, the search's result as ``tool_reference``
blocks, the beta header) and the local ranking on Chat Completions (each request declares the
search tool and what was loaded).

The Anthropic streams here are *written* from the Messages streaming documentation (event
names, block and delta shapes), not recorded from the API."""

from __future__ import annotations

import json
from typing import Any

from agentkit import Agent
from agentkit.context import ToolSearch
from agentkit.providers.anthropic import TOOL_SEARCH_BETA
from tests.policies.test_tool_search import catalog_tools
from tests.providers.replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    call_delta,
    chat_sse,
    make_model,
)


def anthropic_sse(*blocks: dict[str, Any], stop: str = "end_turn") -> bytes:
    """A Messages stream of ``blocks`` (``{"type": "text", "text": ...}`` or ``{"type":
    "tool_use", "id", "name", "input"}``), written the way the API streams them."""
    events: list[tuple[str, dict[str, Any]]] = [(
        "message_start",
        {"type": "message_start", "message": {
            "id": "msg_written", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 900, "output_tokens": 1},
        }},
    )]  # fmt: skip
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": start}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]  # fmt: skip
    events += [
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                           "usage": {"output_tokens": 20}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def tool_use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def run_agent(server: ReplayServer, api: str, tools: list[Any], policy: ToolSearch, *replies: bytes) -> Agent:
    """An agent on ``api`` at the replay server, prompted once, after ``replies`` are queued."""
    server.enqueue(*(Reply(body=body) for body in replies))
    agent = Agent(model=make_model(api, server.url), tools=tools, policies=[policy],
                  get_api_key=lambda provider: API_KEY)  # fmt: skip
    agent.prompt("Which tool?")
    return agent


def test_anthropic_defers_natively_and_loads_by_reference(server: ReplayServer) -> None:
    calls: list[dict[str, Any]] = []
    agent = run_agent(
        server, "anthropic-messages", catalog_tools(30, calls), ToolSearch(),
        anthropic_sse(tool_use("toolu_1", "search_tools", {"query": "weather forecast"}), stop="tool_use"),
        anthropic_sse(tool_use("toolu_2", "weather_get_forecast", {"id": "paris"}), stop="tool_use"),
        anthropic_sse({"type": "text", "text": "Sunny."}),
    )  # fmt: skip
    assert agent.state.messages[-1].text == "Sunny."
    assert calls == [{"tool": "weather_get_forecast", "id": "paris"}]
    first, second, third = (r.json for r in server.requests)
    assert TOOL_SEARCH_BETA in server.requests[0].headers["anthropic-beta"]
    # every tool is declared, the deferred ones with defer_loading: one cacheable prefix
    by_name = {t["name"]: t for t in first["tools"]}
    assert len(by_name) == 31 and "defer_loading" not in by_name["search_tools"]
    assert all(t.get("defer_loading") is True for n, t in by_name.items() if n != "search_tools")
    assert "- weather_get_forecast:" in first["system"][0]["text"]
    assert second["tools"] == first["tools"] == third["tools"]
    # the search's result reaches the API as references, which it expands
    result = second["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    names = [block["tool_name"] for block in result["content"]]
    assert result["content"][0] == {"type": "tool_reference", "tool_name": "weather_get_forecast"}
    assert all(block["type"] == "tool_reference" for block in result["content"]) and len(names) <= 5
    # the loaded tool's own result is text, as any
    assert third["messages"][-1]["content"][-1]["content"] == [{"type": "text", "text": "weather_get_forecast done"}]


def test_anthropic_with_native_off_declares_locally(server: ReplayServer) -> None:
    run_agent(
        server, "anthropic-messages", catalog_tools(30), ToolSearch(native=False),
        anthropic_sse(tool_use("toolu_1", "search_tools", {"query": "git commit"}), stop="tool_use"),
        anthropic_sse({"type": "text", "text": "ok"}),
    )  # fmt: skip
    first, second = (r.json for r in server.requests)
    assert [t["name"] for t in first["tools"]] == ["search_tools"]
    assert "git_list_commit" in [t["name"] for t in second["tools"]]
    assert not any("defer_loading" in t for t in second["tools"])
    assert "anthropic-beta" not in server.requests[0].headers


def test_chat_completions_declares_the_search_tool_then_what_it_loaded(server: ReplayServer) -> None:
    calls: list[dict[str, Any]] = []
    agent = run_agent(
        server, "openai-completions", catalog_tools(200, calls), ToolSearch(),
        chat_sse(call_delta("c1", "search_tools", {"query": "crm contact"}), finish="tool_calls"),
        chat_sse(call_delta("c2", "crm_get_contact", {"id": "7"}), finish="tool_calls"),
        chat_sse({"content": "Ada"}),
    )  # fmt: skip
    assert agent.state.messages[-1].text == "Ada"
    first, second, third = (r.json for r in server.requests)
    assert [t["function"]["name"] for t in first["tools"]] == ["search_tools"]
    loaded = [t["function"]["name"] for t in second["tools"]]
    assert "crm_get_contact" in loaded and len(loaded) <= 6
    assert calls == [{"tool": "crm_get_contact", "id": "7"}]
    # the catalog is in the system prompt, 200 lines; the full declarations are not
    system = first["messages"][0]["content"]
    assert system.count("\n- ") == 200 and "properties" not in system
    assert len(json.dumps(first)) < len(json.dumps([t.declaration().model_dump() for t in catalog_tools(200)]))


def test_anthropic_a_deferred_tool_called_unloaded_is_refused_then_declared_in_full(server: ReplayServer) -> None:
    calls: list[dict[str, Any]] = []
    run_agent(
        server, "anthropic-messages", catalog_tools(30, calls), ToolSearch(),
        anthropic_sse(tool_use("toolu_1", "crm_get_contact", {"id": "7"}), stop="tool_use"),
        anthropic_sse(tool_use("toolu_2", "crm_get_contact", {"id": "7"}), stop="tool_use"),
        anthropic_sse({"type": "text", "text": "Ada."}),
    )  # fmt: skip
    first, second, _ = (r.json for r in server.requests)
    refused = second["messages"][-1]["content"][0]
    assert refused["is_error"] is True and "was not loaded" in refused["content"][0]["text"]
    tool = {t["name"]: t for t in second["tools"]}["crm_get_contact"]
    assert "defer_loading" not in tool  # loaded by the refusal: declared in full, not by reference
    assert {t["name"]: t for t in first["tools"]}["crm_get_contact"]["defer_loading"] is True
    assert calls == [{"tool": "crm_get_contact", "id": "7"}]
