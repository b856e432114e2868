"""The rate limiter under servers that do not behave (issue 36): a ``Retry-After`` no client
should take at its word, a pause of an hour, answers longer than the window, and usage larger
than the estimate. Each against the local quota server over real HTTP, on both backends where
the backend holds the behaviour. (A paused model with a healthy fallback: ``test_failover.py``.)
"""

from __future__ import annotations

import email.utils
import logging
import threading
import time
from typing import Any

import pytest

from agentkit import Agent
from agentkit.errors import QuotaWaitError
from agentkit.limits import (
    MAX_RETRY_AFTER,
    Quota,
    QuotaBackend,
    QuotaWait,
    RateLimiter,
    RedisBackend,
)
from agentkit.providers.runner import parse_retry_after
from tests.quota_server import FakeClock, QuotaServer, run_prompts
from tests.servers import free_port
from tests.support import WAIT

GUARD = {"timeout": 10}
"""A deadline for runs that must not wait: were they to wait, they end ``budget``, not hang."""


def prompt(server: QuotaServer, limiter: RateLimiter, **options: Any) -> Any:
    """One agent's one prompt through ``limiter``; its last message."""
    options.setdefault("max_retries", 0)
    agent = Agent(model=server.model(), api_key="sk-test-SECRET", rate_limiter=limiter, **options)
    agent.prompt("Hello")
    return agent.state.messages[-1]


def errors_of(server: QuotaServer, limiter: RateLimiter, count: int, **options: Any) -> list[Any]:
    """``count`` agents prompting at once; their last messages."""
    messages: list[Any] = []

    def run() -> None:
        messages.append(prompt(server, limiter, **options))

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return messages


# --- 1. a hostile Retry-After -----------------------------------------------------------------

A_YEAR_AHEAD = email.utils.formatdate(time.time() + 365 * 86_400, usegmt=True)

HOSTILE = {
    "inf": "inf",
    "1e400": "1e400",
    "nan": "nan",
    "negative": "-30",
    "garbage": "soon, maybe",
    "a year ahead": A_YEAR_AHEAD,
}


READINGS = [
    ({"retry-after": "30"}, 30.0),
    ({"retry-after": " 1.5 "}, 1.5),
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
    ({"retry-after-ms": "inf", "retry-after": "9"}, 9.0),  # an unusable one gives way
    ({"retry-after-ms": "-1"}, None),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date past
    ({"retry-after": A_YEAR_AHEAD}, MAX_RETRY_AFTER),
    ({"retry-after": "86401"}, MAX_RETRY_AFTER),
    *(({"retry-after": HOSTILE[name]}, None) for name in HOSTILE if name != "a year ahead"),
    ({"retry-after": "Mon, 99 Foo 99999 99:99:99 GMT"}, None),
]


