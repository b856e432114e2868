"""What the four wire APIs share: building the streamed message, and running one request.

:class:`MessageBuilder` fills the live ``partial`` :class:`AssistantMessage` and pushes the
matching provider events. :func:`run_stream` is the skeleton of every provider's ``stream``: it
returns the event stream at once and does the HTTP work on a daemon thread (``agentkit-http``)
that ends with the request. It never raises for a request failure; it ends the stream with an
``error`` event instead (``reason`` ``"aborted"`` when the signal fired).
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..event_stream import AssistantMessageEventStream
from ..events import (
    DoneEvent,
    ErrorEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ThinkingDeltaEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ToolCallDeltaEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ..types import (
    AssistantMessage,
    Context,
    Model,
    StopReason,
    StreamOptions,
    TextContent,
    ThinkingContent,
    ToolCall,
    Usage,
    as_stream_options,
)
from .http import RequestAborted, RequestFailed, StreamingRequest, is_local_url, scrub
from .json_stream import JsonArrayStream, ToolArgsBuffer
from .keys import env_var_names, get_env_api_key
from .sse import SSEParser

PROVIDER_LABELS: dict[str, str] = {
    "openai": "OpenAI",
    "anthropic": "Anthropic",
    "google": "Google Gemini",
    "groq": "Groq",
    "openrouter": "OpenRouter",
    "deepseek": "DeepSeek",
    "xai": "xAI",
    "mistral": "Mistral",
    "cerebras": "Cerebras",
    "together": "Together AI",
    "fireworks": "Fireworks",
    "local": "The local model server",
    "ollama": "Ollama",
    "llamacpp": "llama.cpp",
    "vllm": "vLLM",
    "lmstudio": "LM Studio",
}

ABORTED_MESSAGE = "Request was aborted"
"""The ``error_message`` of a message whose request was aborted."""

_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization"}
_KEYLESS_PROVIDERS = {"local", "ollama", "llamacpp", "vllm", "lmstudio"}


def provider_label(model: Model) -> str:
    """The vendor's name as messages show it (``"Anthropic"``, ``"OpenAI"``...)."""
    return PROVIDER_LABELS.get(model.provider, model.provider or "The provider")


def resolve_api_key(model: Model, options: StreamOptions) -> str | None:
    """The key to send: ``options.api_key``, else the environment; ``None`` if none is needed.

    Raises :class:`RequestFailed` naming the environment variable when a vendor needs one.
    """
    if options.api_key:
        return options.api_key
    key = get_env_api_key(model.provider)
    if key:
        return key
    if model.provider in _KEYLESS_PROVIDERS or is_local_url(model.base_url):
        return None
    names = " or ".join(env_var_names(model.provider))
    raise RequestFailed(
        f"No API key for provider '{model.provider}': set {names} or pass api_key in the options"
    )


def compute_cost(model: Model, usage: Usage) -> None:
    """Fill ``usage.cost`` from the token counts and ``model.cost`` (USD per million tokens)."""
    prices = model.cost
    cost = usage.cost
    cost.input = usage.input * prices.input / 1_000_000
    cost.output = usage.output * prices.output / 1_000_000
    cost.cache_read = usage.cache_read * prices.cache_read / 1_000_000
    cost.cache_write = usage.cache_write * prices.cache_write / 1_000_000
    cost.total = cost.input + cost.output + cost.cache_read + cost.cache_write


def set_usage(
    usage: Usage,
    *,
    input: int | None = None,
    output: int | None = None,
    cache_read: int | None = None,
    cache_write: int | None = None,
    total: int | None = None,
) -> None:
    """Update token counts (``None`` keeps a field); the total defaults to the sum."""
    if input is not None:
        usage.input = max(int(input), 0)
    if output is not None:
        usage.output = max(int(output), 0)
    if cache_read is not None:
        usage.cache_read = max(int(cache_read), 0)
    if cache_write is not None:
        usage.cache_write = max(int(cache_write), 0)
    summed = usage.input + usage.output + usage.cache_read + usage.cache_write
    usage.total_tokens = max(int(total), summed) if total is not None else summed


