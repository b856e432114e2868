"""Model failover: when a model cannot answer, the next model of an ordered list does.

``Agent(model=primary, fallback_models=[second, third])`` sends each request to the first model
of the list that is not cooling down. A request moves on to the next model only on a failure
the next one could serve (:func:`can_fail_over`: the connection refused or broken before an
answer, HTTP 408, 409, 429 or 5xx after the provider's own retries, an "overloaded" error) and
only before the first event of a response reached the run: once a model has started to answer,
its answer (or its failure) is the request's. A model that failed is skipped by every agent of
the process for ``failover_cooldown`` seconds, or for as long as it asked to be left alone
(its ``Retry-After``) when that is longer, then tried again first.

With a rate limiter (:mod:`agentkit.limits`), a paused bucket is a model that is down: a model
that has a fallback does not wait out its bucket's pause but fails at once
(:class:`~agentkit.errors.QuotaWaitError`) and the next model answers; a wait for room in the
quota is not a failure, unless it is longer than the limiter's ``max_wait``. The last model of
the list waits for a pause as any request does (up to its ``max_retry_delay_ms``).

The answer says which model gave it: an :class:`~agentkit.AssistantMessage` carries the
``provider`` and ``model`` of the model that answered, and so do the message events, the run's
result and the tracing spans (``gen_ai.response.model``). When every model fails, the last
failure ends the request and its ``error_message`` names each model's failure.

:func:`failover_stream_fn` is the mechanism, a stream function wrapped around another one; the
loop wraps the run's stream function with it when ``fallback_models`` is set.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from ._log import agentkit_logger
from .errors import ProviderError, QuotaWaitError
from .event_stream import WAKE, AssistantMessageEventStream, consuming_here
from .events import AssistantMessageEvent, DoneEvent, ErrorEvent
from .types import Context, Model

if TYPE_CHECKING:
    from .config import StreamFn

__all__ = [
    "DEFAULT_COOLDOWN",
    "ModelHealth",
    "as_fallback_models",
    "can_fail_over",
    "failover_stream_fn",
    "health",
]

DEFAULT_COOLDOWN = 60.0
"""Seconds a model that failed is skipped before it is tried again."""

_FAIL_OVER_STATUS = frozenset({408, 409, 429})


def can_fail_over(event: ErrorEvent) -> bool:
    """Whether the next model could serve a request that ended with ``event`` before answering.

    Yes for what is wrong with the model's service: a connection refused or broken before an
    answer, HTTP 408, 409, 429 and every 5xx (529 "overloaded" included), an error the provider
    sent as its stream's first event ("overloaded"), and a request its rate limiter would hold
    too long (:class:`~agentkit.errors.QuotaWaitError`). No for an abort, and for what would
    fail on any model or is the caller's to fix: a bad request, a bad or missing key, a web page
    in place of the API.
    """
    if event.reason != "error":
        return False
    error = event.provider_error
    if error is None:
        return False
    if isinstance(error, QuotaWaitError):
        return True
    if error.status is not None:
        return error.status in _FAIL_OVER_STATUS or error.status >= 500
    return error.retryable is not False


def as_fallback_models(value: Sequence[Model | str] | None) -> list[Model]:
    """The ``fallback_models`` option checked: a list of :class:`~agentkit.Model` or
    ``"provider:id"`` names from the catalog (``None`` is none)."""
    if value is None:
        return []
    if isinstance(value, (str, Model)):
        raise TypeError("fallback_models must be a list of models, not one model")
    models = []
    for item in value:
        if isinstance(item, str):  # the catalog loads only when a model is named this way
            item = importlib.import_module(".providers.catalog", __package__).model_from_spec(item)
        if not isinstance(item, Model):
            raise TypeError(f"fallback_models holds a {type(item).__name__}, not a Model")
        models.append(item)
    return models


def _key(model: Model) -> tuple[str, str, str, str]:
    return (model.api, model.provider, model.base_url, model.id)


class ModelHealth:
    """Which models failed lately: each is skipped until its cool-down ends.

    One registry (:data:`health`) serves the whole process, so a thousand agents do not each
    find out that the same model is down.
    """

    def __init__(self) -> None:
        # Guards _down: model key -> time.monotonic() at which it may be tried again.
        self._lock = threading.Lock()
        self._down: dict[tuple[str, str, str, str], float] = {}

    def mark_down(self, model: Model, cooldown: float) -> None:
        """Skip ``model`` for ``cooldown`` seconds (a longer skip already set stays)."""
        until = time.monotonic() + max(cooldown, 0.0)
        with self._lock:
            key = _key(model)
            self._down[key] = max(self._down.get(key, until), until)

    def is_down(self, model: Model) -> bool:
        """Whether ``model`` is cooling down."""
        with self._lock:
            until = self._down.get(_key(model))
            if until is None:
                return False
            if time.monotonic() >= until:
                del self._down[_key(model)]
                return False
            return True

    def order(self, models: Sequence[Model]) -> list[Model]:
        """``models`` to try, in order: those not cooling down first, then the others (a
        request tries every model before it fails)."""
        down = [model for model in models if self.is_down(model)]
        return [m for m in models if m not in down] + down

    def clear(self) -> None:
        """Forget every failure."""
        with self._lock:
            self._down.clear()


health = ModelHealth()
"""The process's registry of models cooling down."""


