"""OpenAI Responses (``POST {base_url}/responses``), streamed, stateless (``store: false``).

Reasoning items come back as thinking blocks whose ``signature`` is the whole item as JSON
(encrypted content included), and are echoed back verbatim to the same provider. Tool-call ids
are ``call_id|item_id``; the request splits them again. Events are matched to output items by
``item_id`` (llama.cpp's server sends no ``output_index`` or ``sequence_number``).

Provider-specific options: ``reasoning_effort``, ``reasoning_summary`` (default ``"auto"``).
``tool_choice`` is sent as a mode or ``{"type": "function", "name": ...}``; ``output_schema`` as
``text.format`` (``json_schema``, strict when the schema allows it). ``model.compat``: ``supports_store`` and ``supports_include`` (both default on
for vendors, off for local servers), ``supports_tool_search`` (see :func:`supports_tool_search`).

Tool search: with ``openai.tool_search`` naming a tool, a client-executed ``tool_search_call``
item becomes a call of that tool (id ``call_id|item_id``); :func:`search_natively`, an
``on_payload`` step, declares it as the ``tool_search`` tool and sends its calls and results
back as ``tool_search_call`` and ``tool_search_output`` items.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any

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
    as_stream_options,
)
from . import overflow
from .builder import MessageBuilder, set_usage, tokens
from .json_stream import as_arguments, parse_json_arguments
from .runner import ApiSpec, PreparedRequest, run_stream, vendor_error_message
from .table import is_local_url, own_compat, provider_label
from .transform import images_of, prepare_context, safe_id, same_source, text_of
from .wire import closed_schema, llama_cpp_schema, named_tool, portable_mode

API = "openai-responses"


def normalize_tool_call_id(tool_call_id: str) -> str:
    """An id the Responses API accepts: ``call_id|item_id`` kept, others made safe (64 max)."""
    if "|" in tool_call_id:
        call, item = tool_call_id.split("|", 1)
        return f"{safe_id(call, 64)}|{safe_id(item, 64)}"
    return safe_id(tool_call_id, 64)


def _compat(model: Model) -> dict[str, Any]:
    local = is_local_url(model.base_url)
    defaults = ModelCompat(supports_store=not local, supports_include=not local)
    return defaults.merged(own_compat(model)).model_dump()


# --- request ------------------------------------------------------------------------------------


def _input_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append({"type": "input_text", "text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(
                {
                    "type": "input_image",
                    "detail": "auto",
                    "image_url": f"data:{block.mime_type};base64,{block.data}",
                }
            )
    return parts


def _assistant_items(message: AssistantMessage, model: Model) -> list[dict[str, Any]]:
    same = same_source(message, model)
    items: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if not block.signature:
                continue
            try:
                item = json.loads(block.signature)
            except ValueError:
                continue
            if isinstance(item, dict) and item.get("type") == "reasoning":
                items.append(item)
        elif isinstance(block, TextContent):
            if not block.text:
                continue
            entry: dict[str, Any] = {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": block.text, "annotations": []}],
            }
            if same and block.text_signature and block.text_signature.startswith("msg"):
                entry["id"] = block.text_signature
            items.append(entry)
        elif isinstance(block, ToolCall):
            call_id, _, item_id = block.id.partition("|")
            entry = {
                "type": "function_call",
                "call_id": call_id,
                "name": block.name,
                "arguments": json.dumps(block.arguments),
            }
            if same and item_id:
                entry["id"] = item_id
            items.append(entry)
    return items


def build_input(model: Model, context: Context) -> tuple[str, list[Any], list[Any]]:
    """The instructions, the ``input`` items and the ``tools`` of a request."""
    prepared = prepare_context(model, context, normalize_tool_call_id)
    items: list[dict[str, Any]] = []
    pending_images: list[ImageContent] = []

    def flush_images() -> None:
        if pending_images:
            parts: list[dict[str, Any]] = [
                {"type": "input_text", "text": "Attached image(s) from the tool result(s) above:"}
            ]
            parts.extend(_input_parts(list(pending_images)))
            items.append({"role": "user", "content": parts})
            pending_images.clear()

    for message in prepared.messages:
        if isinstance(message, ToolResultMessage):
            text = text_of(message.content)
            images = images_of(message.content)
            if not text:
                text = "(see attached image)" if images else "(no output)"
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id.partition("|")[0],
                    "output": text,
                }
            )
            pending_images.extend(images)
            continue
        flush_images()
        if isinstance(message, AssistantMessage):
            items.extend(_assistant_items(message, model))
        else:
            items.append({"role": "user", "content": _input_parts(message.content)})
    flush_images()
    tools = [
        {
            "type": "function",
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
            "strict": False,
        }
        for tool in prepared.tools
    ]
    return prepared.system_prompt, items, tools


def prepare(
    model: Model, context: Context, options: StreamOptions, api_key: str | None
) -> PreparedRequest:
    """URL, headers and body of a streamed Responses request."""
    compat = _compat(model)
    instructions, items, tools = build_input(model, context)
    payload: dict[str, Any] = {"model": model.id, "input": items, "stream": True}
    if compat.get("supports_store"):
        payload["store"] = False
    if instructions:
        payload["instructions"] = instructions
    if options.max_tokens:
        payload["max_output_tokens"] = options.max_tokens
    if options.temperature is not None:
        payload["temperature"] = options.temperature
    if tools:
        payload["tools"] = tools
        if options.tool_choice is not None:
            payload["tool_choice"] = wire_tool_choice(options.tool_choice)
    if options.session_id and model.provider == "openai":
        payload["prompt_cache_key"] = options.session_id
    own = options.openai or OpenAIOptions()
    effort = own.reasoning_effort
    if model.reasoning:
        if effort:
            summary = own.reasoning_summary or "auto"
            payload["reasoning"] = {"effort": effort, "summary": summary}
        if compat.get("supports_include"):
            payload["include"] = ["reasoning.encrypted_content"]
    schema = options.output_schema
    if schema is not None and not llama_cpp_schema(payload, model, schema):
        payload["text"] = {"format": text_format(schema)}
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return PreparedRequest(
        url=model.base_url.rstrip("/") + "/responses", headers=headers, payload=payload
    )


def wire_tool_choice(choice: ToolChoice) -> Any:
    """``choice`` as Responses spells it: a mode as it is, a named tool as a function."""
    name = named_tool(choice)
    if name is not None:
        return {"type": "function", "name": name}
    return portable_mode(choice)


def text_format(schema: OutputSchema) -> dict[str, Any]:
    """The ``text.format`` that asks for ``schema``."""
    return {
        "type": "json_schema",
        "name": schema.name,
        "schema": closed_schema(schema.json_schema),
        "strict": schema.strict,
    }


TOOL_SEARCH_MODELS = re.compile(r"^gpt-(\d+)(?:\.(\d+))?(?![\d.])")
"""The OpenAI model ids whose version (``gpt-5.4`` and later) offers ``tool_search``."""


def supports_tool_search(model: Model) -> bool:
    """Whether ``model`` takes the client-executed ``tool_search`` tool: its
    ``compat.supports_tool_search`` when set, else OpenAI's own models from ``gpt-5.4`` on."""
    own = own_compat(model)
    if own is not None and own.supports_tool_search is not None:
        return own.supports_tool_search
    found = TOOL_SEARCH_MODELS.match(model.id) if model.provider == "openai" else None
    return found is not None and (int(found[1]), int(found[2] or 0)) >= (5, 4)