class MessageBuilder:
    """Fills the live partial message of one response and pushes the matching events.

    Block indexes are positions in ``message.content``. Text and thinking grow by string
    concatenation; tool-call arguments go through :class:`ToolArgsBuffer` (see its module for
    the linear-cost partial-parse schedule).
    """

    def __init__(self, model: Model, stream: AssistantMessageEventStream) -> None:
        self.model = model
        self.stream = stream
        self.message = AssistantMessage(
            content=[], api=model.api, provider=model.provider, model=model.id
        )
        self.started = False
        # Guards _ended: the worker ends the stream, except that an abort while the request is
        # still connecting ends it from the aborting thread (see StreamingRequest).
        self._end_lock = threading.Lock()
        self._ended = False
        self._args: dict[int, ToolArgsBuffer] = {}
        self._open: dict[int, str] = {}  # index -> "text" | "thinking" | "tool_call"

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Push the ``start`` event (once)."""
        if not self.started:
            self.started = True
            self.stream.push(StartEvent(partial=self.message))

    def is_open(self, index: int) -> bool:
        """Whether the block at ``index`` has started and not yet ended."""
        return index in self._open

    def open_kind(self, index: int) -> str | None:
        """``"text"``, ``"thinking"`` or ``"tool_call"`` for an open block, else ``None``."""
        return self._open.get(index)

    # --- text -------------------------------------------------------------------------------

    def begin_text(self, text: str = "", signature: str | None = None) -> int:
        """Open a text block; return its index."""
        self.start()
        index = len(self.message.content)
        self.message.content.append(TextContent(text="", text_signature=signature))
        self._open[index] = "text"
        self.stream.push(TextStartEvent(content_index=index, partial=self.message))
        if text:
            self.add_text(index, text)
        return index

    def add_text(self, index: int, delta: str) -> None:
        """Append to the text block at ``index``."""
        if not delta:
            return
        block = self.message.content[index]
        assert isinstance(block, TextContent)
        block.text = block.text + delta
        self.stream.push(TextDeltaEvent(content_index=index, delta=delta, partial=self.message))

    def end_text(self, index: int) -> None:
        """Close the text block at ``index``."""
        if self._open.pop(index, None) is None:
            return
        block = self.message.content[index]
        assert isinstance(block, TextContent)
        self.stream.push(
            TextEndEvent(content_index=index, content=block.text, partial=self.message)
        )

    # --- thinking ---------------------------------------------------------------------------

    def begin_thinking(
        self, thinking: str = "", signature: str | None = None, redacted: bool = False
    ) -> int:
        """Open a thinking block; return its index."""
        self.start()
        index = len(self.message.content)
        self.message.content.append(
            ThinkingContent(thinking="", signature=signature, redacted=redacted)
        )
        self._open[index] = "thinking"
        self.stream.push(ThinkingStartEvent(content_index=index, partial=self.message))
        if thinking:
            self.add_thinking(index, thinking)
        return index

    def add_thinking(self, index: int, delta: str) -> None:
        """Append to the thinking block at ``index``."""
        if not delta:
            return
        block = self.message.content[index]
        assert isinstance(block, ThinkingContent)
        block.thinking = block.thinking + delta
        self.stream.push(ThinkingDeltaEvent(content_index=index, delta=delta, partial=self.message))

    def set_thinking_signature(self, index: int, signature: str, append: bool = False) -> None:
        """Set (or extend) the signature of the thinking block at ``index``."""
        block = self.message.content[index]
        assert isinstance(block, ThinkingContent)
        block.signature = (block.signature or "") + signature if append else signature

    def end_thinking(self, index: int) -> None:
        """Close the thinking block at ``index``."""
        if self._open.pop(index, None) is None:
            return
        block = self.message.content[index]
        assert isinstance(block, ThinkingContent)
        self.stream.push(
            ThinkingEndEvent(content_index=index, content=block.thinking, partial=self.message)
        )

    # --- tool calls -------------------------------------------------------------------------

    def begin_tool_call(self, call_id: str, name: str, thought_signature: str | None = None) -> int:
        """Open a tool call; return its index. Arguments follow via :meth:`add_tool_args`."""
        self.start()
        index = len(self.message.content)
        self.message.content.append(
            ToolCall(id=call_id, name=name, arguments={}, thought_signature=thought_signature)
        )
        self._open[index] = "tool_call"
        self._args[index] = ToolArgsBuffer()
        self.stream.push(ToolCallStartEvent(content_index=index, partial=self.message))
        return index

    def add_tool_args(self, index: int, delta: str) -> None:
        """Append raw JSON text to the arguments of the tool call at ``index``."""
        if not delta:
            return
        buffer = self._args[index]
        buffer.append(delta)
        partial = buffer.partial()
        if partial is not None:
            block = self.message.content[index]
            assert isinstance(block, ToolCall)
            block.arguments = partial
        self.stream.push(ToolCallDeltaEvent(content_index=index, delta=delta, partial=self.message))

    def tool_args_text(self, index: int) -> str:
        """The raw arguments text received so far for the call at ``index``."""
        buffer = self._args.get(index)
        return buffer.text if buffer is not None else ""

    def end_tool_call(self, index: int, arguments: dict[str, Any] | None = None) -> None:
        """Close the tool call at ``index``; ``arguments`` (if given) replace the streamed text."""
        if self._open.pop(index, None) is None:
            return
        block = self.message.content[index]
        assert isinstance(block, ToolCall)
        buffer = self._args.pop(index, None)
        if arguments is not None:
            block.arguments = arguments
        elif buffer is not None:
            block.arguments = buffer.final()
        self.stream.push(
            ToolCallEndEvent(content_index=index, tool_call=block, partial=self.message)
        )

    # --- the end ----------------------------------------------------------------------------

    def end_open_blocks(self) -> None:
        """Close every block still open, in index order, with its end event."""
        for index in sorted(self._open):
            kind = self._open.get(index)
            if kind == "text":
                self.end_text(index)
            elif kind == "thinking":
                self.end_thinking(index)
            elif kind == "tool_call":
                self.end_tool_call(index)

    def has_tool_calls(self) -> bool:
        """Whether the message asks for a tool call."""
        return any(isinstance(block, ToolCall) for block in self.message.content)

    def finish(self, stop_reason: StopReason) -> None:
        """End the stream successfully (or with ``error`` if the vendor reported one)."""
        if stop_reason == "error" or stop_reason == "aborted":
            self.end_open_blocks()
            self.fail(stop_reason, self.message.error_message or "The model reported an error")
            return
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        self.end_open_blocks()
        compute_cost(self.model, self.message.usage)
        self.message.stop_reason = stop_reason
        self.stream.push(DoneEvent(reason=stop_reason, message=self.message))

    def finish_from(
        self, raw: str, reasons: dict[str, StopReason], label: str, default: StopReason
    ) -> None:
        """End with the vendor's finish reason ``raw`` mapped through ``reasons``: a ``stop``
        that carries tool calls is ``tool_use``; an unmapped error names the raw reason."""
        reason = reasons.get(raw, default)
        if reason == "stop" and self.has_tool_calls():
            reason = "tool_use"
        if reason == "error":
            self.message.error_message = f"{label} stopped the response: {raw}"
        self.finish(reason)

    def fail(self, reason: Literal["error", "aborted"], error_message: str) -> None:
        """End the stream with an ``error`` event, keeping what arrived so far (first end wins)."""
        with self._end_lock:
            if self._ended:
                return
            self._ended = True
        for index in list(self._open):
            if self._open.get(index) == "tool_call":
                block = self.message.content[index]
                buffer = self._args.pop(index, None)
                if isinstance(block, ToolCall) and buffer is not None:
                    block.arguments = buffer.final()
        self._open.clear()
        compute_cost(self.model, self.message.usage)
        self.message.stop_reason = reason
        self.message.error_message = error_message
        self.stream.push(ErrorEvent(reason=reason, error=self.message))


# --- running one request ------------------------------------------------------------------------


class StreamParser(Protocol):
    """Turns one API's decoded stream payloads into builder calls."""

    def handle(self, event: str, data: Any) -> None:
        """Take one decoded payload (``event`` is the SSE event name, or ``"message"``)."""

    def finish(self) -> None:
        """The body ended: finish the message or raise :class:`RequestFailed` if incomplete."""


