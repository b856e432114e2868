"""Spend in telemetry: a run's span carries what it cost, and the spend counters add each
request a spend ledger counted under each of its keys, read back from the OpenTelemetry SDK's
in-memory exporter and reader; a sub-agent's spend rolls up to its parent's keys once."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from agentkit import Agent, Usage  # noqa: E402
from agentkit.events import SpendEvent  # noqa: E402
from agentkit.integrations.tracing import enable_tracing  # noqa: E402
from agentkit.ledger import Ledger, MemoryLedgerStore, SpendPolicy  # noqa: E402
from agentkit.subagents import agent_tool  # noqa: E402
from agentkit.testing import SCRIPTED_MODEL, Reply, ScriptedModel, reply, tool_call  # noqa: E402
from agentkit.types import ModelCost  # noqa: E402

PRICES = ModelCost(input=10.0, output=40.0, cache_read=1.0)
"""USD per million tokens of the test models (the sub-agent's is served over HTTP)."""


class Telemetry:
    """An in-memory span exporter and metric reader, and what they hold."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider([self.reader])

    def trace(self, agent: Agent, **options: Any) -> None:
        enable_tracing(
            agent, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
            **options,
        )  # fmt: skip

    def run_span(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.spans.get_finished_spans() if s.name == name]
        return span

    def counted(self, metric: str) -> dict[str, float]:
        """The counter's sum by ``agentkit.spend.key``."""
        sums: dict[str, float] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for found in scope.metrics:
                    if found.name == metric:
                        for point in found.data.data_points:
                            sums[str(point.attributes["agentkit.spend.key"])] = point.value
        return sums


def usage(input_tokens: int, output_tokens: int) -> Usage:
    return Usage(input=input_tokens, output=output_tokens,
                 total_tokens=input_tokens + output_tokens)  # fmt: skip


def priced(replies: list[Reply | str], prices: ModelCost = PRICES) -> ScriptedModel:
    """A scripted model whose answers are priced at ``prices`` (as a catalog model's are)."""
    return ScriptedModel(replies, model=SCRIPTED_MODEL.model_copy(update={"cost": prices}))


def test_a_runs_spend_is_on_its_span_and_counted_by_key_with_its_sub_agents(
    quota_server: Any,
) -> None:
    server = quota_server(output_tokens=10)
    child = Agent(model=server.model().model_copy(update={"cost": PRICES}), api_key="k",
                  name="helper", description="helps")  # fmt: skip
    parent_model = priced([
        reply(tool_call("helper", {"task": "help"}), usage=usage(100, 20)),  # $0.0018
        reply("done", usage=usage(150, 5)),  # $0.0017
    ])  # fmt: skip
    ledger = Ledger()
    keys = ["tenant:acme", "user:acme/42"]
    parent = Agent(model=parent_model.model, stream_fn=parent_model, tools=[agent_tool(child)],
                   policies=[SpendPolicy(ledger, keys)], name="boss")  # fmt: skip
    seen: list[SpendEvent] = []
    parent.subscribe(lambda e: seen.append(e) if isinstance(e, SpendEvent) else None)
    telemetry = Telemetry()
    telemetry.trace(parent)

    result = parent.prompt("Go")

    assert result.text == "done"
    tenant = ledger.spent("tenant:acme", "total")
    assert tenant.requests == 3  # the parent's two, its sub-agent's one
    child_usd = tenant.usd - 0.0035
    assert child_usd > 0  # the sub-agent's answer, at its catalog prices
    # The run's span: what it cost, its sub-agent's spend included, and the keys it spent under.
    boss = telemetry.run_span("invoke_agent boss")
    assert boss.attributes is not None
    assert boss.attributes["agentkit.spend.cost"] == pytest.approx(tenant.usd)
    assert boss.attributes["agentkit.spend.cost"] == pytest.approx(result.usage.cost.total)
    assert boss.attributes["agentkit.spend.tokens"] == tenant.tokens
    scripted = f"model:{parent_model.model.provider}:{parent_model.model.id}"
    assert boss.attributes["agentkit.spend.keys"] == tuple(sorted([*keys, scripted]))
    helper = telemetry.run_span("invoke_agent helper")
    assert helper.attributes is not None
    assert helper.attributes["agentkit.spend.cost"] == pytest.approx(child_usd)
    assert "tenant:acme" in helper.attributes["agentkit.spend.keys"]
    # The counters: every request once under each of its keys, the sub-agent's included; a
    # model's key only its own requests'.
    cost = telemetry.counted("agentkit.spend.cost")
    tokens = telemetry.counted("agentkit.spend.tokens")
    for key in keys:
        assert cost[key] == pytest.approx(tenant.usd)
        assert tokens[key] == tenant.tokens
    assert cost[scripted] == pytest.approx(0.0035)
    assert cost["model:openai:gpt-4o-mini"] == pytest.approx(child_usd)
    assert cost == pytest.approx({k: ledger.spent(k, "total").usd for k in cost})
    # The parent's listeners saw its own two requests (its sub-agent's are the child run's).
    assert [(e.usd, e.tokens, e.settled) for e in seen] == [
        (pytest.approx(0.0018), 120, True), (pytest.approx(0.0017), 155, True),
    ]  # fmt: skip


def test_the_counted_keys_can_be_chosen_and_a_run_without_a_ledger_counts_none() -> None:
    model = priced([reply("hi", usage=usage(20, 20)), reply("hi", usage=usage(20, 20))])
    ledger = Ledger()
    telemetry = Telemetry()
    agent = Agent(model=model.model, stream_fn=model, name="one",
                  policies=[SpendPolicy(ledger, ["tenant:acme", "user:acme/1"], by_model=False)])
    telemetry.trace(agent, spend_keys=lambda key: not key.startswith("user:"))
    agent.prompt("Hello")
    assert telemetry.counted("agentkit.spend.cost") == {"tenant:acme": pytest.approx(0.001)}

    telemetry.spans.clear()
    plain = Agent(model=model.model, stream_fn=model, name="plain")
    telemetry.trace(plain)
    plain.prompt("Hello")
    span = telemetry.run_span("invoke_agent plain")
    assert span.attributes is not None
    assert span.attributes["agentkit.spend.cost"] == pytest.approx(0.001)
    assert span.attributes["agentkit.spend.tokens"] == 40
    assert "agentkit.spend.keys" not in span.attributes
    assert telemetry.counted("agentkit.spend.cost") == {"tenant:acme": pytest.approx(0.001)}


def test_hostile_costs_and_a_ledger_that_cannot_settle_leave_the_counters_whole(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(MemoryLedgerStore):
        def settle(self, reservation: Any, usd: float, tokens: int) -> bool:
            from agentkit.errors import LedgerError

            raise LedgerError("the store went away")

    telemetry = Telemetry()
    ledger = Ledger(Broken())
    seen: list[SpendEvent] = []
    # A catalog whose prices are not a number, then negative, then sound ($0.004).
    for prices in (ModelCost(input=float("nan")), ModelCost(input=-5.0), ModelCost(input=400.0)):
        model = priced([reply("a", usage=usage(10, 2))], prices)
        agent = Agent(model=model.model, stream_fn=model, name="odd",
                      policies=[SpendPolicy(ledger, ["tenant:odd"], by_model=False)])
        agent.subscribe(lambda e: seen.append(e) if isinstance(e, SpendEvent) else None)
        telemetry.trace(agent)
        assert agent.prompt("Hello").stop_reason == "stop"
    # A NaN or negative cost counts nothing (a counter only grows); the spend the ledger could
    # not record is still the fleet's spend, and the event says it was not settled.
    assert telemetry.counted("agentkit.spend.cost") == {"tenant:odd": pytest.approx(0.004)}
    assert telemetry.counted("agentkit.spend.tokens") == {"tenant:odd": 36}
    assert [e.settled for e in seen] == [False, False, False]
    assert "could not be settled" in caplog.text
    spans = [s for s in telemetry.spans.get_finished_spans() if s.name == "invoke_agent odd"]
    assert [s.attributes["agentkit.spend.cost"] for s in spans if s.attributes] == [
        0.0, 0.0, pytest.approx(0.004),
    ]  # fmt: skip
