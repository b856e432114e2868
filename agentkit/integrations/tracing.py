"""Tracing and logging for agent runs: OpenTelemetry spans after the GenAI semantic conventions
(install the ``otel`` extra), and stdlib ``logging`` records.

Both are event listeners, so the loop knows nothing about them and an agent without them pays
nothing. One call turns each on for an agent:

    from agentkit.integrations.tracing import enable_tracing, enable_logging
    enable_tracing(agent)                    # spans: invoke_agent > chat, execute_tool
    enable_logging(agent)                    # records on the "agentkit.run" logger

Spans: one ``invoke_agent`` per run, a child of whatever span was current where the run was
started (the run's worker thread inherits the caller's context); one ``chat`` per model request
(model, token usage, finish reasons, errors); one ``execute_tool`` per tool call. While the run
goes on, ``invoke_agent`` is the current span of the worker thread, ``chat`` while a request is
made (so a provider's HTTP spans nest under it), and each call's ``execute_tool`` while that call
executes on the tool pool (so spans a tool makes, an HTTP client's say, nest under its own
call, even in a parallel batch). Prompt and response content is not recorded unless
``capture_content=True``; with it off, no content reaches a span either through an error: a
status description says what failed (a tool, HTTP 400), never the text a tool or a provider
returned, which may quote the prompt. A run's span status follows how the run ended: ERROR for
``error``, ``aborted`` and a budget (its deadline included), with ``error.type`` saying which.

A :class:`~agentkit.context.CacheWatch`'s notes (a request that broke the cached prefix, a
compaction, an expired cache) are ``agentkit.cache`` events: of the request's ``chat`` span for
a break, of the run's for an expiry.

A request held back by its rate limiter (:mod:`agentkit.limits`) shows it on its ``chat`` span:
an ``agentkit.quota_wait`` event, stamped when the wait began, with the bucket, the wait it
named, how long it lasted, whether a 429's pause held it, and how it ended.

Metrics: the GenAI client histograms ``gen_ai.client.token.usage`` (per request, one point per
token type) and ``gen_ai.client.operation.duration`` (per request and per run), on the meter
provider given (the global one by default, which costs nothing until one is configured).

Spend: a run's span carries what it cost (``agentkit.spend.cost`` in USD at catalog prices and
``agentkit.spend.tokens``, its sub-agents' included), and, with a spend ledger
(:class:`~agentkit.ledger.SpendPolicy`), the keys it spent under; the counters
``agentkit.spend.cost`` and ``agentkit.spend.tokens`` add each counted request under each of its
ledger keys (attribute ``agentkit.spend.key``), a sub-agent's under its parent's keys, once.
Importing this module imports no OpenTelemetry code; ``enable_tracing`` does.
"""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._extras import needs_extra
from .._serialize import dumps, to_serialisable

if TYPE_CHECKING:
    from agentkit import Agent

run_logger = logging.getLogger("agentkit.run")

_FINISH_REASONS = {"tool_use": "tool_call"}
"""agentkit stop reasons whose GenAI finish-reason spelling differs."""

_HTTP_STATUS = re.compile(r"\(HTTP (\d{3})\)")
"""The HTTP status a provider's error message carries (see ``RunResult.raise_for_error``)."""

DURATION_BUCKETS = [round(0.01 * 2**i, 2) for i in range(14)]  # 0.01 s to 81.92 s
"""The bucket boundaries (seconds) the GenAI conventions advise for operation durations."""
TOKEN_BUCKETS = [4**i for i in range(14)]  # 1 to 67108864
"""The bucket boundaries the GenAI conventions advise for token counts."""


def _dump(value: Any) -> str:
    """Strict JSON text of messages or a tool's arguments/result, for content attributes."""
    return dumps(to_serialisable(value))


