"""OpenAI Chat Completions (``POST {base_url}/chat/completions``) and the servers that copy it.

Server quirks are settings, not forks: :func:`resolve_compat` merges the defaults, the
provider table's quirks (DeepSeek, Groq, OpenRouter, local servers...) and ``model.compat``
(typed: :class:`~agentkit.types.ModelCompat`).

Settings: ``max_tokens_field`` (``"max_completion_tokens"`` or ``"max_tokens"``),
``supports_developer_role`` (system prompt as ``developer`` for reasoning models),
``supports_usage_in_streaming`` (send ``stream_options.include_usage``),
``supports_reasoning_effort`` (send ``reasoning_effort``), ``thinking_format`` (``"openai"`` for
``reasoning_effort``, ``"openrouter"`` for ``reasoning: {effort}``), ``reasoning_field`` (the
delta field carrying thinking text; ``reasoning_content``, ``reasoning`` and ``reasoning_text``
are always tried after it), ``send_reasoning`` (replay our thinking in that field),
``supports_store`` (send ``store: false``).

OpenAI's own options are ``StreamOptions.openai`` (:class:`~agentkit.types.OpenAIOptions`:
``reasoning_effort``). ``tool_choice`` is sent as a mode or ``{"type": "function", ...}``;
``output_schema`` as ``response_format`` (``json_schema``, strict when the schema allows it).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from .._serialize import dumps
from ..errors import ProviderError
from ..event_stream import AssistantMessageEventStream
from ..types import (
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    ModelCompat,
    OpenAIOptions,
    OutputSchema,
    StopReason,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    ToolChoice,
    ToolResultMessage,
    UserMessage,
)
from . import overflow
from .builder import MessageBuilder, set_usage, tokens
from .runner import ApiSpec, PreparedRequest, run_stream, vendor_error_message
from .table import own_compat, provider_compat, provider_label
from .transform import call_part, images_of, prepare_context, safe_id, text_of
from .wire import (
    OUTPUT_TOOL,
    OUTPUT_TOOL_DESCRIPTION,
    PROMPTED_OUTPUT_TEXT,
    closed_schema,
    named_tool,
    portable_mode,
)

API = "openai-completions"

DEFAULT_COMPAT = ModelCompat(
    max_tokens_field="max_completion_tokens",
    supports_developer_role=True,
    supports_usage_in_streaming=True,
    supports_reasoning_effort=True,
    thinking_format="openai",
    reasoning_field="reasoning_content",
    send_reasoning=False,
    supports_store=False,
)
"""What an OpenAI-compatible server is assumed to do unless the provider table says otherwise."""

_REASONING_FIELDS = ("reasoning_content", "reasoning", "reasoning_text")


def resolve_compat(model: Model) -> dict[str, Any]:
    """The effective quirks for ``model``: defaults, then the provider table's, then
    ``model.compat`` (a misspelt key raises ``ValueError``).

    Every request asks, so the merge is remembered per (provider, base URL, compat) and each
    caller gets its own copy."""
    own = own_compat(model)  # validated: every value is a plain string or bool, so hashable
    key = tuple(sorted(own.model_dump(exclude_none=True).items())) if own is not None else ()
    return dict(_cached_compat(model.provider, model.base_url, key))


def _merge_compat(model: Model) -> dict[str, Any]:
    return DEFAULT_COMPAT.merged(provider_compat(model)).model_dump()


@functools.lru_cache(maxsize=64)
def _cached_compat(
    provider: str, base_url: str, own: tuple[tuple[str, Any], ...]
) -> dict[str, Any]:
    """The merge for one model identity (never handed out: :func:`resolve_compat` copies it)."""
    model = Model(
        id="", name="", api=API, provider=provider, base_url=base_url, compat=dict(own) or None
    )
    return _merge_compat(model)


def normalize_tool_call_id(tool_call_id: str) -> str:
    """An id Chat Completions accepts (at most 40 characters; Responses ids lose ``|item``)."""
    return safe_id(call_part(tool_call_id), 40)


# --- request ------------------------------------------------------------------------------------


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:{block.mime_type};base64,{block.data}"},
                }
            )
    if parts and all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _assistant_entry(message: AssistantMessage, compat: dict[str, Any]) -> dict[str, Any] | None:
    texts = [b.text for b in message.content if isinstance(b, TextContent) and b.text]
    thinking = [b.thinking for b in message.content if isinstance(b, ThinkingContent)]
    calls = [b for b in message.content if isinstance(b, ToolCall)]
    if not texts and not calls:
        return None
    entry: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if thinking and compat.get("send_reasoning"):
        entry[str(compat.get("reasoning_field") or "reasoning_content")] = "".join(thinking)
    if calls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in calls
        ]
    return entry


def _entry(
    message: UserMessage | AssistantMessage | ToolResultMessage, compat: dict[str, Any]
) -> tuple[dict[str, Any] | None, list[ImageContent]]:
    """One prepared message's ``messages`` entry (``None``: nothing to send) and, for a tool
    result, its images (sent after the results, in a user message)."""
    if isinstance(message, ToolResultMessage):
        text = text_of(message.content)
        images = images_of(message.content)
        if not text:
            text = "(see attached image)" if images else "(no output)"
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}, images
    if isinstance(message, AssistantMessage):
        return _assistant_entry(message, compat), []
    return {"role": "user", "content": _user_content(message.content)}, []


def build_messages(
    model: Model, context: Context, compat: dict[str, Any], remember: bool = True
) -> tuple[list[Any], Any]:
    """The ``messages`` array and the ``tools`` list for a request.

    Each message's entry is kept in its :class:`~agentkit.providers.transform.PreparedContext`
    memo and handed out again while the message is unchanged, so the entries of one request
    are shared with the next: ``remember=False`` builds fresh ones, for a caller that lets
    anything change the body in place (an ``on_payload`` hook)."""
    prepared = prepare_context(model, context, normalize_tool_call_id)
    messages: list[dict[str, Any]] = []
    if prepared.system_prompt:
        role = (
            "developer" if model.reasoning and compat.get("supports_developer_role") else "system"
        )
        messages.append({"role": role, "content": prepared.system_prompt})
    pending_images: list[ImageContent] = []

    def flush_images() -> None:
        if pending_images:
            parts: list[dict[str, Any]] = [
                {"type": "text", "text": "Attached image(s) from the tool result(s) above:"}
            ]
            parts.extend(
                {
                    "type": "image_url",
                    "image_url": {"url": f"data:{img.mime_type};base64,{img.data}"},
                }
                for img in pending_images
            )
            messages.append({"role": "user", "content": parts})
            pending_images.clear()

    # the settings an entry depends on besides its message
    key = (API, bool(compat.get("send_reasoning")), compat.get("reasoning_field"))
    memos = prepared.memos if remember else ()
    for index, message in enumerate(prepared.messages):
        memo = memos[index] if index < len(memos) else None
        kept = memo.get(key) if memo is not None else None
        if kept is None:
            kept = _entry(message, compat)
            if memo is not None:
                memo[key] = kept
        entry, images = kept
        if isinstance(message, ToolResultMessage):
            pending_images.extend(images)  # sent after the run of results this one is in
        elif pending_images:
            flush_images()
        if entry is not None:
            messages.append(entry)
    flush_images()
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in prepared.tools
    ]
    return messages, tools


def prepare(
    model: Model, context: Context, options: StreamOptions, api_key: str | None
) -> PreparedRequest:
    """URL, headers and body of a streamed Chat Completions request."""
    compat = resolve_compat(model)
    messages, tools = build_messages(model, context, compat, options.on_payload is None)
    payload: dict[str, Any] = {"model": model.id, "messages": messages, "stream": True}
    if compat.get("supports_usage_in_streaming"):
        payload["stream_options"] = {"include_usage": True}
    if compat.get("supports_store"):
        payload["store"] = False
    if options.max_tokens:
        payload[str(compat.get("max_tokens_field") or "max_tokens")] = options.max_tokens
    if options.temperature is not None:
        payload["temperature"] = options.temperature
    if tools:
        payload["tools"] = tools
        if options.tool_choice is not None:
            payload["tool_choice"] = wire_tool_choice(options.tool_choice)
    effort = (options.openai or OpenAIOptions()).reasoning_effort
    if effort and model.reasoning:
        if compat.get("thinking_format") == "openrouter":
            payload["reasoning"] = {"effort": effort}
        elif compat.get("supports_reasoning_effort"):
            payload["reasoning_effort"] = effort
    schema = options.output_schema
    if schema is not None:
        ask_for_output(payload, compat.get("structured_output"), schema, options.tool_choice)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return PreparedRequest(
        url=model.base_url.rstrip("/") + "/chat/completions", headers=headers, payload=payload
    )


def wire_tool_choice(choice: ToolChoice) -> Any:
    """``choice`` as Chat Completions spells it: a mode as it is, a named tool as a function."""
    name = named_tool(choice)
    if name is not None:
        return {"type": "function", "function": {"name": name}}
    return portable_mode(choice)


def ask_for_output(
    payload: dict[str, Any], form: str | None, schema: OutputSchema, tool_choice: Any
) -> None:
    """Ask for ``schema`` in the ``form`` the server reads (``ModelCompat.structured_output``):
    ``response_format`` (the default), llama.cpp's ``json_schema``, a ``final_result`` tool
    whose arguments are the answer (:data:`~.wire.OUTPUT_TOOL`; its call comes back as text),
    or the schema in the instructions."""
    if form == "json_schema":
        payload["json_schema"] = schema.json_schema
    elif form == "tool":
        tools = payload.setdefault("tools", [])
        if any(t.get("function", {}).get("name") == OUTPUT_TOOL for t in tools):
            raise ProviderError(
                f"A tool is named {OUTPUT_TOOL!r}, the name typed output asks the model to "
                f"call on this server (structured_output='tool'): rename the tool",
                retryable=False,
            )
        output_tool = {"name": OUTPUT_TOOL, "description": OUTPUT_TOOL_DESCRIPTION}
        tools.append(
            {"type": "function", "function": {**output_tool, "parameters": schema.json_schema}}
        )
        if tool_choice is None:  # some tool, the answer's included, must be called
            payload["tool_choice"] = "required"
    elif form == "prompted":
        text = PROMPTED_OUTPUT_TEXT.format(schema=dumps(schema.json_schema))
        messages = payload["messages"]
        first = messages[0] if messages else None
        if first is not None and first.get("role") in ("system", "developer"):
            # a new entry: the one in the messages is shared with later requests (memo)
            messages[0] = {**first, "content": f"{first['content']}\n\n{text}"}
        else:
            messages.insert(0, {"role": "system", "content": text})
    else:
        payload["response_format"] = response_format(schema)


def response_format(schema: OutputSchema) -> dict[str, Any]:
    """The ``response_format`` that asks for ``schema``."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": schema.name,
            "schema": closed_schema(schema.json_schema),
            "strict": schema.strict,
        },
    }


