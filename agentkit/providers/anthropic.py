"""Anthropic Messages (``POST {base_url}/v1/messages``), streamed.

Thinking blocks keep their ``signature`` (``signature_delta``); redacted thinking becomes a
thinking block with ``redacted=True`` whose signature is the opaque ``data``; both are echoed back
only to Anthropic. ``server_tool_use`` and server tool results are the vendor's own business and
never become ``tool_call`` content. The final ``message_delta`` usage wins over
``message_start``'s. Tool-call ids are made to match ``^[a-zA-Z0-9_-]+$`` (64 characters max).

Provider-specific options: ``thinking_enabled``, ``thinking_budget_tokens``, ``cache_retention``
(``"short"``, ``"long"`` or ``"none"``: prompt-cache breakpoints on the system prompt and the last
user turn, for the ``anthropic`` provider only). ``tool_choice`` is sent as ``{"type": ...}``;
``output_schema`` as ``output_format``, with the structured-outputs beta header.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import ProviderError
from ..event_stream import AssistantMessageEventStream
from ..types import (
    AnthropicOptions,
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    StopReason,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
)
from . import overflow
from .builder import MessageBuilder, set_usage, tokens
from .runner import ApiSpec, PreparedRequest, run_stream, vendor_error_message
from .table import provider_label
from .transform import call_part, prepare_context, safe_id
from .wire import closed_schema, llama_cpp_schema, named_tool, portable_mode

API = "anthropic-messages"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
STRUCTURED_OUTPUTS_BETA = "structured-outputs-2025-11-13"
"""The ``anthropic-beta`` value that enables ``output_format``."""
TOOL_SEARCH_BETA = "advanced-tool-use-2025-11-20"
"""The ``anthropic-beta`` value of deferred tools (``defer_loading``, ``tool_reference``)."""

DEFAULT_THINKING_BUDGETS: dict[str, int] = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32000,
}
"""``budget_tokens`` per thinking level when ``thinking_budgets`` does not say."""


def normalize_tool_call_id(tool_call_id: str) -> str:
    """An id Anthropic accepts: ``^[a-zA-Z0-9_-]+$``, at most 64 characters."""
    return safe_id(call_part(tool_call_id), 64)


# --- request ------------------------------------------------------------------------------------


def _image(block: ImageContent) -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
    }


def _user_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent) and block.text:
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            blocks.append(_image(block))
    return blocks


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            # Only ours reach here (prepare_context turned foreign thinking into text).
            if block.redacted and block.signature:
                blocks.append({"type": "redacted_thinking", "data": block.signature})
            elif block.signature:
                blocks.append(
                    {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
                )
            elif block.thinking.strip():
                blocks.append({"type": "text", "text": block.thinking})
        elif isinstance(block, TextContent):
            if block.text.strip():
                blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall):
            blocks.append(
                {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
            )
    return blocks


def _tool_result_block(message: ToolResultMessage) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextContent) and block.text:
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            content.append(_image(block))
    if not content:
        content = [{"type": "text", "text": "(no output)"}]
    result: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id,
        "content": content,
    }
    if message.is_error:
        result["is_error"] = True
    return result


def build_messages(model: Model, context: Context) -> tuple[str, list[Any], list[Any]]:
    """The system prompt, ``messages`` (roles alternating) and ``tools`` of a request."""
    prepared = prepare_context(model, context, normalize_tool_call_id)
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)  # the API wants roles to alternate
        else:
            messages.append({"role": role, "content": blocks})

    for message in prepared.messages:
        if isinstance(message, ToolResultMessage):
            add("user", [_tool_result_block(message)])
        elif isinstance(message, AssistantMessage):
            add("assistant", _assistant_blocks(message))
        else:
            add("user", _user_blocks(message.content))
    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in prepared.tools
    ]
    return prepared.system_prompt, messages, tools


def prepare(
    model: Model, context: Context, options: StreamOptions, api_key: str | None
) -> PreparedRequest:
    """URL, headers and body of a streamed Messages request."""
    system, messages, tools = build_messages(model, context)
    max_tokens = options.max_tokens or model.max_tokens or DEFAULT_MAX_TOKENS
    payload: dict[str, Any] = {
        "model": model.id,
        "max_tokens": max_tokens,
        "messages": messages,
        "stream": True,
    }
    if system:
        payload["system"] = [{"type": "text", "text": system}]
    _add_cache_points(model, options, payload)
    if tools:
        payload["tools"] = tools
        if options.tool_choice is not None:
            payload["tool_choice"] = wire_tool_choice(options.tool_choice)
    own = options.anthropic or AnthropicOptions()
    budget = own.thinking_budget_tokens
    thinking = own.thinking_enabled and model.reasoning
    if thinking:
        budget = int(budget or DEFAULT_THINKING_BUDGETS["medium"])
        if max_tokens <= budget:
            # the budget counts against max_tokens: leave room for the answer
            payload["max_tokens"] = budget + max(DEFAULT_MAX_TOKENS, max_tokens)
            if model.max_tokens and payload["max_tokens"] > model.max_tokens:
                payload["max_tokens"] = model.max_tokens
                budget = max(model.max_tokens - 1024, 1024)
        payload["thinking"] = {"type": "enabled", "budget_tokens": budget}
    elif options.temperature is not None:
        payload["temperature"] = options.temperature  # not allowed together with thinking
    extra = _ask_for_output(model, options, payload)
    headers = {
        "Content-Type": "application/json",
        "Accept": "text/event-stream",
        "anthropic-version": ANTHROPIC_VERSION,
    }
    if api_key:
        headers["x-api-key"] = api_key
    headers.update(model.headers or {})
    headers.update(extra)
    return PreparedRequest(
        url=model.base_url.rstrip("/") + "/v1/messages", headers=headers, payload=payload
    )


def _ask_for_output(
    model: Model, options: StreamOptions, payload: dict[str, Any]
) -> dict[str, str]:
    """Ask for ``options.output_schema`` as ``output_format``; return the caller's headers, with
    the structured-outputs beta joined to the ``anthropic-beta`` they give."""
    headers = dict(options.headers or {})
    schema = options.output_schema
    if schema is not None and not llama_cpp_schema(payload, model, schema):
        payload["output_format"] = {
            "type": "json_schema",
            "schema": closed_schema(schema.json_schema),
        }
        headers = with_beta(headers, STRUCTURED_OUTPUTS_BETA)
    return headers


def with_beta(headers: dict[str, str] | None, beta: str) -> dict[str, str]:
    """A copy of ``headers`` whose ``anthropic-beta`` names ``beta`` too."""
    joined = dict(headers or {})
    present = joined.get("anthropic-beta")
    if present and beta in present.split(","):
        return joined
    joined["anthropic-beta"] = f"{present},{beta}" if present else beta
    return joined


def defer_tools(
    payload: dict[str, Any], model: Model, *, deferred: set[str], references: dict[str, list[str]]
) -> dict[str, Any]:
    """Deferred tool loading, as Messages spells it (an ``on_payload`` step): each tool named in
    ``deferred`` is sent with ``defer_loading``, and the result of each tool call in
    ``references`` (by call id) becomes ``tool_reference`` blocks naming the tools it loads,
    which the API expands into their declarations. A result that names no deferred tool keeps
    its text. The API needs one tool that is not deferred: when every tool would be, none is."""
    tools = payload.get("tools") or []
    if all(tool.get("name") in deferred for tool in tools):
        return payload
    for tool in tools:
        if tool.get("name") in deferred:
            tool["defer_loading"] = True
    by_id = {normalize_tool_call_id(k): [n for n in v if n in deferred] for k, v in references.items()}
    for message in payload.get("messages") or []:
        for block in message.get("content") or []:
            names = by_id.get(block.get("tool_use_id")) if block.get("type") == "tool_result" else None
            if names and not block.get("is_error"):
                block["content"] = [{"type": "tool_reference", "tool_name": n} for n in names]
    return payload


def wire_tool_choice(choice: ToolChoice) -> Any:
    """``choice`` as Messages spells it: ``{"type": "auto" | "none" | "any"}``, a named tool as
    ``{"type": "tool", "name": ...}``; a dict (the API's own value) as it is."""
    name = named_tool(choice)
    if name is not None:
        return {"type": "tool", "name": name}
    if isinstance(choice, dict):
        return choice
    mode = portable_mode(choice)
    return {"type": "any" if mode == "required" else mode}


def _add_cache_points(model: Model, options: StreamOptions, payload: dict[str, Any]) -> None:
    """Mark the system prompt and the last user turn as prompt-cache breakpoints.

    ``options.anthropic.cache_retention``: ``"short"`` (the default, five minutes), ``"long"`` (one
    hour) or ``"none"``. Only for Anthropic itself; compatible servers may reject the field.
    """
    retention = (options.anthropic or AnthropicOptions()).cache_retention
    if model.provider != "anthropic" or retention == "none":
        return
    marker: dict[str, Any] = {"type": "ephemeral"}
    if retention == "long":
        marker["ttl"] = "1h"
    if payload.get("system"):
        payload["system"][-1]["cache_control"] = marker
    for message in reversed(payload["messages"]):
        if message["role"] == "user" and message["content"]:
            message["content"][-1]["cache_control"] = marker
            break


# --- response -----------------------------------------------------------------------------------

_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_use",
    "refusal": "error",
}