def _usage(message: Any) -> tuple[int, int, int, int]:
    """The input tokens as the GenAI conventions count them (cached ones included: agentkit's
    ``usage.input`` leaves out the cache reads and writes), the output tokens, the cache reads
    and the cache writes."""
    usage = getattr(message, "usage", None)
    if usage is None:
        return 0, 0, 0, 0
    cached, written = usage.cache_read, usage.cache_write
    return usage.input + cached + written, usage.output, cached, written


def _dollars(value: float) -> float:
    """A cost as telemetry shows it: one a catalog's bad price made NaN or negative is 0 (a
    counter only grows, and a backend cannot sum NaN)."""
    return value if math.isfinite(value) and value > 0 else 0.0


def _http_status(text: str | None) -> str | None:
    match = _HTTP_STATUS.search(text or "")
    return match.group(1) if match else None


class _Metrics:
    """The instruments one traced agent (and its sub-agents) records into: the GenAI client
    histograms and the spend counters, with which ledger keys the counters count."""

    def __init__(self, meter: Any, spend_keys: Callable[[str], bool] | None = None) -> None:
        self.tokens = _histogram(
            meter,
            "gen_ai.client.token.usage",
            "{token}",
            "Number of input and output tokens used",
            TOKEN_BUCKETS,
        )
        self.duration = _histogram(
            meter,
            "gen_ai.client.operation.duration",
            "s",
            "GenAI operation duration",
            DURATION_BUCKETS,
        )
        self.spend_cost = meter.create_counter(
            "agentkit.spend.cost", unit="{USD}", description="Spend counted in a spend ledger"
        )
        self.spend_tokens = meter.create_counter(
            "agentkit.spend.tokens", unit="{token}", description="Tokens counted in a spend ledger"
        )
        self.spend_keys = spend_keys

    def count_spend(self, event: Any) -> None:
        """Add a :class:`~agentkit.events.SpendEvent`'s request under each of its keys (those
        ``spend_keys`` lets through): one series per key, as many as the caller's keys."""
        usd = _dollars(event.usd)
        tokens = max(0, event.tokens)
        for key in event.keys:
            if self.spend_keys is None or self.spend_keys(key):
                attributes = {"agentkit.spend.key": key}
                self.spend_cost.add(usd, attributes)
                self.spend_tokens.add(tokens, attributes)


def _histogram(meter: Any, name: str, unit: str, description: str, buckets: list[Any]) -> Any:
    try:
        return meter.create_histogram(
            name, unit=unit, description=description, explicit_bucket_boundaries_advisory=buckets
        )
    except TypeError:  # an OpenTelemetry API older than 1.23 takes no bucket advice
        return meter.create_histogram(name, unit=unit, description=description)