@dataclass
class PreparedRequest:
    """What a provider sends: the URL, headers and JSON body."""

    url: str
    headers: dict[str, str]
    payload: dict[str, Any]
    body_format: Literal["sse", "sse-or-json-array"] = "sse"
    secrets: list[str] = field(default_factory=list)


@dataclass
class ApiSpec:
    """How one wire API does its job, for :func:`run_stream`."""

    api: str
    prepare: Callable[[Model, Context, StreamOptions, str | None], PreparedRequest]
    parser: Callable[[MessageBuilder], StreamParser]


def as_context(context: Any) -> Context:
    """Accept a :class:`Context`, a dict with the same keys, any object with ``messages`` (and
    optionally ``system_prompt`` and ``tools``), or ``None``."""
    if context is None:
        return Context()
    if isinstance(context, Context):
        return context
    if isinstance(context, dict):
        return Context.model_validate(context)
    return Context(
        messages=list(getattr(context, "messages", None) or []),
        system_prompt=getattr(context, "system_prompt", None),
        tools=getattr(context, "tools", None),
    )


def run_stream(
    spec: ApiSpec,
    model: Model,
    context: Context | dict[str, Any] | None,
    options: StreamOptions | dict[str, Any] | None,
) -> AssistantMessageEventStream:
    """Start one streamed request on a background thread and return its event stream at once."""
    stream = AssistantMessageEventStream()
    builder = MessageBuilder(model, stream)
    try:
        opts = as_stream_options(options)
        ctx = as_context(context)
    except Exception as exc:  # bad options must not raise either
        builder.fail("error", f"Invalid stream options or context: {exc}")
        return stream
    thread = threading.Thread(
        target=_run_request,
        args=(spec, model, ctx, opts, builder),
        name="agentkit-http",
        daemon=True,
    )
    stream.set_producer(thread)  # result() returns once the request thread is gone
    thread.start()
    return stream


