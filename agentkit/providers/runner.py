"""Running one model request: the skeleton of every provider's ``stream``, and its retry policy.

:func:`run_stream` returns the event stream at once. The HTTP work is a generator that yields
after each read; it runs on a daemon thread (``agentkit-http``) that ends with the request, or,
when the caller reads the stream itself at once (the agent loop, see
:func:`~agentkit.event_stream.consuming_here`), on the caller's thread as it reads: an abort
shuts the request's socket, which ends the read in progress. It never raises for a request
failure; it ends the stream with an ``error`` event instead (``reason`` ``"aborted"`` when the
signal fired). Every path out of it pushes exactly one terminal event, whatever raises and where.

The retry policy is here and only here: each attempt is one :class:`StreamingRequest`; a
connection error, HTTP 408/409/429/5xx (:data:`RETRYABLE_STATUS`), or a stream that breaks before
its first event is tried again up to ``max_retries`` times, after ``Retry-After``
(:func:`parse_retry_after`; one beyond ``max_retry_delay_ms`` fails the request) or an exponential
backoff with jitter (:func:`backoff`). Once an event reached the consumer, a failure is final.
With ``options.rate_limiter`` (:mod:`agentkit.limits`) each attempt first takes a permit from
it, and a 429 that names its wait pauses the model's bucket for every agent sharing it: the
retry then waits for its permit, not on its own (so that a model with a fallback fails over at
once instead, :mod:`agentkit.failover`).
An HTTP 5xx saying the server could not parse its own model's tool call (llama.cpp's "Failed to
parse tool call arguments", :data:`MALFORMED_CALL`) is the model's mistake: the request is asked
again at once with a note saying what went wrong (:data:`REASK_TEXT`), up to
:data:`MALFORMED_CALL_REASKS` times, before the retries above.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic_core import from_json

from .._serialize import encode_body
from ..errors import AbortError, ContextOverflowError, ProviderError, QuotaWaitError
from ..event_stream import AssistantMessageEventStream
from ..limits import clamp_retry_after
from ..transcript import user_message
from ..types import Context, Model, StreamOptions, apply_on_payload, as_stream_options
from ..waits import pause
from .builder import ABORTED_MESSAGE, MessageBuilder
from .http import StreamingRequest, _RequestAborted, scrub
from .json_stream import JsonArrayStream
from .overflow import is_context_overflow
from .sse import SSEParser
from .table import env_var_names, get_env_api_key, needs_api_key, provider_label

_SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization"}
_MAX_SNIPPET = 200
_MAX_MESSAGE = 2000  # characters of an error message, cut after keys are redacted

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides every 5xx."""

MALFORMED_CALL = re.compile(r"failed to parse (the )?(tool call|arguments)", re.IGNORECASE)
"""How a server says, in an HTTP 5xx, that it could not parse a tool call its model wrote
(llama.cpp: "Failed to parse tool call arguments as JSON: ...")."""

MALFORMED_CALL_REASKS = 2
"""How many times such a request is asked again with :data:`REASK_TEXT` appended (apart from
``max_retries``: the model made the mistake, the server is fine)."""

REASK_TEXT = (
    "Your last reply could not be read: the server could not parse a tool call in it ({detail})."
    " Call the tool again with arguments that are one complete JSON object, or answer in plain"
    " text."
)
"""The note a re-asked request ends with."""


def resolve_api_key(model: Model, options: StreamOptions) -> str | None:
    """The key to send: ``options.api_key``, else the environment; ``None`` if none is needed.

    Raises :class:`ProviderError` naming the environment variable when a vendor needs one.
    """
    if options.api_key:
        return options.api_key
    key = get_env_api_key(model.provider)
    if key:
        return key
    if not needs_api_key(model):
        return None
    names = " or ".join(env_var_names(model.provider))
    raise ProviderError(
        f"No API key for provider '{model.provider}': set {names} (or give the Agent an api_key)",
        retryable=False,
    )


class StreamParser(Protocol):
    """Turns one API's decoded stream payloads into builder calls."""

    def handle(self, event: str, data: Any) -> None:
        """Take one decoded payload (``event`` is the SSE event name, or ``"message"``)."""

    def finish(self) -> None:
        """The body ended: finish the message or raise :class:`ProviderError` if incomplete."""


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
    overflow: tuple[str, ...] = ()
    """How the API says a request did not fit the context window: regular expressions over its
    error message (read by :mod:`.overflow`)."""


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
    """Start one streamed request and return its event stream at once: on a background thread,
    or inside the caller's reads when it asked with ``consuming_here``."""
    stream = AssistantMessageEventStream()
    builder = MessageBuilder(model, stream)
    try:
        opts = as_stream_options(options)
        ctx = as_context(context)
    except Exception as exc:  # bad options must not raise either
        builder.fail("error", f"Invalid stream options or context: {exc}")
        return stream
    stream.start_producer(_run_request(spec, model, ctx, opts, builder), "agentkit-http")
    return stream