class _Tracer:
    """The listener ``enable_tracing`` subscribes: events in, spans and metrics out (worker
    thread only)."""

    def __init__(
        self,
        agent: Agent,
        tracer: Any,
        capture_content: bool,
        agent_name: str | None,
        metrics: _Metrics | None = None,
    ) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self._otel_context, self._trace = context, trace
        self._kind, self._status, self._code = SpanKind, Status, StatusCode
        self._agent = agent
        self._tracer = tracer
        self._capture = capture_content
        self._name = agent_name
        self._metrics = metrics
        self._run: Any = None  # the invoke_agent span of the active run
        self._run_token: Any = None
        self._run_started = 0.0
        self._chat: Any = None
        self._chat_token: Any = None
        self._chat_started = 0.0
        self._tools: dict[str, Any] = {}  # tool_call_id -> execute_tool span
        self._compaction: Any = None  # the compaction span under way
        self._tokens = [0, 0, 0, 0]  # the run's input, output, cache-read and -write tokens
        self._spend_keys: set[str] = set()  # the ledger keys the run's requests spent under
        self._children: Any = None  # the token of the run's sub-agent setup

    def __call__(self, event: Any) -> None:
        try:
            self._on_event(event)
        except Exception:  # tracing must never fail the run it watches
            run_logger.exception("agentkit tracing: a span could not be recorded")

    def _on_event(self, event: Any) -> None:
        kind = event.type
        if kind == "agent_start":
            self._start_run()
        elif kind == "turn_start":
            self._start_chat()
        elif kind == "message_start" and getattr(event.message, "role", None) == "assistant":
            if self._chat is None:  # a failure reported without a turn_start
                self._start_chat()
            if self._capture:
                self._chat.set_attribute(
                    "gen_ai.input.messages", _dump(list(self._agent.state.messages))
                )
        elif kind == "message_end" and getattr(event.message, "role", None) == "assistant":
            self._end_chat(event.message)
        elif kind == "message_end" and getattr(event.message, "role", None) == "guardrail":
            self._guardrail(event.message)
        elif kind == "message_end" and getattr(event.message, "role", None) == "cache":
            self._cache_note(event.message)
        elif kind == "tool_execution_start":
            self._start_tool(event)
        elif kind == "tool_execution_end":
            self._end_tool(event)
        elif kind == "compaction_start":
            self._start_compaction(event)
        elif kind == "compaction_end":
            self._end_compaction(event)
        elif kind == "spend":
            self._spend_keys.update(event.keys)
            if self._metrics is not None:
                self._metrics.count_spend(event)
        elif kind == "agent_end":
            self._end_run(event.messages)

    # --- spans ---------------------------------------------------------------------------------

    def _model_attributes(self) -> dict[str, Any]:
        model = self._agent.state.model
        return {"gen_ai.provider.name": model.provider, "gen_ai.request.model": model.id}

    def _output_type(self) -> str:
        """``gen_ai.output.type``: ``json`` when the run asks for a typed output (its own
        ``output_type`` wins over the agent's)."""
        options = self._agent.run_options
        spec = options.output_type if options is not None else self._agent.output_type
        return "json" if spec is not None else "text"

    def _start_run(self) -> None:
        name = self._name
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.output.type": self._output_type(),
            **self._model_attributes(),
        }
        if name:
            attributes["gen_ai.agent.name"] = name
        if self._agent.description:
            attributes["gen_ai.agent.description"] = self._agent.description
        if self._agent.session_id:
            attributes["gen_ai.conversation.id"] = self._agent.session_id
        self._run = self._tracer.start_span(
            f"invoke_agent {name}" if name else "invoke_agent",
            kind=self._kind.INTERNAL,
            attributes=attributes,
        )
        self._run_started = time.monotonic()
        self._tokens = [0, 0, 0, 0]
        self._spend_keys = set()
        limiter = self._agent.rate_limiter
        if limiter is not None:  # one listener for every traced agent: it adds to the span
            limiter.subscribe(_quota_wait_event)  # current where the request waits
        from ..subagents import add_child_setup

        # Sub-agents this run's tools start are traced alike (their spans nest under the call).
        self._children = add_child_setup(self._trace_child)
        # The worker thread (and, through it, the tool pool) now runs inside the run's span.
        self._run_token = self._otel_context.attach(self._trace.set_span_in_context(self._run))

    def _trace_child(self, child: Agent, name: str) -> None:
        tracer = _Tracer(child, self._tracer, self._capture, name, self._metrics)
        child.subscribe(tracer)

    def _parent(self) -> Any:
        return self._trace.set_span_in_context(self._run) if self._run is not None else None

    def _start_chat(self) -> None:
        self._finish_chat()  # a request that never answered (should not happen)
        model = self._agent.state.model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.stream": True,  # every agentkit request streams
            "gen_ai.output.type": self._output_type(),
            **self._model_attributes(),
        }
        if self._agent.session_id:
            attributes["gen_ai.conversation.id"] = self._agent.session_id
        self._chat = self._tracer.start_span(
            f"chat {model.id}",
            context=self._parent(),
            kind=self._kind.CLIENT,
            attributes=attributes,
        )
        self._chat_started = time.monotonic()
        self._chat_token = self._otel_context.attach(self._trace.set_span_in_context(self._chat))

    def _end_chat(self, message: Any) -> None:
        span = self._chat
        if span is None:
            return
        reason = message.stop_reason
        input_tokens, output_tokens, cached, written = _usage(message)
        self._tokens[0] += input_tokens
        self._tokens[1] += output_tokens
        self._tokens[2] += cached
        self._tokens[3] += written
        span.set_attribute("gen_ai.response.model", message.model)
        if message.provider not in ("unknown", self._agent.state.model.provider):
            span.set_attribute("gen_ai.provider.name", message.provider)  # a fallback answered
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", cached)
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", written)
        span.set_attribute("gen_ai.response.finish_reasons", [_FINISH_REASONS.get(reason, reason)])
        error_type = None
        if reason in ("error", "aborted"):
            status = _http_status(message.error_message)
            error_type = "aborted" if reason == "aborted" else status or "error"
            span.set_attribute("error.type", error_type)
            # A provider's error body may quote the prompt: its text is content.
            summary = f"provider error (HTTP {status})" if status else f"request {reason}"
            text = message.error_message if self._capture and message.error_message else summary
            span.set_status(self._status(self._code.ERROR, text))
        if self._capture:
            span.set_attribute("gen_ai.output.messages", _dump([message]))
        self._record_request(message, input_tokens, output_tokens, error_type)
        self._finish_chat()

    def _record_request(
        self, message: Any, input_tokens: int, output_tokens: int, error_type: str | None
    ) -> None:
        metrics = self._metrics
        if metrics is None:
            return
        attributes = {
            "gen_ai.operation.name": "chat",
            **self._model_attributes(),
            "gen_ai.response.model": message.model,
        }
        if error_type is not None:
            attributes["error.type"] = error_type
        metrics.duration.record(time.monotonic() - self._chat_started, attributes)
        if message.usage is not None and error_type is None:
            metrics.tokens.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
            metrics.tokens.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})

    def _finish_chat(self) -> None:
        if self._chat_token is not None:
            self._otel_context.detach(self._chat_token)
            self._chat_token = None
        if self._chat is not None:
            self._chat.end()
            self._chat = None

    def _guardrail(self, record: Any) -> None:
        """A guardrail's action (:class:`~agentkit.guardrails.GuardrailRecord`) as an event of
        the run's span; its reason only with content capture (a judge's reason may quote what
        it refused)."""
        if self._run is None:
            return
        attributes = {
            "agentkit.guardrail.name": record.guardrail,
            "agentkit.guardrail.point": record.point,
            "agentkit.guardrail.action": record.action,
        }
        if record.tool_call_id:
            attributes["gen_ai.tool.call.id"] = record.tool_call_id
        if self._capture:
            attributes["agentkit.guardrail.reason"] = record.reason
        self._run.add_event("agentkit.guardrail", attributes)

    def _cache_note(self, note: Any) -> None:
        """A :class:`~agentkit.context.CacheNote` (a request broke the cached prefix, a
        compaction rewrote it, the cache expired) as an ``agentkit.cache`` event of the request's
        span when it is under way (a break is noted before its request is sent), else of the
        run's. A note holds no content (parts, positions and names only), so all of it goes."""
        span = self._chat if self._chat is not None else self._run
        if span is None:
            return
        attributes: dict[str, Any] = {
            "agentkit.cache.kind": str(note.kind),
            "agentkit.cache.part": str(note.part),
            "agentkit.cache.summary": str(note.summary),
        }
        if note.position is not None:
            attributes["agentkit.cache.position"] = int(note.position)
        span.add_event("agentkit.cache", attributes)
        if span is self._chat and note.kind == "break":
            span.set_attribute("agentkit.cache.break", str(note.part))

    def _start_compaction(self, event: Any) -> None:
        """A ``compaction`` span under the run (its summary request is not a turn, so it has
        no ``chat`` span of its own): why, how, and the token estimates before and after."""
        self._end_compaction(None)  # one that never ended (should not happen)
        self._compaction = self._tracer.start_span(
            "compaction",
            context=self._parent(),
            kind=self._kind.INTERNAL,
            attributes={
                "agentkit.compaction.reason": event.reason,
                "agentkit.compaction.strategy": event.strategy,
                "agentkit.compaction.tokens_before": event.tokens_before,
                "agentkit.compaction.context_window": event.context_window,
                **self._model_attributes(),
            },
        )

    def _end_compaction(self, event: Any) -> None:
        span, self._compaction = self._compaction, None
        if span is None:
            return
        record = getattr(event, "compaction", None)
        if record is not None:
            span.set_attribute("agentkit.compaction.tokens_after", record.tokens_after)
            span.set_attribute("agentkit.compaction.requests", record.requests)
            span.set_attribute("gen_ai.usage.input_tokens", record.usage.input)
            span.set_attribute("gen_ai.usage.output_tokens", record.usage.output)
        elif event is not None:
            span.set_attribute("error.type", "compaction_failed")
            # the error may quote the summary model's answer: content, as for a tool's error
            text = event.error if self._capture and event.error else "compaction failed"
            span.set_status(self._status(self._code.ERROR, text[:200]))
        span.end()

    def _start_tool(self, event: Any) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.tool_name,
            "gen_ai.tool.call.id": event.tool_call_id,
            "gen_ai.tool.type": "function",
        }
        if self._capture:
            attributes["gen_ai.tool.call.arguments"] = _dump(event.args)
        span = self._tracer.start_span(
            f"execute_tool {event.tool_name}",
            context=self._parent(),
            kind=self._kind.INTERNAL,
            attributes=attributes,
        )
        self._tools[event.tool_call_id] = span
        # The loop emits a call's start event inside that call's own copy of the contextvars,
        # which its execution runs in and which is dropped with it: attached there, the span is
        # current for the tool's code only, and needs no detach (the end event comes elsewhere).
        self._otel_context.attach(self._trace.set_span_in_context(span))

    def _end_tool(self, event: Any) -> None:
        span = self._tools.pop(event.tool_call_id, None)
        if span is None:
            return
        if event.is_error:
            # an abort ends every unfinished call with an error result: the signal tells it apart
            error_type = "aborted" if self._aborted() else "tool_error"
            span.set_attribute("error.type", error_type)
            # The result's text is content (it may quote the arguments, a file, the prompt).
            text = f"tool {event.tool_name} failed"
            if self._capture:
                result = event.result
                text = result.text if hasattr(result, "text") else str(result)
            span.set_status(self._status(self._code.ERROR, text[:200]))
        if self._capture:
            span.set_attribute("gen_ai.tool.call.result", _dump(event.result))
        span.end()

    def _aborted(self) -> bool:
        """Whether the active run was aborted (the agent's signal is still the run's until after
        ``agent_end``)."""
        signal = self._agent.signal
        return signal is not None and signal.aborted

    def _run_outcome(self, messages: list[Any]) -> tuple[str, str] | None:
        """``(error.type, status description)`` for a run that did not end well, from its
        result's stop reason (``agent_end`` carries the :class:`~agentkit.RunResult`)."""
        stop = getattr(messages, "stop_reason", None)
        last = next(
            (m for m in reversed(messages) if getattr(m, "role", None) == "assistant"), None
        )
        if stop is None:  # a plain list (a failure reported outside the loop)
            stop = getattr(last, "stop_reason", "stop")
        if stop == "aborted" or (stop != "budget" and self._aborted()):
            return "aborted", "run aborted"
        if stop == "budget":
            limit = getattr(messages, "budget", None) or "budget"
            return limit, f"run stopped: budget {limit} reached"
        if stop == "guardrail":
            name = getattr(messages, "budget", None) or "guardrail"
            return "guardrail", f"run stopped by the guardrail {name}"
        if stop == "error":
            error = getattr(messages, "error", None)
            text = getattr(messages, "error_message", None) or getattr(last, "error_message", None)
            status = getattr(error, "status", None) or _http_status(text)
            error_type = str(status) if status else type(error).__name__ if error else "error"
            if self._capture and text:
                return error_type, text
            return error_type, f"run failed: {error_type}"
        return None

    def _spend(self, run: Any, usage: Any) -> None:
        """What the run cost, on its span: its usage's (the :class:`~agentkit.RunResult`'s,
        which counts its sub-agents' and its side requests'), and the ledger keys it spent
        under."""
        if usage is not None:
            run.set_attribute("agentkit.spend.cost", _dollars(usage.cost.total))
            tokens = usage.input + usage.output + usage.cache_read + usage.cache_write
            run.set_attribute("agentkit.spend.tokens", max(tokens, usage.total_tokens))
        if self._spend_keys:
            run.set_attribute("agentkit.spend.keys", sorted(self._spend_keys))

    def _end_run(self, messages: list[Any]) -> None:
        self._finish_chat()
        for span in self._tools.values():  # calls that never reported an end
            span.end()
        self._tools.clear()
        run = self._run
        if run is None:
            return
        run.set_attribute("gen_ai.usage.input_tokens", self._tokens[0])
        run.set_attribute("gen_ai.usage.output_tokens", self._tokens[1])
        run.set_attribute("gen_ai.usage.cache_read.input_tokens", self._tokens[2])
        run.set_attribute("gen_ai.usage.cache_creation.input_tokens", self._tokens[3])
        self._spend(run, getattr(messages, "usage", None))
        outcome = self._run_outcome(messages)
        if getattr(messages, "stop_reason", None) == "guardrail":
            run.set_attribute("agentkit.guardrail.name", getattr(messages, "budget", None) or "")
        if outcome is not None:
            run.set_attribute("error.type", outcome[0])
            run.set_status(self._status(self._code.ERROR, outcome[1]))
        if self._metrics is not None:
            attributes = {"gen_ai.operation.name": "invoke_agent", **self._model_attributes()}
            if outcome is not None:
                attributes["error.type"] = outcome[0]
            self._metrics.duration.record(time.monotonic() - self._run_started, attributes)
        if self._children is not None:
            from ..subagents import remove_child_setup

            remove_child_setup(self._children)
            self._children = None
        if self._run_token is not None:
            self._otel_context.detach(self._run_token)
            self._run_token = None
        run.end()
        self._run = None


