"""Google Gemini (``POST {base_url}/models/{id}:streamGenerateContent``).

Reads both stream forms: server-sent events (``?alt=sse``, the default) and the JSON array the
endpoint writes without ``alt=sse`` (``Model(compat={"sse": False})``); the first byte of the body
decides. Parts marked ``thought`` become thinking; a part's ``thoughtSignature`` stays with its
block and is echoed back to Gemini; function calls, which carry no id, get a generated one.
``usage.output`` counts candidates plus thoughts (the counts are cumulative per chunk), and a
``STOP`` that carries a function call is ``tool_use``.

Gemini's own options are ``StreamOptions.google`` (:class:`~agentkit.types.GoogleOptions`:
``thinking``, ``include_thoughts``, ``thinking_level``, ``thinking_budget_tokens``).
``tool_choice`` is sent as ``toolConfig.functionCallingConfig`` (a named tool as mode ``ANY``
with ``allowedFunctionNames``); ``output_schema`` as ``responseSchema``, in the OpenAPI subset
Gemini takes (:func:`openapi_schema`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import ProviderError
from ..event_stream import AssistantMessageEventStream
from ..types import (
    AssistantMessage,
    Context,
    GoogleOptions,
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
from .table import own_compat, provider_label
from .transform import prepare_context, same_source
from .wire import llama_cpp_schema, named_tool, portable_mode

API = "google-generative-ai"

SKIP_SIGNATURE = "skip_thought_signature_validator"
"""The placeholder Google documents for function calls without a Gemini thought signature."""

DEFAULT_THINKING_BUDGETS: dict[str, int] = {
    "minimal": 512,
    "low": 2048,
    "medium": 8192,
    "high": 24576,
    "xhigh": 32768,
}
"""``thinkingBudget`` per level for models that take a budget (Gemini 2.5)."""


def generate_tool_call_id(name: str) -> str:
    """An id for a Gemini function call (the API gives none)."""
    return f"{name}_{uuid.uuid4().hex[:12]}"


# --- request ------------------------------------------------------------------------------------


def _image(block: ImageContent) -> dict[str, Any]:
    return {"inlineData": {"mimeType": block.mime_type, "data": block.data}}


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for block in content:
        if isinstance(block, TextContent) and block.text:
            parts.append({"text": block.text})
        elif isinstance(block, ImageContent):
            parts.append(_image(block))
    return parts


def _model_parts(message: AssistantMessage, model: Model) -> list[dict[str, Any]]:
    same = same_source(message, model)
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if not block.thinking.strip() and not block.signature:
                continue
            part: dict[str, Any] = {"text": block.thinking, "thought": True}
            if same and block.signature:
                part["thoughtSignature"] = block.signature
            parts.append(part)
        elif isinstance(block, TextContent):
            if not block.text and not block.text_signature:
                continue
            part = {"text": block.text}
            if same and block.text_signature:
                part["thoughtSignature"] = block.text_signature
            parts.append(part)
        elif isinstance(block, ToolCall):
            part = {"functionCall": {"name": block.name, "args": block.arguments}}
            if same and block.thought_signature:
                part["thoughtSignature"] = block.thought_signature
            elif model.id.startswith("gemini-3"):
                # Gemini 3 insists on a signature for replayed calls; Google documents this
                # placeholder for calls that did not come from Gemini.
                part["thoughtSignature"] = SKIP_SIGNATURE
            parts.append(part)
    return parts


def _function_response(message: ToolResultMessage) -> list[dict[str, Any]]:
    text = "\n".join(b.text for b in message.content if isinstance(b, TextContent))
    images = [b for b in message.content if isinstance(b, ImageContent)]
    key = "error" if message.is_error else "output"
    if not text:
        text = "(see attached image)" if images else "(no output)"
    parts: list[dict[str, Any]] = [
        {"functionResponse": {"name": message.tool_name, "response": {key: text}}}
    ]
    parts.extend(_image(img) for img in images)
    return parts


def build_contents(model: Model, context: Context) -> tuple[str, list[Any], list[Any]]:
    """The system instruction, ``contents`` (consecutive roles merged) and function declarations."""
    prepared = prepare_context(model, context)
    contents: list[dict[str, Any]] = []

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})

    for message in prepared.messages:
        if isinstance(message, ToolResultMessage):
            add("user", _function_response(message))
        elif isinstance(message, AssistantMessage):
            add("model", _model_parts(message, model))
        else:
            add("user", _user_parts(message.content))
    declarations = [
        {"name": t.name, "description": t.description, "parametersJsonSchema": t.parameters}
        for t in prepared.tools
    ]
    return prepared.system_prompt, contents, declarations


def prepare(
    model: Model, context: Context, options: StreamOptions, api_key: str | None
) -> PreparedRequest:
    """URL, headers and body of a streamed generateContent request."""
    system, contents, declarations = build_contents(model, context)
    payload: dict[str, Any] = {"contents": contents}
    if system:
        payload["systemInstruction"] = {"parts": [{"text": system}]}
    if declarations:
        payload["tools"] = [{"functionDeclarations": declarations}]
        if options.tool_choice is not None:
            payload["toolConfig"] = wire_tool_choice(options.tool_choice)
    config: dict[str, Any] = {}
    if options.max_tokens:
        config["maxOutputTokens"] = options.max_tokens
    if options.temperature is not None:
        config["temperature"] = options.temperature
    own = options.google or GoogleOptions()
    if model.reasoning and own.thinking:
        thinking_config: dict[str, Any] = {"includeThoughts": own.include_thoughts}
        if own.thinking_level:
            thinking_config["thinkingLevel"] = own.thinking_level
        elif own.thinking_budget_tokens is not None:
            thinking_config["thinkingBudget"] = own.thinking_budget_tokens
        config["thinkingConfig"] = thinking_config
    if config:
        payload["generationConfig"] = config
    schema = options.output_schema
    if schema is not None and not llama_cpp_schema(payload, model, schema):
        payload["generationConfig"] = {
            **config,
            "responseMimeType": "application/json",
            "responseSchema": openapi_schema(schema.json_schema),
        }
    compat = own_compat(model)
    use_sse = compat is None or compat.sse is not False
    url = f"{model.base_url.rstrip('/')}/models/{model.id}:streamGenerateContent"
    if use_sse:
        url += "?alt=sse"
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["x-goog-api-key"] = api_key
    headers.update(model.headers or {})
    headers.update(options.headers or {})
    return PreparedRequest(
        url=url, headers=headers, payload=payload, body_format="sse-or-json-array"
    )


def wire_tool_choice(choice: ToolChoice) -> Any:
    """``choice`` as Gemini spells it: a ``functionCallingConfig`` mode (``"required"`` is
    ``ANY``), a named tool as ``ANY`` with ``allowedFunctionNames``; a dict (the API's own
    value) as it is."""
    name = named_tool(choice)
    if name is not None:
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    if isinstance(choice, dict):
        return choice
    mode = portable_mode(choice)
    return {"functionCallingConfig": {"mode": "ANY" if mode == "required" else str(mode).upper()}}


_OPENAPI_KEYS = frozenset(
    {
        "type", "format", "description", "nullable", "enum", "items", "properties", "required",
        "minItems", "maxItems", "minimum", "maximum", "anyOf", "propertyOrdering",
    }
)


def openapi_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in the OpenAPI subset Gemini's ``responseSchema`` takes: ``$ref`` inlined,
    ``["x", "null"]`` and ``anyOf [x, null]`` as ``nullable``, ``const`` as a one-value enum,
    unsupported keys dropped."""
    defs = schema.get("$defs") or {}

    def convert(node: Any, depth: int = 0) -> Any:
        if not isinstance(node, dict) or depth > 32:
            return {}
        if "$ref" in node:
            target = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
            return convert({**target, **{k: v for k, v in node.items() if k != "$ref"}}, depth + 1)
        node = dict(node)
        if "const" in node:
            node["enum"] = [node.pop("const")]
        variants = node.get("anyOf")
        if isinstance(variants, list):
            rest = [v for v in variants if v != {"type": "null"}]
            if len(rest) < len(variants):
                node["nullable"] = True
            if len(rest) == 1:
                del node["anyOf"]
                node = {**convert(rest[0], depth + 1), **{k: v for k, v in node.items()}}
            else:
                node["anyOf"] = rest
        types = node.get("type")
        if isinstance(types, list):
            kinds = [t for t in types if t != "null"]
            if len(kinds) < len(types):
                node["nullable"] = True
            node["type"] = kinds[0] if kinds else "string"
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key not in _OPENAPI_KEYS:
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: convert(v, depth + 1) for k, v in value.items()}
            elif key == "items":
                out[key] = convert(value, depth + 1)
            elif key == "anyOf" and isinstance(value, list):
                out[key] = [convert(v, depth + 1) for v in value]
            elif key == "type" and isinstance(value, str):
                out[key] = value.upper()
            else:
                out[key] = value
        return out

    return convert(schema)