def search_natively(
    payload: dict[str, Any],
    model: Model,
    *,
    search_tool: str,
    deferred: Collection[str],
    hidden: Collection[str] = (),
    loads: Mapping[str, list[str]],
) -> dict[str, Any]:
    """Client-executed tool search, as Responses spells it (an ``on_payload`` step).

    The function tool ``search_tool`` is declared as the ``tool_search`` tool (``execution:
    "client"``, its description and parameters), in its place; each tool named in ``deferred``
    gets ``defer_loading`` (the model sees its name and description; its schema loads on
    search); a tool named in ``hidden`` is not declared at all. In the input, each call of
    ``search_tool`` goes back as the ``tool_search_call`` it came as, and its result as a
    ``tool_search_output`` holding the full declarations of the tools ``loads`` names for its
    call (by tool call id): none for a search that loaded nothing, whose text cannot ride along
    (the item has no field for one). A payload without the search tool is left as it is."""
    tools = payload.get("tools") or []
    functions = {t.get("name"): t for t in tools if t.get("type") == "function"}
    search = functions.get(search_tool)
    if search is None:
        return payload
    declared: list[dict[str, Any]] = []
    for tool in tools:
        name = tool.get("name") if tool.get("type") == "function" else None
        if tool is search:
            tool = {"type": "tool_search", "execution": "client",
                    "description": search.get("description") or "",
                    "parameters": search.get("parameters") or {"type": "object"}}  # fmt: skip
        elif name in hidden:
            continue
        elif name in deferred:
            tool["defer_loading"] = True
        declared.append(tool)
    payload["tools"] = declared
    by_call = {normalize_tool_call_id(k).partition("|")[0]: v for k, v in loads.items()}
    payload["input"] = _search_items(payload.get("input") or [], search_tool, by_call, functions)
    return payload