def _run_request(
    spec: ApiSpec,
    model: Model,
    context: Context,
    options: StreamOptions,
    builder: MessageBuilder,
) -> None:
    secrets: list[str | None] = [options.api_key]
    signal = options.signal
    label = provider_label(model)
    try:
        if signal is not None and signal.aborted:
            raise RequestAborted()
        api_key = resolve_api_key(model, options)
        secrets.append(api_key)
        prepared = spec.prepare(model, context, options, api_key)
        secrets.extend(prepared.secrets)
        secrets.extend(
            value for name, value in prepared.headers.items() if name.lower() in _SECRET_HEADERS
        )
        payload = _apply_on_payload(options, prepared.payload, model)
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        retries_used = 0
        while True:
            with StreamingRequest(
                url=prepared.url,
                headers=prepared.headers,
                body=body,
                options=options,
                provider_label=label,
                secrets=secrets,
                retries_used=retries_used,
                on_abort_while_connecting=lambda: builder.fail("aborted", ABORTED_MESSAGE),
            ) as request:
                request.open()
                parser = spec.parser(builder)
                try:
                    for event, data in decode_body(request, prepared.body_format, label):
                        if request.aborted:
                            raise RequestAborted()
                        parser.handle(event, data)
                    if request.aborted:
                        raise RequestAborted()
                    parser.finish()
                    return
                except RequestFailed:
                    # Nothing reached the consumer yet (a drop right after the headers, an
                    # "overloaded" error as the first event): the request may be sent again.
                    # Once an event was delivered, a failure is final.
                    if builder.started or request.aborted:
                        raise
                    if request.retries_used >= request.max_retries:
                        raise
                    request.sleep(request.backoff())
                    retries_used = request.retries_used + 1
    except RequestAborted:
        builder.fail("aborted", ABORTED_MESSAGE)
    except RequestFailed as exc:
        if signal is not None and signal.aborted:
            builder.fail("aborted", ABORTED_MESSAGE)
        else:
            builder.fail("error", scrub(str(exc), secrets))
    except Exception as exc:  # a bug or an unexpected payload: still end the stream
        if signal is not None and signal.aborted:
            builder.fail("aborted", ABORTED_MESSAGE)
        else:
            text = scrub(f"{type(exc).__name__}: {exc}", secrets)
            builder.fail("error", f"{label} stream failed: {text}")


def _apply_on_payload(options: StreamOptions, payload: dict[str, Any], model: Model) -> Any:
    """Let ``options.on_payload(payload, model)`` (or ``(payload)``) see or replace the body."""
    hook = options.on_payload
    if hook is None:
        return payload
    replaced = hook(payload, model) if _takes_two_arguments(hook) else hook(payload)
    return payload if replaced is None else replaced


def _takes_two_arguments(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = 0
    for parameter in parameters:
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if parameter.kind in (
            inspect.Parameter.POSITIONAL_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            positional += 1
    return positional >= 2


def decode_body(
    request: StreamingRequest, body_format: str, label: str
) -> Iterator[tuple[str, Any]]:
    """The body's payloads as ``(event name, decoded JSON)``; ``[DONE]`` gives ``("done", None)``.

    ``"sse-or-json-array"`` sniffs the first byte: ``[`` means a streamed JSON array (Gemini
    without ``alt=sse``), anything else server-sent events.
    """
    chunks = request.iter_bytes()
    if body_format == "sse-or-json-array":
        head = b""
        for chunk in chunks:
            head += chunk
            if head.lstrip():
                break
        rest = _prepend(head, chunks)
        if head.lstrip().startswith(b"["):
            array = JsonArrayStream()
            for chunk in rest:
                for element in array.feed(chunk):
                    yield "message", _loads(element, label)
            return
        chunks = rest
    parser = SSEParser()
    for chunk in chunks:
        for sse in parser.feed(chunk):
            yield from _sse_payload(sse.event, sse.data, label)
    for sse in parser.close():
        yield from _sse_payload(sse.event, sse.data, label)


def _prepend(head: bytes, chunks: Iterator[bytes]) -> Iterator[bytes]:
    if head:
        yield head
    yield from chunks


def _sse_payload(event: str, data: str, label: str) -> Iterator[tuple[str, Any]]:
    text = data.strip()
    if not text:
        return
    if text == "[DONE]":
        yield "done", None
        return
    yield event, _loads(text, label)


def _loads(text: str, label: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        snippet = text[:200]
        raise RequestFailed(f"{label} sent malformed JSON in its stream: {snippet!r}") from None


def vendor_error_message(data: Any) -> str:
    """A readable message from an ``error`` payload found inside a stream."""
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or json.dumps(error)[:500]
        return str(message)
    return str(error)[:500]