def _run_request(
    spec: ApiSpec,
    model: Model,
    context: Context,
    options: StreamOptions,
    builder: MessageBuilder,
) -> Iterator[None]:
    """The whole request, yielding after each read that may have pushed events."""
    secrets: list[str | None] = [options.api_key]
    signal = options.signal
    label = provider_label(model)
    try:
        if signal is not None and signal.aborted:
            raise _RequestAborted()
        api_key = resolve_api_key(model, options)
        secrets.append(api_key)
        prepared = spec.prepare(model, context, options, api_key)
        secrets.extend(prepared.secrets)
        secrets.extend(
            value for name, value in prepared.headers.items() if name.lower() in _SECRET_HEADERS
        )
        payload = apply_on_payload(options, prepared.payload, model)
        body = encode_body(payload)
        call = _Call(spec, prepared, body, options, builder, label, secrets, model, context, api_key)
        yield from _with_retries(call)
    except _RequestAborted:
        builder.fail("aborted", ABORTED_MESSAGE)
    except ProviderError as exc:
        if signal is not None and signal.aborted:
            builder.fail("aborted", ABORTED_MESSAGE)
        else:
            text = scrub(str(exc), secrets, _MAX_MESSAGE)
            kind: type[ProviderError] = ProviderError
            if isinstance(exc, QuotaWaitError):
                kind = QuotaWaitError
            elif is_context_overflow(text, spec.overflow):
                kind = ContextOverflowError
            error = kind(
                text, status=exc.status, retry_after=exc.retry_after, retryable=exc.retryable
            )  # what the caller may see: the scrubbed text, the status and the wait asked for
            builder.fail("error", text, error)
    except Exception as exc:  # a bug or an unexpected payload: still end the stream
        if signal is not None and signal.aborted:
            builder.fail("aborted", ABORTED_MESSAGE)
        else:
            text = scrub(f"{type(exc).__name__}: {exc}", secrets, _MAX_MESSAGE)
            builder.fail("error", f"{label} stream failed: {text}")
    finally:
        if not builder.ended:  # a BaseException, or a parser that returned without an end
            builder.fail("error", f"{label} stream ended without a result")


@dataclass
class _Call:
    """One prepared model request, as every attempt at it sends and reports it."""

    spec: ApiSpec
    prepared: PreparedRequest
    body: bytes
    options: StreamOptions
    builder: MessageBuilder
    label: str
    secrets: list[str | None]
    model: Model
    context: Context
    api_key: str | None
    held: bool = False
    """Whether the last attempt's 429 paused the rate limiter's bucket, whose permit then
    holds the retry back (so the retry loop does not wait on its own)."""

    def reasked(self, detail: str) -> _Call:
        """This request again, its context ending with :data:`REASK_TEXT` (a note for this
        request only: the transcript keeps the answer, not the note)."""
        note = user_message(REASK_TEXT.format(detail=detail))
        context = self.context.model_copy(update={"messages": [*self.context.messages, note]})
        prepared = self.spec.prepare(self.model, context, self.options, self.api_key)
        body = encode_body(apply_on_payload(self.options, prepared.payload, self.model))
        return _Call(
            self.spec, prepared, body, self.options, self.builder, self.label, self.secrets,
            self.model, context, self.api_key,
        )  # fmt: skip


def _with_retries(call: _Call) -> Iterator[None]:
    """The one retry loop: attempts until one succeeds, fails for good, or the signal fires."""
    builder, signal = call.builder, call.options.signal
    max_retries = max(int(call.options.max_retries or 0), 0)
    first, attempt, reasks = call, 0, 0
    while True:
        try:
            yield from _limited(call)
            return
        except ProviderError as exc:
            # Nothing reached the consumer yet (a refused connection, a 503, a drop right after
            # the headers, an "overloaded" error as the first event): it may be sent again.
            if builder.started or builder.ended or exc.retryable is False:
                raise
            if signal is not None and signal.aborted:
                raise _RequestAborted() from None
            found = MALFORMED_CALL.search(str(exc)) if (exc.status or 0) >= 500 else None
            if found is not None and reasks < MALFORMED_CALL_REASKS:
                # The server rejected its own model's output: ask the model again, telling it
                # why, as for a malformed call written in text (sending the same again would
                # mostly repeat the same mistake).
                reasks += 1
                detail = str(exc).split(": ", 1)[-1]
                call = first.reasked(detail[:_MAX_SNIPPET])
                continue
            if attempt >= max_retries:
                raise
            _wait(signal, _retry_delay(exc, call, attempt))
            attempt += 1