def failover_stream_fn(
    stream_fn: StreamFn,
    fallback_models: Sequence[Model],
    cooldown: float = DEFAULT_COOLDOWN,
    registry: ModelHealth | None = None,
) -> StreamFn:
    """A stream function that asks ``model``, then each of ``fallback_models`` in turn, as
    :mod:`agentkit.failover` describes; each is asked through ``stream_fn``.

    The stream it returns is produced like a provider's: on the reading thread when that thread
    asked with :func:`~agentkit.event_stream.consuming_here`, else on a thread of its own.
    """
    fallbacks = list(fallback_models)
    models_health = registry if registry is not None else health

    def stream(model: Model, context: Context, options: Any = None) -> AssistantMessageEventStream:
        chain = [model, *(m for m in fallbacks if _key(m) != _key(model))]
        out = AssistantMessageEventStream()
        steps = _serve(stream_fn, models_health.order(chain), context, options, out)
        out.start_producer(_guarded(steps, out, models_health, cooldown), "agentkit-failover")
        return out

    return stream


def _guarded(
    steps: Iterator[tuple[Model, float | None] | None],
    out: AssistantMessageEventStream,
    registry: ModelHealth,
    cooldown: float,
) -> Iterator[None]:
    """Run :func:`_serve`'s steps, marking each model it gave up on (for the cool-down, or the
    wait its failure named when longer); a stream function that broke its contract and raised
    fails ``out`` with its exception."""
    try:
        for failed in steps:
            if failed is not None:
                model, retry_after = failed
                registry.mark_down(model, max(cooldown, retry_after or 0.0))
            yield None
    except Exception as exc:
        out.fail(exc)


def _pause_is_down(options: Any) -> Any:
    """``options`` for a model that has a fallback: its rate limiter, if any, fails a paused
    bucket at once instead of waiting it out (:meth:`~agentkit.limits.RateLimiter.
    failing_on_pause`)."""
    if isinstance(options, dict):
        limiter = options.get("rate_limiter")
    else:
        limiter = getattr(options, "rate_limiter", None)
    failing = getattr(limiter, "failing_on_pause", None)
    if failing is None:
        return options
    if isinstance(options, dict):
        return {**options, "rate_limiter": failing()}
    return options.model_copy(update={"rate_limiter": failing()})


def _serve(
    stream_fn: StreamFn,
    chain: list[Model],
    context: Context,
    options: Any,
    out: AssistantMessageEventStream,
) -> Iterator[tuple[Model, float | None] | None]:
    """Ask the models of ``chain`` in turn and forward the first answer to ``out``; yield
    ``None`` after each forwarded event, or a model that failed in a way the next could serve
    (with the wait its failure named)."""
    failures: list[str] = []
    held = _pause_is_down(options) if len(chain) > 1 else options
    for index, model in enumerate(chain):
        last = index == len(chain) - 1
        with consuming_here():  # this generator reads the model's stream at once, to its end
            inner = stream_fn(model, context, options if last else held)
        try:
            first = True
            while True:
                event = inner.get()
                if event is WAKE:
                    continue
                if event is None:
                    inner.result()  # raises: the stream ended without done or error
                    return
                event = cast(AssistantMessageEvent, event)
                if first and isinstance(event, ErrorEvent) and can_fail_over(event) and not last:
                    text = event.error.error_message or "failed"
                    failures.append(f"{model.provider}/{model.id}: {text}")
                    nxt = chain[index + 1]
                    agentkit_logger().warning(
                        "model %s/%s failed (%s); trying %s/%s",
                        model.provider, model.id, text, nxt.provider, nxt.id,
                    )  # fmt: skip
                    yield model, _retry_after(event)
                    break
                if first and isinstance(event, ErrorEvent) and failures:
                    if can_fail_over(event):
                        yield model, _retry_after(event)
                    failures.append(f"{model.provider}/{model.id}: {event.error.error_message}")
                    event.error.error_message = "Every model failed: " + "; ".join(failures)
                first = False
                out.push(event)
                if isinstance(event, (DoneEvent, ErrorEvent)):
                    return
                yield None
        finally:
            inner.close()
    raise ProviderError("no model to ask")  # unreachable: the last model's stream ends above


def _retry_after(event: ErrorEvent) -> float | None:
    error = event.provider_error
    return error.retry_after if error is not None else None
