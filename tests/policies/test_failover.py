"""Model failover (agentkit.failover): an agent with fallback models, over real HTTP against
local servers that fail in each way."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agentkit import Agent
from agentkit.events import MessageEndEvent
from agentkit.failover import ModelHealth, failover_stream_fn, health
from agentkit.providers import stream_simple
from agentkit.types import Model, UserMessage
from tests.providers.replay_server import ReplayServer, Reply, chat_sse, make_model
from tests.servers import free_port

RETRIES = 2
"""The providers' retries before a model is given up on (the default)."""

OVERLOADED_EVENT = (
    b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
    b'"message": "Overloaded"}}\n\n'
)


def json_reply(status: int, payload: object) -> Reply:
    return Reply(status=status, body=json.dumps(payload).encode(), content_type="application/json")


def answer(text: str = "from the fallback") -> Reply:
    return Reply(
        body=chat_sse({"content": text}, usage={"prompt_tokens": 3, "completion_tokens": 2})
    )


@pytest.fixture
def servers() -> Iterator[list[ReplayServer]]:
    """Two replay servers: the primary's and the fallback's."""
    started = [ReplayServer(), ReplayServer()]
    for server in started:
        server.start()
    try:
        yield started
    finally:
        for server in started:
            server.stop()


@pytest.fixture(autouse=True)
def forget_failures() -> Iterator[None]:
    """Each test starts with no model cooling down (the registry is the process's)."""
    health.clear()
    yield
    health.clear()


def agent_for(primary: Model, *fallbacks: Model, **options: Any) -> Agent:
    options.setdefault("retry_base_delay_ms", 1)
    return Agent(
        model=primary, fallback_models=list(fallbacks), api_key="test-key", timeout=(5, 5),
        **options,
    )  # fmt: skip


def openai_model(server: ReplayServer, model_id: str = "gpt-4o-mini") -> Model:
    return make_model("openai-completions", server.url, id=model_id)


def refused_model() -> Model:
    """A model whose server is not running: the connection is refused."""
    return make_model("openai-completions", f"http://127.0.0.1:{free_port()}", id="gpt-down")


# --- each failure the next model could serve --------------------------------------------------

FAILURES = {
    "503": [json_reply(503, {"error": {"message": "unavailable"}}) for _ in range(RETRIES + 1)],
    "500": [json_reply(500, {"error": {"message": "boom"}}) for _ in range(RETRIES + 1)],
    "429": [json_reply(429, {"error": {"message": "slow down"}}) for _ in range(RETRIES + 1)],
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failed_model_hands_the_request_to_the_next(
    servers: list[ReplayServer], failure: str
) -> None:
    primary, fallback = servers
    primary.enqueue(*FAILURES[failure])
    fallback.enqueue(answer())
    agent = agent_for(openai_model(primary, "gpt-primary"), openai_model(fallback, "gpt-second"))
    ends: list[Any] = []
    agent.subscribe(lambda e: ends.append(e.message) if isinstance(e, MessageEndEvent) else None)
    result = agent.prompt("Hello")
    assert result.text == "from the fallback"
    last = agent.state.messages[-1]
    assert (last.stop_reason, last.model) == ("stop", "gpt-second")
    assert ends[-1].model == "gpt-second"  # the events say which model answered
    assert (len(primary.requests), len(fallback.requests)) == (RETRIES + 1, 1)


def test_a_refused_connection_hands_the_request_to_the_next(servers: list[ReplayServer]) -> None:
    fallback = servers[1]
    fallback.enqueue(answer())
    agent = agent_for(refused_model(), openai_model(fallback, "gpt-second"))
    assert agent.prompt("Hello").text == "from the fallback"
    assert agent.state.messages[-1].model == "gpt-second"


@pytest.mark.parametrize("how", ["http-529", "first-event"])
def test_an_overloaded_model_of_another_provider_hands_over(
    servers: list[ReplayServer], how: str
) -> None:
    primary, fallback = servers
    if how == "http-529":
        overloaded = json_reply(529, {"type": "error", "error": {"type": "overloaded_error"}})
    else:
        overloaded = Reply(body=OVERLOADED_EVENT)
    primary.enqueue(*[overloaded] * (RETRIES + 1))
    fallback.enqueue(answer())
    claude = make_model("anthropic-messages", primary.url)
    agent = agent_for(claude, openai_model(fallback, "gpt-second"))
    assert agent.prompt("Hello").text == "from the fallback"
    last = agent.state.messages[-1]
    assert (last.provider, last.api, last.model) == ("openai", "openai-completions", "gpt-second")
    assert len(primary.requests) == RETRIES + 1


# --- what does not fail over ------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_failure_of_the_request_itself_does_not_fail_over(
    servers: list[ReplayServer], status: int
) -> None:
    primary, fallback = servers
    primary.enqueue(json_reply(status, {"error": {"message": "no"}}))
    agent = agent_for(openai_model(primary), openai_model(fallback, "gpt-second"))
    agent.prompt("Hello")
    last = agent.state.messages[-1]
    assert last.stop_reason == "error" and f"HTTP {status}" in (last.error_message or "")
    assert (len(primary.requests), len(fallback.requests)) == (1, 0)