def _retry_delay(exc: ProviderError, call: _Call, attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (0-based) of ``call`` after ``exc``: the wait it
    asked for, else a backoff; 0 after a 429 that paused the rate limiter's bucket (the next
    permit waits for the pause). Raises a final error when it asked for more than
    ``max_retry_delay_ms``."""
    options = call.options
    max_delay = max(float(options.max_retry_delay_ms), 0.0) / 1000.0
    asked = exc.retry_after
    if asked is None:
        return min(backoff(options.retry_base_delay_ms, attempt), max_delay)
    if asked > max_delay:
        raise ProviderError(
            f"{call.label} asked to retry after {asked:.1f} s"
            + (f" (HTTP {exc.status})" if exc.status else "")
            + f", more than max_retry_delay_ms allows ({max_delay * 1000:.0f} ms): "
            + str(exc),
            status=exc.status,
            retry_after=asked,
            retryable=False,
        ) from None
    if call.held:
        return 0.0
    return asked


def retryable_status(status: int) -> bool:
    """Whether an HTTP ``status`` may succeed when sent again: 408, 409, 429 and every 5xx."""
    return status in RETRYABLE_STATUS or status >= 500


def parse_retry_after(headers: Any, now: float | None = None) -> float | None:
    """The delay in seconds a response asks for (``retry-after-ms``, then ``Retry-After``: a
    number of seconds or an HTTP date), as :func:`~agentkit.limits.clamp_retry_after` takes it:
    ``None`` when no header holds a usable wait (infinite, NaN, negative or not a number), at
    most a day (a date further ahead)."""
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None and clamp_retry_after(millis) is not None:
        return clamp_retry_after(millis / 1000.0)
    value = (headers.get("retry-after") or "").strip()
    if not value:
        return None
    number = _number(value)
    if number is not None:
        return clamp_retry_after(number)
    try:
        when = email.utils.parsedate_to_datetime(value)
        current = time.time() if now is None else now
        return clamp_retry_after(max(when.timestamp() - current, 0.0))
    except (TypeError, ValueError, OverflowError, IndexError):
        return None  # not a date either: no wait named


def _number(value: Any) -> float | None:
    try:
        return float(value) if value else None
    except (TypeError, ValueError):
        return None


def backoff(base_ms: float, attempt: int) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): ``base * 2**attempt``, jittered
    by 0.75 to 1.25 so that clients refused together do not come back together."""
    return base_ms / 1000.0 * (2**attempt) * (0.75 + random.random() / 2)


def _wait(signal: Any, seconds: float) -> None:
    """Wait between attempts; an abort ends the wait at once."""
    if pause(seconds, signal):
        raise _RequestAborted()


def _limited(call: _Call) -> Iterator[None]:
    """One attempt, after a permit from the request's rate limiter when it has one
    (:mod:`agentkit.limits`): the estimate is reserved first and settled with the reported usage
    after; a 429 that names its wait pauses the model's bucket for every agent sharing it. A
    pause longer than the request's ``max_retry_delay_ms`` fails it unsent (a
    :class:`~agentkit.errors.QuotaWaitError`), as a ``Retry-After`` that long would."""
    limiter = call.options.rate_limiter
    call.held = False
    if limiter is None:
        yield from _attempt(call)
        return
    model, options = call.builder.model, call.options
    try:
        permit = limiter.acquire(
            model,
            limiter.estimate(len(call.body), options.max_tokens),
            options.signal,
            max_pause=max(float(options.max_retry_delay_ms), 0.0) / 1000.0,
        )
    except AbortError:
        raise _RequestAborted() from None
    except QuotaWaitError as exc:
        raise QuotaWaitError(
            f"{call.label} request not sent: {exc}", retry_after=exc.retry_after, retryable=False
        ) from None
    except Exception as exc:  # its store is unreachable, say: nothing is sent unlimited
        raise ProviderError(
            f"{call.label} request not sent: the rate limiter failed: {type(exc).__name__}: {exc}",
            retryable=False,
        ) from None
    try:
        yield from _attempt(call)
    except ProviderError as exc:
        if exc.status == 429 and exc.retry_after is not None:
            call.held = _pause(limiter, model, exc.retry_after)
        raise
    finally:
        permit.settle(call.builder.message.usage if call.builder.started else None)


