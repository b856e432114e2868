"""Cache-aware requests in the spans (``agentkit.integrations.tracing``), over real HTTP for the
four wire APIs: each request's ``chat`` span carries its cache reads and writes, the run's span
their totals, and a break shows as an ``agentkit.cache`` event of the request that broke the
prefix (no content in it); an expiry, known once the response came, on the run's span."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from agentkit.context import CacheWatch  # noqa: E402
from agentkit.integrations.tracing import enable_tracing  # noqa: E402
from tests.context.cache_wire import APIS, WRITES, answer  # noqa: E402
from tests.context.test_cache_http import PROMPT, agent_for, carried  # noqa: E402
from tests.providers.replay_server import ReplayServer, Reply  # noqa: E402


@pytest.mark.parametrize("api", APIS)
def test_spans_carry_each_requests_cache_use_and_the_break(api: str, server: ReplayServer) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    watch = CacheWatch()
    first = agent_for(api, server, watch, system_prompt=PROMPT.format(when="2026-12-03 10:00"))
    enable_tracing(first, tracer_provider=provider)
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 1000))),
                   Reply(body=answer(api, "Hi.", (30, 1000, 20))))  # fmt: skip
    first.prompt("hello there")
    first.prompt("more")
    second = agent_for(api, server, watch, system_prompt=PROMPT.format(when="2026-12-03 10:09"),
                       messages=carried(first))  # fmt: skip
    enable_tracing(second, tracer_provider=provider)
    server.enqueue(Reply(body=answer(api, "Hi.", (1950, 0, 0))))
    second.prompt("again")

    write = 1 if api in WRITES else 0
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    runs = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert [(c.attributes["gen_ai.usage.cache_read.input_tokens"],
             c.attributes["gen_ai.usage.cache_creation.input_tokens"]) for c in chats] == [
        (0, 1000 * write), (1000, 20 * write), (0, 0)]  # fmt: skip
    assert runs[1].attributes["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert runs[1].attributes["gen_ai.usage.cache_creation.input_tokens"] == 20 * write
    assert [e.name for c in chats[:2] for e in c.events] == []
    [event] = chats[2].events
    assert event.name == "agentkit.cache"
    assert event.attributes["agentkit.cache.part"] == "system_prompt"
    assert event.attributes["agentkit.cache.position"] == PROMPT.index("{when}") + 15
    assert "PLUMBAGO" not in event.attributes["agentkit.cache.summary"]
    assert chats[2].attributes["agentkit.cache.break"] == "system_prompt"


@pytest.mark.parametrize("api", APIS)
def test_an_expiry_is_an_event_of_the_runs_span(api: str, server: ReplayServer) -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    agent = agent_for(api, server, CacheWatch(), system_prompt="Be brief.")
    enable_tracing(agent, tracer_provider=provider)
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 500, 500))),
                   Reply(body=answer(api, "Hi.", (1900, 0, 0))))  # fmt: skip
    agent.prompt("hello there")
    agent.prompt("more")
    runs = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert [e.name for e in runs[0].events] == []
    [event] = runs[1].events
    assert (event.name, event.attributes["agentkit.cache.kind"]) == ("agentkit.cache", "expired")