class MessagesParser:
    """Assembles a message from Anthropic stream events."""

    def __init__(self, builder: MessageBuilder) -> None:
        self.b = builder
        self.label = provider_label(builder.model)
        self.blocks: dict[int, tuple[str, int]] = {}  # vendor index -> (kind, content index)
        self.stop_reason: str | None = None
        self.stopped = False

    def handle(self, event: str, data: Any) -> None:
        """Take one stream event."""
        if not isinstance(data, dict):
            return
        kind = str(data.get("type") or event)
        if kind == "message_start":
            message = data.get("message") or {}
            if message.get("id"):
                self.b.message.response_id = str(message["id"])
            self._usage(message.get("usage") or {})
            self.b.start()
        elif kind == "content_block_start":
            self._block_start(int(data.get("index", len(self.blocks))), data.get("content_block"))
        elif kind == "content_block_delta":
            self._block_delta(int(data.get("index", 0)), data.get("delta") or {})
        elif kind == "content_block_stop":
            self._block_stop(int(data.get("index", 0)))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self._usage(data.get("usage") or {})
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            raise ProviderError(f"{self.label} stream error: {vendor_error_message(data)}")

    def _usage(self, usage: dict[str, Any]) -> None:
        if not isinstance(usage, dict) or not usage:
            return

        def count(name: str) -> int | None:
            value = usage.get(name)
            return tokens(value) if isinstance(value, (int, float)) else None

        set_usage(
            self.b.message.usage,
            input=count("input_tokens"),
            output=count("output_tokens"),
            cache_read=count("cache_read_input_tokens"),
            cache_write=count("cache_creation_input_tokens"),
        )

    def _block_start(self, vendor_index: int, block: Any) -> None:
        if not isinstance(block, dict):
            return
        block_type = block.get("type")
        if block_type == "text":
            index = self.b.begin_text(str(block.get("text") or ""))
            self.blocks[vendor_index] = ("text", index)
        elif block_type == "thinking":
            index = self.b.begin_thinking(
                str(block.get("thinking") or ""), signature=block.get("signature") or None
            )
            self.blocks[vendor_index] = ("thinking", index)
        elif block_type == "redacted_thinking":
            index = self.b.begin_thinking(
                "[Reasoning redacted]", signature=str(block.get("data") or ""), redacted=True
            )
            self.blocks[vendor_index] = ("thinking", index)
        elif block_type == "tool_use":
            index = self.b.begin_tool_call(str(block.get("id") or ""), str(block.get("name") or ""))
            self.blocks[vendor_index] = ("tool_call", index)
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                self.b.add_tool_args(index, json.dumps(initial))
        # server_tool_use, web search results and the like are not our content

    def _block_delta(self, vendor_index: int, delta: dict[str, Any]) -> None:
        found = self.blocks.get(vendor_index)
        if found is None:
            return
        kind, index = found
        delta_type = delta.get("type")
        if delta_type == "text_delta" and kind == "text":
            self.b.add_text(index, str(delta.get("text") or ""))
        elif delta_type == "thinking_delta" and kind == "thinking":
            self.b.add_thinking(index, str(delta.get("thinking") or ""))
        elif delta_type == "signature_delta" and kind == "thinking":
            self.b.set_thinking_signature(index, str(delta.get("signature") or ""), append=True)
        elif delta_type == "input_json_delta" and kind == "tool_call":
            self.b.add_tool_args(index, str(delta.get("partial_json") or ""))

    def _block_stop(self, vendor_index: int) -> None:
        found = self.blocks.get(vendor_index)
        if found is None:
            return
        kind, index = found
        if kind == "text":
            self.b.end_text(index)
        elif kind == "thinking":
            self.b.end_thinking(index)
        else:
            self.b.end_tool_call(index)

    def finish(self) -> None:
        """End the message; without ``message_stop`` or a stop reason it is incomplete."""
        if not self.stopped and self.stop_reason is None:
            raise ProviderError(f"{self.label} stream ended before the message was complete")
        self.b.finish_from(self.stop_reason or "end_turn", _STOP_REASONS, self.label, "stop")


SPEC = ApiSpec(
    api=API, prepare=prepare, parser=MessagesParser, overflow=overflow.ANTHROPIC_MESSAGES
)


def stream_anthropic(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Stream one Messages API answer (returns at once; never raises for failures)."""
    return run_stream(SPEC, model, context, options)


def reasoning_options(
    model: Model, level: str | None, budgets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Provider options for a thinking level: extended thinking with a token budget."""
    if not model.reasoning or not level or level == "off":
        return {}
    budget = (budgets or {}).get(level) or DEFAULT_THINKING_BUDGETS.get(level, 8192)
    return {"anthropic": {"thinking_enabled": True, "thinking_budget_tokens": budget}}