def _quota_wait_event(wait: Any) -> None:
    """A rate limiter's wait, once ended, as an event of the span current on the thread that
    waited (its request's ``chat`` span); nothing when no span is recording there."""
    if wait.outcome is None:
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    if not span.is_recording():
        return
    attributes = {
        "agentkit.quota.bucket": wait.bucket,
        "agentkit.quota.named_wait": wait.seconds,
        "agentkit.quota.waited": wait.waited,
        "agentkit.quota.paused": wait.paused,
        "agentkit.quota.outcome": wait.outcome,
    }
    span.add_event("agentkit.quota_wait", attributes, timestamp=int(wait.started * 1e9))


def enable_tracing(
    agent: Agent,
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    capture_content: bool = False,
    agent_name: str | None = None,
    spend_keys: Callable[[str], bool] | None = None,
) -> Callable[[], None]:
    """Emit OpenTelemetry spans and GenAI metrics for ``agent``'s runs; return a function that
    turns them off.

    ``tracer_provider`` and ``meter_provider`` default to the global ones; ``agent_name``
    defaults to the agent's ``name``. Sub-agents its tools run (:mod:`agentkit.subagents`) are
    traced alike, under the call's ``execute_tool`` span.
    ``capture_content=True`` records prompts, responses, tool arguments and results on the spans
    (off by default: they may be private). ``spend_keys`` says which ledger keys the spend
    counters count (default: all): each key is a series, so leave out keys without bound (one
    per user, say) when the metrics backend limits series. Raises ``ImportError`` naming the
    extra when OpenTelemetry is not installed.
    """
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            needs_extra("agentkit tracing (OpenTelemetry)", "otel")
        ) from exc
    tracer = trace.get_tracer("agentkit", tracer_provider=tracer_provider)
    meter = metrics.get_meter("agentkit", meter_provider=meter_provider)
    name = agent_name or agent.name
    listener = _Tracer(agent, tracer, capture_content, name, _Metrics(meter, spend_keys))
    return agent.subscribe(listener)