def _search_items(
    items: list[Any], search_tool: str, loads: Mapping[str, list[str]],
    declarations: Mapping[str, dict[str, Any]],
) -> list[Any]:  # fmt: skip
    """``items`` with the search tool's calls and results as tool search items."""
    searches: set[str] = set()
    out: list[Any] = []
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call" and item.get("name") == search_tool:
            call_id = item.get("call_id")
            searches.add(call_id)
            arguments, _ = parse_json_arguments(item.get("arguments"))
            item = {"type": "tool_search_call", "call_id": call_id, "execution": "client",
                    "arguments": as_arguments(arguments), "status": "completed",
                    **({"id": item["id"]} if item.get("id") else {})}  # fmt: skip
        elif kind == "function_call_output" and item.get("call_id") in searches:
            names = loads.get(item["call_id"]) or []
            loaded = [{k: v for k, v in declarations[n].items() if k != "defer_loading"}
                      for n in names if n in declarations]  # fmt: skip
            item = {"type": "tool_search_output", "call_id": item["call_id"],
                    "execution": "client", "status": "completed", "tools": loaded}  # fmt: skip
        out.append(item)
    return out


# --- response -----------------------------------------------------------------------------------


class ResponsesParser:
    """Assembles a message from Responses stream events."""

    def __init__(self, builder: MessageBuilder, search_tool: str | None = None) -> None:
        self.b = builder
        self.search_tool = search_tool  # the tool a client-executed tool_search_call calls
        self.searches: list[tuple[Any, dict[str, Any]]] = []  # (output_index, item): not done
        self.label = provider_label(builder.model)
        self.items: dict[str, tuple[str, int]] = {}  # item id -> (kind, content index)
        self.by_output: dict[int, str] = {}  # output_index -> item id
        self.last_item: str | None = None
        self.summary_parts: dict[str, int] = {}
        self.status: str | None = None
        self.incomplete_reason: str | None = None
        self.error: str | None = None

    def _item_id(self, data: dict[str, Any]) -> str | None:
        item_id = data.get("item_id")
        if isinstance(item_id, str) and item_id in self.items:
            return item_id
        output_index = data.get("output_index")
        if isinstance(output_index, int) and output_index in self.by_output:
            return self.by_output[output_index]
        return self.last_item

    def handle(self, event: str, data: Any) -> None:
        """Take one stream event: the handler its ``type`` names (one dict lookup per event,
        however many kinds there are); kinds we do not know are ignored."""
        if not isinstance(data, dict):
            return
        kind = str(data.get("type") or event)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, data, kind)

    def _created(self, data: dict[str, Any], kind: str) -> None:
        response = data.get("response") or {}
        if response.get("id"):
            self.b.message.response_id = str(response["id"])
        self.b.start()

    def _summary_part_added(self, data: dict[str, Any], kind: str) -> None:
        item_id = self._item_id(data)
        if item_id is not None:
            count = self.summary_parts.get(item_id, 0)
            if count:
                self._thinking_delta(data, "\n\n")
            self.summary_parts[item_id] = count + 1

    def _arguments_delta(self, data: dict[str, Any], kind: str) -> None:
        found = self._lookup(data, "tool_call")
        if found is not None:
            self.b.add_tool_args(found, str(data.get("delta") or ""))

    def _arguments_done(self, data: dict[str, Any], kind: str) -> None:
        found = self._lookup(data, "tool_call")
        arguments = data.get("arguments")
        if found is not None and isinstance(arguments, str):
            if not self.b.tool_args_text(found):
                self.b.add_tool_args(found, arguments)

    def _error(self, data: dict[str, Any], kind: str) -> None:
        raise ProviderError(f"{self.label} stream error: {vendor_error_message(data)}")

    def _lookup(self, data: dict[str, Any], want: str) -> int | None:
        item_id = self._item_id(data)
        if item_id is None:
            return None
        kind, index = self.items[item_id]
        return index if kind == want and self.b.is_open(index) else None

    def _item_added(self, data: dict[str, Any], kind: str) -> None:
        item = data.get("item") or {}
        item_type = item.get("type")
        item_id = str(item.get("id") or f"item_{len(self.items)}")
        if item_type == "reasoning":
            index = self.b.begin_thinking()
            kind = "thinking"
        elif item_type == "message":
            index = self.b.begin_text()
            kind = "text"
        elif item_type == "function_call":
            call_id = str(item.get("call_id") or item_id)
            index = self.b.begin_tool_call(f"{call_id}|{item_id}", str(item.get("name") or ""))
            kind = "tool_call"
            initial = item.get("arguments")
            if isinstance(initial, str) and initial:
                self.b.add_tool_args(index, initial)
        elif item_type == "tool_search_call" and item.get("execution") != "server":
            self.searches.append((data.get("output_index"), item))  # nothing of it streams
            return
        else:
            return  # built-in tools (web search...) are not our content
        self.items[item_id] = (kind, index)
        if isinstance(data.get("output_index"), int):
            self.by_output[data["output_index"]] = item_id
        self.last_item = item_id

    def _thinking_delta(self, data: dict[str, Any], delta: str) -> None:
        found = self._lookup(data, "thinking")
        if found is not None:
            self.b.add_thinking(found, delta)

    def _thinking_delta_event(self, data: dict[str, Any], kind: str) -> None:
        self._thinking_delta(data, str(data.get("delta") or ""))

    def _text_delta(self, data: dict[str, Any], kind: str) -> None:
        found = self._lookup(data, "text")
        if found is not None:
            self.b.add_text(found, str(data.get("delta") or ""))

    def _item_done(self, data: dict[str, Any], kind: str) -> None:
        item = data.get("item") or {}
        item_id = item.get("id")
        if item.get("type") == "tool_search_call" and item.get("execution") != "server":
            self._search_call({**self._added_search(data, item), **item})
            return
        if not isinstance(item_id, str) or item_id not in self.items:
            item_id = self._item_id(data)
        if item_id is None or item_id not in self.items:
            return
        content_kind, index = self.items[item_id]
        if not self.b.is_open(index):
            return
        if content_kind == "thinking":
            self._thinking_done(index, item)
        elif content_kind == "text":
            self._text_done(index, item, item_id)
        elif content_kind == "tool_call":
            arguments = item.get("arguments")
            if not self.b.tool_args_text(index) and isinstance(arguments, str):
                value, cut_off = parse_json_arguments(arguments)
                self.b.end_tool_call(index, as_arguments(value), cut_off)
            else:
                self.b.end_tool_call(index)

    def _added_search(self, data: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
        """The added item of the search call ``item`` ends (by its id, else by its output
        index, else the first), taken off the pending ones; ``{}`` when there is none."""
        for found, (index, added) in enumerate(self.searches):
            if (item.get("id") and added.get("id") == item["id"]) or (
                not item.get("id") and data.get("output_index") in (index, None)
            ):
                return self.searches.pop(found)[1]
        return {}

    def _search_call(self, item: dict[str, Any]) -> None:
        """A client-executed ``tool_search_call`` as a call of the search tool: its id is
        ``call_id|item_id`` (the call id answers it), its arguments the item's object (or a
        string holding one)."""
        if self.search_tool is None:
            raise ProviderError(
                f"{self.label} sent a tool_search_call, but this request declared no tool search"
            )
        call_id, arguments = item.get("call_id"), item.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            raise ProviderError(
                f"{self.label} sent a tool_search_call without a call_id: it cannot be answered"
            )
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                pass
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ProviderError(
                f"{self.label} sent a tool_search_call whose arguments are not a JSON object: "
                f"{json.dumps(arguments)[:200]}"
            )
        item_id = item.get("id")  # written back with the call when it has one
        tool_call_id = f"{call_id}|{item_id}" if isinstance(item_id, str) and item_id else call_id
        index = self.b.begin_tool_call(tool_call_id, self.search_tool)
        self.b.end_tool_call(index, arguments)

    def _thinking_done(self, index: int, item: dict[str, Any]) -> None:
        """End a reasoning block: its summary as the text if none streamed, the whole item as
        the signature (echoed back verbatim)."""
        block = self.b.message.content[index]
        if isinstance(block, ThinkingContent) and not block.thinking:
            summary = "\n\n".join(
                str(part.get("text") or "")
                for part in item.get("summary") or []
                if isinstance(part, dict)
            )
            if summary:
                self.b.add_thinking(index, summary)
        self.b.set_thinking_signature(index, json.dumps(item))
        self.b.end_thinking(index)

    def _text_done(self, index: int, item: dict[str, Any], item_id: str) -> None:
        """End a message block: its content as the text if none streamed, the item id as the
        text signature."""
        block = self.b.message.content[index]
        if isinstance(block, TextContent):
            if not block.text:
                text = "".join(
                    str(part.get("text") or part.get("refusal") or "")
                    for part in item.get("content") or []
                    if isinstance(part, dict)
                )
                self.b.add_text(index, text)
            block.text_signature = item_id
        self.b.end_text(index)

    def _response_done(self, data: dict[str, Any], kind: str) -> None:
        self._completed(data.get("response") or {}, kind)

    def _completed(self, response: dict[str, Any], kind: str) -> None:
        self.status = str(response.get("status") or kind.rsplit(".", 1)[-1])
        if response.get("id"):
            self.b.message.response_id = str(response["id"])
        usage = response.get("usage")
        if isinstance(usage, dict):
            details = usage.get("input_tokens_details")
            if details.__class__ is not dict:  # absent, null, or a server's odd value
                details = {}
            cached = tokens(details.get("cached_tokens"))
            set_usage(
                self.b.message.usage,
                input=max(tokens(usage.get("input_tokens")) - cached, 0),
                cache_read=cached,
                output=tokens(usage.get("output_tokens")),
                total=tokens(usage.get("total_tokens")) or None,
            )
        incomplete = response.get("incomplete_details") or {}
        if isinstance(incomplete, dict):
            self.incomplete_reason = incomplete.get("reason")
        error = response.get("error")
        if error:
            self.error = vendor_error_message({"error": error})

    def finish(self) -> None:
        """End the message from the final response status."""
        searches, self.searches = self.searches, []
        for _, item in searches:  # a search call whose done never came: as it was added
            self._search_call(item)
        if self.status is None:
            raise ProviderError(f"{self.label} stream ended before the response was complete")
        reason: StopReason
        if self.status == "completed":
            reason = "tool_use" if self.b.has_tool_calls() else "stop"
        elif self.status == "incomplete":
            reason = "length" if self.incomplete_reason == "max_output_tokens" else "error"
            if reason == "error":
                self.b.message.error_message = (
                    f"{self.label} stopped the response: {self.incomplete_reason or 'incomplete'}"
                )
        else:
            reason = "error"
            self.b.message.error_message = (
                f"{self.label} response {self.status}: {self.error or 'no details'}"
            )
        self.b.finish(reason)


_HANDLERS: dict[str, Callable[[ResponsesParser, dict[str, Any], str], None]] = {
    "response.created": ResponsesParser._created,
    "response.in_progress": ResponsesParser._created,
    "response.output_item.added": ResponsesParser._item_added,
    "response.reasoning_summary_text.delta": ResponsesParser._thinking_delta_event,
    "response.reasoning_text.delta": ResponsesParser._thinking_delta_event,
    "response.reasoning_summary_part.added": ResponsesParser._summary_part_added,
    "response.output_text.delta": ResponsesParser._text_delta,
    "response.refusal.delta": ResponsesParser._text_delta,
    "response.function_call_arguments.delta": ResponsesParser._arguments_delta,
    "response.function_call_arguments.done": ResponsesParser._arguments_done,
    "response.output_item.done": ResponsesParser._item_done,
    "response.completed": ResponsesParser._response_done,
    "response.incomplete": ResponsesParser._response_done,
    "response.failed": ResponsesParser._response_done,
    "error": ResponsesParser._error,
}
"""The handler of each Responses event type."""


SPEC = ApiSpec(api=API, prepare=prepare, parser=ResponsesParser, overflow=overflow.OPENAI_RESPONSES)


def stream_openai_responses(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Stream one Responses API answer (returns at once; never raises for failures)."""
    search_tool = _search_tool(options)
    if search_tool:  # its calls arrive as tool_search_call items
        spec = dataclasses.replace(SPEC, parser=partial(ResponsesParser, search_tool=search_tool))
        return run_stream(spec, model, context, options)
    return run_stream(SPEC, model, context, options)


def _search_tool(options: StreamOptions | dict[str, Any] | None) -> str | None:
    try:
        own = as_stream_options(options).openai
    except Exception:  # bad options: run_stream says so
        return None
    return own.tool_search if own is not None else None


def reasoning_options(
    model: Model, level: str | None, budgets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Provider options for a thinking level (``reasoning_effort``, summaries on)."""
    if not model.reasoning or not level or level == "off":
        return {}
    return {"openai": {"reasoning_effort": "high" if level == "xhigh" else level}}