def test_a_model_that_started_answering_keeps_the_request(servers: list[ReplayServer]) -> None:
    primary, fallback = servers
    body = chat_sse({"content": "half an ans"}, {"content": "wer"})
    primary.enqueue(Reply(body=body, drop_after=body.index(b"wer")))  # drops mid-answer
    agent = agent_for(openai_model(primary, "gpt-primary"), openai_model(fallback, "gpt-second"))
    agent.prompt("Hello")
    last = agent.state.messages[-1]
    assert (last.stop_reason, last.model) == ("error", "gpt-primary")
    assert last.text == "half an ans"
    assert len(fallback.requests) == 0


def test_an_abort_does_not_fail_over(servers: list[ReplayServer]) -> None:
    primary, fallback = servers
    primary.enqueue(Reply(stall_before_headers=True))
    agent = agent_for(openai_model(primary), openai_model(fallback, "gpt-second"))
    run = agent.start("Hello")
    assert primary.wait_for_requests(1, timeout=10)
    run.abort()
    run.wait(10)
    assert agent.state.messages[-1].stop_reason == "aborted"
    assert len(fallback.requests) == 0


def test_when_every_model_fails_the_error_names_each(servers: list[ReplayServer]) -> None:
    primary, fallback = servers
    primary.enqueue(*FAILURES["503"])
    fallback.enqueue(*FAILURES["500"])
    agent = agent_for(openai_model(primary, "gpt-primary"), openai_model(fallback, "gpt-second"))
    agent.prompt("Hello")
    last = agent.state.messages[-1]
    assert (last.stop_reason, last.model) == ("error", "gpt-second")
    text = last.error_message or ""
    assert text.startswith("Every model failed: openai/gpt-primary: ")
    assert "HTTP 503" in text and "openai/gpt-second: " in text and "HTTP 500" in text


# --- the cool-down ----------------------------------------------------------------------------