class _Logger:
    """The listener ``enable_logging`` subscribes: one record per run, turn and tool call."""

    def __init__(self, logger: logging.Logger, capture_content: bool = False) -> None:
        self._log = logger
        self._capture = capture_content
        self._run_id = ""

    def __call__(self, event: Any) -> None:
        try:
            self._on_event(event)
        except Exception:  # logging must never fail the run it watches
            self._log.exception("agentkit: a run's log record could not be written")

    def _on_event(self, event: Any) -> None:
        kind = event.type
        log = self._log
        if kind == "agent_start":
            self._run_id = uuid.uuid4().hex[:12]
            log.info("run %s started", self._run_id, extra={"run_id": self._run_id})
        elif kind == "tool_execution_start":
            log.info(
                "tool %s (%s) started",
                event.tool_name,
                event.tool_call_id,
                extra=self._tool(event),
            )
        elif kind == "tool_execution_end":
            level = logging.WARNING if event.is_error else logging.INFO
            outcome = "failed" if event.is_error else "ok"
            log.log(
                level,
                "tool %s (%s) %s",
                event.tool_name,
                event.tool_call_id,
                outcome,
                extra={**self._tool(event), "duration_ms": event.duration_ms},
            )
        elif kind == "message_end" and getattr(event.message, "role", None) == "assistant":
            message = event.message
            extra: dict[str, Any] = {"run_id": self._run_id, "stop_reason": message.stop_reason}
            if message.stop_reason in ("error", "aborted"):
                level = logging.INFO if message.stop_reason == "aborted" else logging.ERROR
                # A provider's error text may quote the prompt: it is content, as on a span.
                status = _http_status(message.error_message)
                summary = f"provider error (HTTP {status})" if status else message.stop_reason
                if status:
                    extra["http_status"] = int(status)
                said = message.error_message if self._capture and message.error_message else None
                log.log(level, "model request %s: %s", message.stop_reason, said or summary,
                        extra=extra)  # fmt: skip
            else:
                log.debug("model answered (%s)", message.stop_reason, extra=extra)
        elif kind == "agent_end":
            log.info(
                "run %s ended (%d new messages)",
                self._run_id,
                len(event.messages),
                extra={"run_id": self._run_id},
            )

    def _tool(self, event: Any) -> dict[str, Any]:
        return {
            "run_id": self._run_id,
            "tool_call_id": event.tool_call_id,
            "tool_name": event.tool_name,
        }


def enable_logging(
    agent: Agent, logger: logging.Logger | None = None, *, capture_content: bool = False
) -> Callable[[], None]:
    """Log ``agent``'s runs on ``logger`` (default ``agentkit.run``); return a function that
    stops it. Records carry ``run_id`` and, for tool calls, ``tool_call_id`` and ``tool_name``
    in ``extra``: INFO for runs and tool calls, WARNING for a failed tool call, ERROR for a
    failed model request (with its ``http_status``), DEBUG for each model answer.

    A failed request's record says what failed (``provider error (HTTP 400)``), not the
    provider's error text, which may quote the prompt, unless ``capture_content=True``."""
    return agent.subscribe(_Logger(logger or run_logger, capture_content))


__all__ = ["enable_logging", "enable_tracing"]