@pytest.mark.parametrize(("headers", "seconds"), READINGS)
def test_every_retry_after_is_read_as_a_finite_wait_or_none(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert parse_retry_after(headers) == seconds


@pytest.mark.parametrize("value", sorted(HOSTILE))
def test_a_hostile_retry_after_is_reported_as_the_429_and_breaks_nothing(
    quota_server: Any, quota_backend: QuotaBackend, value: str
) -> None:
    server = quota_server()
    server.retry_after = HOSTILE[value]
    server.close_for(60)
    limiter = RateLimiter({"openai": Quota(requests=100)}, backend=quota_backend)
    first = prompt(server, limiter)
    # The request that got it reports the 429, whatever the header said.
    assert first.stop_reason == "error"
    assert "(HTTP 429)" in (first.error_message or ""), first.error_message
    server.closed_until = 0.0
    after = prompt(server, limiter, budgets=GUARD)
    if value != "a year ahead":  # no usable wait: nothing paused, the next request goes
        assert (after.stop_reason, after.text) == ("stop", "ok"), after.error_message
        assert server.stats()["received"] == 2
        return
    # A date a year ahead is read as the longest pause, a day, and fails the next request at
    # once: it would not wait a day (max_retry_delay_ms), nor a year, nor overflow a timer.
    assert after.stop_reason == "error"
    assert f"is paused for {MAX_RETRY_AFTER:.0f} s more" in (after.error_message or "")
    assert server.stats()["received"] == 1


def test_a_hostile_pause_or_wait_never_breaks_the_limiter() -> None:
    """What reaches the limiter from its callers and its backend is read the same way."""
    clock = FakeClock()
    limiter = RateLimiter(backend=clock.backend(), clock=clock)
    model = QuotaServer().model()
    for hostile in (float("inf"), float("nan"), -5.0, "soon"):
        limiter.pause(model, hostile)  # type: ignore[arg-type]
        limiter.acquire(model).settle(None)  # nothing paused
    limiter.pause(model, 1e300)
    with pytest.raises(QuotaWaitError, match="paused for 86400 s more"):
        limiter.acquire(model, max_pause=60)
    permit = limiter.acquire(model)  # a patient request waits the day out, on this clock
    assert clock.now() >= 1000.0 + MAX_RETRY_AFTER
    permit.settle(None)


# --- 2. a long pause does not freeze the fleet, and is seen -----------------------------------


def test_a_long_pause_fails_at_once_every_request_that_would_not_wait_it(
    quota_server: Any, quota_backend: QuotaBackend, caplog: pytest.LogCaptureFixture
) -> None:
    server = quota_server()
    server.close_for(3600)
    limiter = RateLimiter(backend=quota_backend)
    caplog.set_level(logging.WARNING, "agentkit.limits")
    first = prompt(server, limiter, max_retry_delay_ms=5000)
    assert "(HTTP 429)" in (first.error_message or "")
    assert "paused for 3600 s by a 429's Retry-After" in caplog.text
    # Ten more agents: none waits the hour, none is sent; each says why at once.
    others = errors_of(server, limiter, 10, max_retry_delay_ms=5000, budgets=GUARD)
    assert [m.stop_reason for m in others] == ["error"] * 10
    for message in others:
        text = message.error_message or ""
        assert text.startswith("OpenAI request not sent: openai:gpt-4o-mini is paused for ")
        why = "by a 429's Retry-After: longer than the request waits for a Retry-After (5.0 s)"
        assert why in text
        assert "SECRET" not in text
    assert server.stats()["received"] == 1


def test_a_request_that_waits_a_long_pause_is_seen_and_those_behind_it_leave(
    quota_server: Any, quota_backend: QuotaBackend
) -> None:
    server = quota_server()
    limiter = RateLimiter(backend=quota_backend)
    model = server.model()
    waits: list[QuotaWait] = []
    begun = threading.Event()

    def listener(wait: QuotaWait) -> None:
        waits.append(wait)
        begun.set()

    limiter.subscribe(listener)
    limiter.pause(model, 3600)
    patient = Agent(
        model=model, api_key="k", rate_limiter=limiter, max_retry_delay_ms=7_200_000
    )  # it would wait two hours
    run = patient.start("Hello")
    assert begun.wait(WAIT)
    (began,) = waits
    assert (began.bucket, began.model, began.paused, began.outcome) == (
        "openai:gpt-4o-mini", "openai:gpt-4o-mini", True, None,
    )  # fmt: skip
    assert 3500 < began.seconds <= 3600
    # Agents that would not wait so long, behind it in line, leave at once.
    others = errors_of(server, limiter, 5, max_retry_delay_ms=5000, budgets=GUARD)
    assert [m.stop_reason for m in others] == ["error"] * 5
    assert all("is paused for" in (m.error_message or "") for m in others)
    run.abort()
    assert run.result(WAIT).stop_reason == "aborted"
    ended = [w for w in waits if w.outcome is not None and w.started == began.started]
    assert [w.outcome for w in ended] == ["aborted"]
    assert {w.outcome for w in waits if w is not began} <= {None, "refused", "aborted"}
    assert server.stats()["received"] == 0


def test_the_limiters_max_wait_fails_a_long_wait_for_room_at_once(quota_backend: Any) -> None:
    limiter = RateLimiter(
        {"openai": Quota(requests=1, per=3600)}, backend=quota_backend, max_wait=10
    )
    model = QuotaServer().model()
    limiter.acquire(model).settle(None)
    with pytest.raises(QuotaWaitError) as caught:
        limiter.acquire(model)
    assert "openai has no room for " in str(caught.value)
    assert "longer than the limiter's max_wait (10 s)" in str(caught.value)
    assert caught.value.retry_after is not None and caught.value.retry_after > 3500


def test_a_wait_for_quota_is_an_event_of_its_request_span(quota_server: Any) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentkit.integrations.tracing import enable_tracing

    clock = FakeClock()
    server = quota_server(clock=clock)
    limiter = RateLimiter(backend=clock.backend(), clock=clock)
    limiter.pause(server.model(), 30)
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    agent = Agent(model=server.model(), api_key="k", rate_limiter=limiter)
    enable_tracing(agent, tracer_provider=provider)
    assert agent.prompt("Hello").text == "ok"
    (chat,) = [span for span in spans.get_finished_spans() if span.name.startswith("chat")]
    (event,) = [e for e in chat.events if e.name == "agentkit.quota_wait"]
    assert dict(event.attributes or {}) == {
        "agentkit.quota.bucket": "openai:gpt-4o-mini",
        "agentkit.quota.named_wait": pytest.approx(30.0),
        "agentkit.quota.waited": pytest.approx(30.0),
        "agentkit.quota.paused": True,
        "agentkit.quota.outcome": "admitted",
    }


# --- 4. an answer longer than the window ------------------------------------------------------


def test_an_answer_longer_than_the_window_keeps_its_place(
    quota_server: Any, quota_backend: QuotaBackend
) -> None:
    # The server counts the first request 0.15 s after it arrives (a gateway's queue) and each
    # answer takes 0.45 s, longer than the 0.3 s window. The limiter must hold the first
    # request's place until its answer ended, else the second goes while the server still
    # counts the first.
    server = quota_server(requests=1, per=0.3, delay=0.45, lags=[0.15])
    limiter = RateLimiter({"openai": Quota(requests=1, per=0.3)}, backend=quota_backend)
    reasons = run_prompts(server.model(), 2, 2, rate_limiter=limiter, max_retries=0)
    stats = server.stats()
    assert reasons == {"stop": 2}
    assert (stats["received"], stats["rejected"]) == (2, 0)


# --- 5. usage larger than the estimate --------------------------------------------------------


def test_usage_larger_than_the_estimate_is_learned(
    quota_server: Any, quota_backend: QuotaBackend
) -> None:
    # Each request carries 360 tokens its body does not show (an image's), and asks for 10
    # output tokens: estimated about 40 tokens, it uses about 400. The quota holds three.
    server = quota_server(tokens=1300, per=0.3, hidden_tokens=360, output_tokens=10)
    limiter = RateLimiter({"openai": Quota(tokens=1300, per=0.3)}, backend=quota_backend)
    reasons = run_prompts(server.model(), 12, 6, rate_limiter=limiter, max_tokens=10)
    assert reasons == {"stop": 12}
    # Only the first burst, sent before any answer settled, went by the bare estimate: every
    # 429 is in the first window (each later window would have its own without learning).
    start = server.arrivals[0][0]
    assert [
        round(t - start, 2) for t, refused in server.arrivals if refused and t > start + 0.3
    ] == []


def test_a_429_whose_pause_could_not_be_set_still_waits_its_retry_after(
    quota_server: Any, redis_server: Any
) -> None:
    """The limiter's store goes away between the request and its 429: the pause is lost, so
    the retry waits the Retry-After itself, and the run reports what happened."""
    server = quota_server()
    server.close_for(0.3)
    limiter = RateLimiter(backend=RedisBackend(redis_server.url, prefix="test:lost-pause"))
    broken = RedisBackend(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    limiter.pause = lambda model, seconds: broken.pause("b", seconds)  # type: ignore[method-assign]
    last = prompt(server, limiter, max_retries=1)
    assert (last.stop_reason, last.text) == ("stop", "ok")
    stats = server.stats()
    assert (stats["received"], stats["rejected"]) == (2, 1)  # not retried into the same 429