def test_a_failed_model_is_skipped_until_its_cool_down_ends(servers: list[ReplayServer]) -> None:
    primary, fallback = servers
    primary.enqueue(*FAILURES["503"])
    fallback.enqueue(answer("one"), answer("two"), answer("three"))
    first = openai_model(primary, "gpt-primary")
    agent = agent_for(first, openai_model(fallback, "gpt-second"), failover_cooldown=600)
    assert agent.prompt("Hello").text == "one"
    # Every agent of the process now goes straight to the fallback, from any thread.
    others = [agent_for(first, openai_model(fallback, "gpt-second")) for _ in range(2)]
    threads = [threading.Thread(target=other.prompt, args=("Hi",)) for other in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(o.state.messages[-1].text for o in others) == ["three", "two"]
    assert len(primary.requests) == RETRIES + 1  # not asked again while it cools down


def test_the_primary_comes_back_after_its_cool_down(servers: list[ReplayServer]) -> None:
    primary, fallback = servers
    primary.enqueue(*FAILURES["503"], answer("primary again"))
    fallback.enqueue(answer("fallback"))
    agent = agent_for(
        openai_model(primary, "gpt-primary"), openai_model(fallback, "gpt-second"),
        failover_cooldown=0,
    )  # fmt: skip
    assert agent.prompt("Hello").text == "fallback"
    assert agent.prompt("Again").text == "primary again"
    assert agent.state.messages[-1].model == "gpt-primary"


def test_a_cooling_model_is_still_tried_when_every_other_fails(
    servers: list[ReplayServer],
) -> None:
    primary, fallback = servers
    registry = ModelHealth()
    first, second = openai_model(primary, "gpt-primary"), openai_model(fallback, "gpt-second")
    registry.mark_down(first, 600)
    assert registry.order([first, second]) == [second, first]
    fallback.enqueue(*FAILURES["503"])
    primary.enqueue(answer("the cooling one"))
    stream_fn = failover_stream_fn(stream_simple, [second], registry=registry)
    options = {"api_key": "test-key", "retry_base_delay_ms": 1}
    message = stream_fn(first, {"messages": [UserMessage(content="Hi")]}, options).result(30)
    assert (message.text, message.model) == ("the cooling one", "gpt-primary")


# --- options ----------------------------------------------------------------------------------


def test_fallback_models_take_catalog_names_and_refuse_a_single_model() -> None:
    agent = Agent(fallback_models=["openai:gpt-4o-mini"])
    assert [m.id for m in agent.fallback_models] == ["gpt-4o-mini"]
    with pytest.raises(TypeError, match="list of models"):
        agent.fallback_models = "openai:gpt-4o-mini"  # type: ignore[assignment]
    agent.fallback_models = None  # type: ignore[assignment]
    assert agent.fallback_models == []


def test_the_trace_says_which_model_answered(servers: list[ReplayServer]) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentkit.integrations.tracing import enable_tracing

    primary, fallback = servers
    primary.enqueue(*[Reply(body=OVERLOADED_EVENT)] * (RETRIES + 1))
    fallback.enqueue(answer())
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    agent = agent_for(make_model("anthropic-messages", primary.url), openai_model(fallback))
    enable_tracing(agent, tracer_provider=provider)
    agent.prompt("Hello")
    (chat,) = [span for span in spans.get_finished_spans() if span.name.startswith("chat")]
    attributes = chat.attributes or {}
    assert attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert attributes["gen_ai.response.model"] == "gpt-4o-mini"
    assert attributes["gen_ai.provider.name"] == "openai"


def test_a_spent_quota_fails_over_and_pauses_the_model_for_the_fleet(
    servers: list[ReplayServer],
) -> None:
    from agentkit.limits import RateLimiter

    primary, fallback = servers
    spent = json_reply(429, {"error": {"message": "quota spent"}})
    spent.headers = {"Retry-After": "120"}  # beyond max_retry_delay_ms: no retry waits for it
    primary.enqueue(spent)
    fallback.enqueue(answer())
    limiter = RateLimiter()
    first = openai_model(primary, "gpt-primary")
    agent = agent_for(first, openai_model(fallback, "gpt-second"), rate_limiter=limiter)
    assert agent.prompt("Hello").text == "from the fallback"
    assert len(primary.requests) == 1
    refusal = limiter.backend.try_acquire(limiter.bucket(first)[0], None, "probe", 0)
    assert refusal is not None and refusal.seconds > 100  # every agent sharing it holds back


# --- a paused bucket is a model that is down (issue 36) ---------------------------------------


def test_a_paused_primary_is_down_and_the_fallback_answers_at_once(
    servers: list[ReplayServer],
) -> None:
    from agentkit.limits import RateLimiter

    primary, fallback = servers
    spent = json_reply(429, {"error": {"message": "slow down"}})
    spent.headers = {"Retry-After": "30"}  # within max_retry_delay_ms: a retry would wait it out
    primary.enqueue(spent)
    fallback.enqueue(answer("one"), answer("two"))
    first = openai_model(primary, "gpt-primary")
    agent = agent_for(
        first, openai_model(fallback, "gpt-second"), rate_limiter=RateLimiter(),
        failover_cooldown=0, budgets={"timeout": 10},
    )  # fmt: skip
    assert agent.prompt("Hello").text == "one"  # at once, not after 30 s
    assert health.is_down(first)  # for the pause it named, though the cool-down is 0
    health.clear()  # its cool-down over (or in another process): the primary comes first again
    assert agent.prompt("Again").text == "two"  # its bucket is still paused: it is down
    assert agent.state.messages[-1].model == "gpt-second"
    assert len(primary.requests) == 1
    assert health.is_down(first)


def test_requests_waiting_for_a_model_with_a_fallback_leave_when_it_is_paused() -> None:
    from agentkit import AbortController, AbortError
    from agentkit.errors import QuotaWaitError
    from agentkit.limits import Quota, QuotaWait, RateLimiter

    limiter = RateLimiter({"openai": Quota(requests=1, per=3600)})
    model = make_model("openai-completions", "http://127.0.0.1:9", id="gpt-primary")
    waiting = threading.Semaphore(0)

    def listener(wait: QuotaWait) -> None:
        if wait.outcome is None:
            waiting.release()

    limiter.subscribe(listener)
    limiter.acquire(model)  # the quota is full for an hour
    controller = AbortController()
    outcomes: list[BaseException] = []

    def wait(view: RateLimiter) -> None:
        try:
            view.acquire(model, signal=controller.signal)
        except (QuotaWaitError, AbortError) as exc:
            outcomes.append(exc)

    # First in line, a request without a fallback; behind it, three that have one. A full
    # quota is no failure: they all wait.
    views = [limiter, *(limiter.failing_on_pause() for _ in range(3))]
    threads = [threading.Thread(target=wait, args=(view,)) for view in views]
    for thread in threads:
        thread.start()
        assert waiting.acquire(timeout=10)
    limiter.pause(model, 30)  # a 429 elsewhere in the fleet: the model is down
    for thread in threads[1:]:
        thread.join(10)
    assert [type(o) for o in outcomes] == [QuotaWaitError] * 3
    assert all("a paused model is down while a fallback can answer" in str(o) for o in outcomes)
    controller.abort()
    threads[0].join(10)
    assert isinstance(outcomes[-1], AbortError) and not threads[0].is_alive()