# --- response -----------------------------------------------------------------------------------

_FINISH_REASONS: dict[str, StopReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "FUNCTION_CALL": "tool_use",
}


class GenerateContentParser:
    """Assembles a message from Gemini response chunks."""

    def __init__(self, builder: MessageBuilder) -> None:
        self.b = builder
        self.label = provider_label(builder.model)
        self.current: tuple[str, int] | None = None  # the open text or thinking block
        self.finish_reason: str | None = None

    def handle(self, event: str, data: Any) -> None:
        """Take one response chunk."""
        if not isinstance(data, dict):
            return
        if data.get("error"):
            raise ProviderError(f"{self.label} stream error: {vendor_error_message(data)}")
        if data.get("responseId") and not self.b.message.response_id:
            self.b.message.response_id = str(data["responseId"])
        self.b.start()
        usage = data.get("usageMetadata")
        if isinstance(usage, dict):
            prompt = tokens(usage.get("promptTokenCount"))
            cached = tokens(usage.get("cachedContentTokenCount"))
            output = tokens(usage.get("candidatesTokenCount")) + tokens(
                usage.get("thoughtsTokenCount")
            )
            set_usage(
                self.b.message.usage,
                input=max(prompt - cached, 0),
                cache_read=cached,
                output=output,
                total=tokens(usage.get("totalTokenCount")) or None,
            )
        candidates = data.get("candidates") or []
        if not candidates:
            feedback = data.get("promptFeedback") or {}
            if feedback.get("blockReason"):
                self.finish_reason = str(feedback["blockReason"])
            return
        candidate = candidates[0]
        for part in (candidate.get("content") or {}).get("parts") or []:
            if isinstance(part, dict):
                self._part(part)
        if candidate.get("finishReason"):
            self.finish_reason = str(candidate["finishReason"])

    def _close_current(self) -> None:
        if self.current is None:
            return
        kind, index = self.current
        if kind == "text":
            self.b.end_text(index)
        else:
            self.b.end_thinking(index)
        self.current = None

    def _part(self, part: dict[str, Any]) -> None:
        signature = part.get("thoughtSignature")
        call = part.get("functionCall")
        if isinstance(call, dict):
            self._close_current()
            name = str(call.get("name") or "")
            call_id = str(call.get("id") or generate_tool_call_id(name))
            index = self.b.begin_tool_call(call_id, name, thought_signature=signature or None)
            args = call.get("args")
            arguments = args if isinstance(args, dict) else {}
            self.b.add_tool_args(index, json.dumps(arguments))
            self.b.end_tool_call(index, arguments)
            return
        text = part.get("text")
        if not isinstance(text, str):
            return
        kind = "thinking" if part.get("thought") else "text"
        if self.current is None or self.current[0] != kind:
            if not text and not signature:
                return  # Gemini ends with an empty text part: no block for it
            self._close_current()
            if kind == "thinking":
                self.current = (kind, self.b.begin_thinking(signature=signature or None))
            else:
                self.current = (kind, self.b.begin_text(signature=signature or None))
        _, index = self.current
        if signature:
            block = self.b.message.content[index]
            if isinstance(block, ThinkingContent):
                block.signature = signature
            elif isinstance(block, TextContent):
                block.text_signature = signature
        if kind == "thinking":
            self.b.add_thinking(index, text)
        else:
            self.b.add_text(index, text)

    def finish(self) -> None:
        """End the message; a body without a finish reason is incomplete."""
        if self.finish_reason is None:
            raise ProviderError(f"{self.label} stream ended before the response was complete")
        self._close_current()
        self.b.finish_from(self.finish_reason, _FINISH_REASONS, self.label, "error")


SPEC = ApiSpec(api=API, prepare=prepare, parser=GenerateContentParser, overflow=overflow.GOOGLE)


def stream_google(
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None = None,
) -> AssistantMessageEventStream:
    """Stream one Gemini answer (returns at once; never raises for failures)."""
    return run_stream(SPEC, model, context, options)


def reasoning_options(
    model: Model, level: str | None, budgets: dict[str, int] | None = None
) -> dict[str, Any]:
    """Provider options for a thinking level: ``thinkingLevel`` on Gemini 3, a budget before."""
    if not model.reasoning or not level or level == "off":
        return {}
    if model.id.startswith("gemini-3"):
        return {
            "google": {
                "thinking": True,
                "thinking_level": "low" if level in ("minimal", "low") else "high",
            }
        }
    budget = (budgets or {}).get(level) or DEFAULT_THINKING_BUDGETS.get(level, 8192)
    return {"google": {"thinking": True, "thinking_budget_tokens": budget}}