# --- response -----------------------------------------------------------------------------------

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "error",
}


class ChatCompletionsParser:
    """Assembles a message from Chat Completions chunks."""

    def __init__(self, builder: MessageBuilder) -> None:
        self.b = builder
        self.label = provider_label(builder.model)
        self.compat = resolve_compat(builder.model)
        fields = [self.compat.get("reasoning_field")] + list(_REASONING_FIELDS)
        self.reasoning_fields = [f for i, f in enumerate(fields) if f and f not in fields[:i]]
        self.text_index: int | None = None
        self.thinking_index: int | None = None
        self.tools: dict[int, int] = {}  # the chunk's tool_calls[].index -> content index
        self.tool_ids: dict[int, str] = {}
        # With structured_output="tool": the slots of the final_result call, whose arguments
        # are the answer's text.
        self.output_tool = self.compat.get("structured_output") == "tool"
        self.output_slots: set[int] = set()
        self.finish_reason: str | None = None
        self.saw_done = False

    def handle(self, event: str, data: Any) -> None:
        """Take one chunk (``("done", None)`` for ``[DONE]``)."""
        if event == "done":
            self.saw_done = True
            return
        if not isinstance(data, dict):
            return
        if data.get("error"):
            raise ProviderError(f"{self.label} stream error: {vendor_error_message(data)}")
        builder = self.b
        if not builder.started:
            if data.get("id"):
                builder.message.response_id = str(data["id"])
            builder.start()
        usage = data.get("usage")
        if usage.__class__ is dict:
            self._usage(usage)
        for choice in data.get("choices") or ():
            if choice.__class__ is not dict or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if delta:
                calls = delta.get("tool_calls")
                # A continuation chunk carries only its tool-call pieces: skip the text checks.
                if calls is None or len(delta) > 1:
                    self._delta(delta)
                if calls:
                    self._tool_calls(calls)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                choice_usage = choice.get("usage")  # some servers put usage here
                if isinstance(choice_usage, dict):
                    self._usage(choice_usage)

    def _usage(self, usage: dict[str, Any]) -> None:
        prompt = tokens(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        if details.__class__ is not dict:  # absent, null, or a server's odd value
            details = {}
        cached = tokens(details.get("cached_tokens") or usage.get("prompt_cache_hit_tokens"))
        written = tokens(details.get("cache_write_tokens"))  # OpenRouter's cache writes
        completion = tokens(usage.get("completion_tokens"))
        set_usage(
            self.b.message.usage,
            input=max(prompt - cached - written, 0),
            cache_read=cached,
            cache_write=written,
            output=completion,
            total=tokens(usage.get("total_tokens")) or None,
        )

    def _close_text_and_thinking(self) -> None:
        if self.text_index is not None:
            self.b.end_text(self.text_index)
            self.text_index = None
        if self.thinking_index is not None:
            self.b.end_thinking(self.thinking_index)
            self.thinking_index = None

    def _delta(self, delta: dict[str, Any]) -> None:
        for name in self.reasoning_fields:
            value = delta.get(name)
            if isinstance(value, str) and value:
                if self.thinking_index is None:
                    self._close_text_and_thinking()
                    self.thinking_index = self.b.begin_thinking(signature=name)
                self.b.add_thinking(self.thinking_index, value)
                break
        content = delta.get("content")
        if not (isinstance(content, str) and content):
            content = delta.get("refusal")  # a refusal is what the user gets to read
        if isinstance(content, str) and content:
            if self.text_index is None:
                self._close_text_and_thinking()
                self.text_index = self.b.begin_text()
            self.b.add_text(self.text_index, content)

    def _tool_calls(self, calls: Any) -> None:
        for call in calls:
            if call.__class__ is not dict:
                continue
            slot = call.get("index")
            slot = len(self.tools) if slot is None else int(slot)
            function = call.get("function") or {}
            if self.output_tool and (
                slot in self.output_slots or function.get("name") == OUTPUT_TOOL
            ):
                self._output_text(slot, function.get("arguments"))
                continue
            call_id = call.get("id")
            index = self.tools.get(slot)
            if index is None or (call_id and self.tool_ids.get(slot) not in (None, call_id)):
                self._close_text_and_thinking()
                if index is not None:
                    self.b.end_tool_call(index)
                new_id = str(call_id or f"call_{slot}")
                index = self.b.begin_tool_call(new_id, str(function.get("name") or ""))
                self.tools[slot] = index
                self.tool_ids[slot] = new_id
            elif function.get("name"):
                block = self.b.message.content[index]
                if isinstance(block, ToolCall) and not block.name:
                    block.name = str(function["name"])
            arguments = function.get("arguments")
            if isinstance(arguments, str) and arguments:
                self.b.add_tool_args(index, arguments)
            elif isinstance(arguments, dict):  # a few servers send parsed objects
                self.b.add_tool_args(index, json.dumps(arguments))

    def _output_text(self, slot: int, arguments: Any) -> None:
        """The arguments of the ``final_result`` call, as the answer's text."""
        self.output_slots.add(slot)
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        if isinstance(arguments, str) and arguments:
            if self.text_index is None:
                self._close_text_and_thinking()
                self.text_index = self.b.begin_text()
            self.b.add_text(self.text_index, arguments)

    def finish(self) -> None:
        """End the message; a body that stopped before any finish reason is an error."""
        if self.finish_reason is None and not self.saw_done:
            raise ProviderError(f"{self.label} stream ended before the response was complete")
        reason = self.finish_reason or "stop"
        if self.output_slots and reason == "tool_calls" and not self.b.has_tool_calls():
            reason = "stop"  # the only call was the answer
        self.b.finish_from(reason, _FINISH_REASONS, self.label, "stop")


SPEC = ApiSpec(
    api=API, prepare=prepare, parser=ChatCompletionsParser, overflow=overflow.OPENAI_COMPLETIONS
)


def stream_openai_completions(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Stream one Chat Completions response (returns at once; never raises for failures)."""
    return run_stream(SPEC, model, context, options)


def reasoning_options(
    model: Model, level: str | None, budgets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Provider options for a thinking level (``reasoning_effort``)."""
    if not model.reasoning or not level or level == "off":
        return {}
    return {"openai": {"reasoning_effort": "high" if level == "xhigh" else level}}