def _pause(limiter: Any, model: Model, seconds: float) -> bool:
    """Pause ``model``'s bucket after a 429, and say whether it did; a limiter that fails to
    (its store unreachable) is logged, and the 429 stays what the request reports."""
    try:
        limiter.pause(model, seconds)
        return True
    except Exception as exc:
        import logging  # at the first failure only, as agentkit.run.agentkit_logger does

        logging.getLogger("agentkit.limits").warning(
            "the rate limiter could not pause %s/%s after a 429: %s: %s",
            model.provider, model.id, type(exc).__name__, exc,
        )  # fmt: skip
        return False


def _attempt(call: _Call) -> Iterator[None]:
    """One request, from sending to the parser's ``finish``; yields after each read that
    pushed events, until the message ends (the rest of the body is then read in one go, so
    that the connection goes back to the pool)."""
    builder = call.builder
    with StreamingRequest(
        url=call.prepared.url,
        headers=call.prepared.headers,
        body=call.body,
        options=call.options,
        provider_label=call.label,
        secrets=call.secrets,
    ) as request:
        try:
            request.open()
        except ProviderError as exc:
            if exc.status is not None and exc.retryable is None:  # the server refused it
                exc.retryable = retryable_status(exc.status)
                exc.retry_after = parse_retry_after(request.response_headers)
            raise
        parser = call.spec.parser(builder)
        decoder = BodyDecoder(call.prepared.body_format, call.label, call.secrets)
        for chunk in request.iter_bytes():
            if request.aborted:
                raise _RequestAborted()
            for event, data in decoder.feed(chunk):
                parser.handle(event, data)
            builder.flush()  # coalesced tool-argument deltas: as fresh as the last read
            if not builder.ended:
                yield
        for event, data in decoder.close():
            parser.handle(event, data)
        if request.aborted:
            raise _RequestAborted()
        parser.finish()


class BodyDecoder:
    """Turns the body's chunks into ``(event name, decoded JSON)`` payloads; ``[DONE]`` gives
    ``("done", None)``.

    ``"sse-or-json-array"`` sniffs the first non-blank byte: ``[`` means a streamed JSON array
    (Gemini without ``alt=sse``), anything else server-sent events.
    """

    def __init__(self, body_format: str, label: str, secrets: list[str | None]) -> None:
        self._label = label
        self._secrets = secrets
        self._sniff = body_format == "sse-or-json-array"
        self._head = b""
        self._sse: SSEParser | None = None if self._sniff else SSEParser()
        self._array: JsonArrayStream | None = None

    def feed(self, chunk: bytes) -> Iterator[tuple[str, Any]]:
        """The payloads completed by ``chunk``, in order, each decoded as it is taken: one
        read may bring many events, and a malformed one must not cost those before it."""
        if self._sse is None and self._array is None:
            self._head += chunk
            stripped = self._head.lstrip()
            if not stripped:
                return
            chunk, self._head = self._head, b""
            if stripped.startswith(b"["):
                self._array = JsonArrayStream()
            else:
                self._sse = SSEParser()
        if self._array is not None:
            for element in self._array.feed(chunk):
                yield "message", self._loads(element)
            return
        assert self._sse is not None
        yield from self._payloads(self._sse.feed(chunk))

    def close(self) -> Iterator[tuple[str, Any]]:
        """The body ended: the payloads of a last event that lacked its blank line."""
        if self._sse is not None:
            yield from self._payloads(self._sse.close())

    def _payloads(self, events: list[Any]) -> Iterator[tuple[str, Any]]:
        for sse in events:
            text = sse.data.strip()
            if not text:
                continue
            if text == "[DONE]":
                yield "done", None
            else:
                yield sse.event, self._loads(text)

    def _loads(self, text: str) -> Any:
        try:
            return from_json(text)  # a few times faster than json.loads on small payloads
        except ValueError:
            pass
        try:
            return json.loads(text)  # lone surrogate escapes, which the builder then cleans
        except ValueError:
            snippet = scrub(text, self._secrets, _MAX_SNIPPET)
            raise ProviderError(
                f"{self._label} sent malformed JSON in its stream: {snippet!r}"
            ) from None


def vendor_error_message(data: Any) -> str:
    """A readable message from an ``error`` payload found inside a stream."""
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or json.dumps(error)
        return str(message)
    return str(error)  # not cut here: the runner redacts keys first, then cuts
