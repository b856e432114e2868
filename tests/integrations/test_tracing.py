"""agentkit.integrations.tracing: the span tree of real runs, read back from the OpenTelemetry SDK's
in-memory exporter, and the stdlib logging records."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from agentkit import Agent, AgentTool, Budgets, Usage  # noqa: E402
from agentkit.abort import AbortSignal  # noqa: E402
from agentkit.integrations.tracing import enable_logging, enable_tracing  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.support import signal_tool  # noqa: E402

WAIT = 10.0


@pytest.fixture()
def exporter() -> tuple[InMemorySpanExporter, TracerProvider]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return spans, provider


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    named: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        named.setdefault(span.name, []).append(span)
    return named


def _parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _agent(replies: list[Any], tools: list[AgentTool]) -> Agent:
    model = ScriptedModel(replies)
    return Agent(model=model.model, stream_fn=model, tools=tools)


def test_span_tree_of_a_run_with_a_parallel_batch_an_error_and_an_abort(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    spans, provider = exporter
    tracer = provider.get_tracer("test")
    both_running = threading.Barrier(2, timeout=WAIT)  # the batch's calls must overlap

    def lookup(signal: AbortSignal) -> str:
        both_running.wait()
        with tracer.start_as_current_span("http lookup"):  # a span the tool's own code makes
            return "found"

    def broken(signal: AbortSignal) -> str:
        both_running.wait()
        raise RuntimeError("disk on fire")

    def wait_for_abort(signal: AbortSignal) -> str:
        assert signal.wait(WAIT)
        return "stopped"

    usage = Usage(input=10, output=5, total_tokens=15)
    agent = _agent(
        [
            reply(tool_call("lookup", id="a"), tool_call("broken", id="b"), usage=usage),
            reply(tool_call("wait_for_abort", id="c"), usage=usage),
        ],
        [
            signal_tool("lookup", lookup),
            signal_tool("broken", broken),
            signal_tool("wait_for_abort", wait_for_abort),
        ],
    )
    enable_tracing(agent, tracer_provider=provider, agent_name="helper")
    agent.subscribe(
        lambda e: (
            agent.abort()
            if e.type == "tool_execution_start" and e.tool_name == "wait_for_abort"
            else None
        )
    )
    with tracer.start_as_current_span("request handler") as outer:
        agent.prompt("go")
    agent.close()

    named = _by_name(spans.get_finished_spans())
    (run,) = named["invoke_agent helper"]
    assert _parent_id(run) == outer.get_span_context().span_id  # the caller's span, across threads
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.agent.name"] == "helper"
    assert run.attributes["gen_ai.usage.input_tokens"] == 20
    assert run.status.status_code is StatusCode.ERROR and run.attributes["error.type"] == "aborted"

    chats = sorted(named["chat scripted"], key=lambda s: s.start_time or 0)
    assert len(chats) == 2  # the abort came during tools: no third request
    for chat in chats:
        assert _parent_id(chat) == run.context.span_id
        assert chat.kind is trace.SpanKind.CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 10
        assert chat.attributes["gen_ai.usage.output_tokens"] == 5
        assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
        assert "gen_ai.input.messages" not in chat.attributes  # content is off by default

    tools = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("execute_tool")
    }
    assert set(tools) == {"a", "b", "c"}
    for span in tools.values():
        assert _parent_id(span) == run.context.span_id
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert "gen_ai.tool.call.arguments" not in span.attributes
    a, b, c = tools["a"], tools["b"], tools["c"]
    assert a.status.status_code is StatusCode.UNSET
    assert b.status.status_code is StatusCode.ERROR and b.attributes["error.type"] == "tool_error"
    assert b.status.description == "tool broken failed"  # the error's text is content: left out
    assert c.attributes["gen_ai.tool.name"] == "wait_for_abort"
    assert c.status.status_code is StatusCode.ERROR
    # The parallel batch: both calls ran at once, after the first request and before the second.
    assert a.start_time < b.end_time and b.start_time < a.end_time  # type: ignore[operator]
    assert chats[0].end_time <= a.start_time and a.end_time <= chats[1].start_time  # type: ignore[operator]
    # The tool's own span, made on a pool thread, nests under its call's execute_tool span.
    (inner,) = named["http lookup"]
    assert _parent_id(inner) == a.context.span_id


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_spans_a_tool_makes_nest_under_its_own_execute_tool_span(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    caplog: pytest.LogCaptureFixture,
    mode: str,
) -> None:
    spans, provider = exporter
    tracer = provider.get_tracer("test")
    names = ["alpha", "beta", "gamma"]
    # In parallel mode every start event of the batch comes before any call executes; the
    # barrier makes the three calls run at once as well.
    overlap = threading.Barrier(len(names), timeout=WAIT) if mode == "parallel" else None

    def work(name: str) -> Any:
        def run(signal: AbortSignal) -> str:
            if overlap is not None:
                overlap.wait()
            with tracer.start_as_current_span(f"work {name}"):  # the tool's own code's span
                return name

        return run

    model = ScriptedModel([reply(*(tool_call(n, id=n) for n in names)), "done"])

    def stream_fn(request_model: Any, context: Any, options: Any) -> Any:
        with tracer.start_as_current_span("provider request"):  # as an instrumented client does
            return model(request_model, context, options)

    agent = Agent(
        model=model.model,
        stream_fn=stream_fn,
        tools=[signal_tool(n, work(n)) for n in names],
        tool_execution=mode,
    )
    enable_tracing(agent, tracer_provider=provider)
    current_at_turn_end: list[Any] = []  # the loop thread's current span once a turn is over
    agent.subscribe(
        lambda e: (
            current_at_turn_end.append(trace.get_current_span().get_span_context().span_id)
            if e.type == "turn_end"
            else None
        )
    )
    with caplog.at_level(logging.ERROR):
        agent.prompt("go")
    agent.close()

    named = _by_name(spans.get_finished_spans())
    (run,) = named["invoke_agent"]
    calls = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("execute_tool")
    }
    assert set(calls) == set(names)
    for name in names:
        (own,) = named[f"work {name}"]
        assert _parent_id(own) == calls[name].context.span_id, name
        assert _parent_id(calls[name]) == run.context.span_id
    # Nothing of the tool calls stayed current on the loop's thread: the next request, and the
    # spans made while it is sent, nest as before.
    chats = sorted(named["chat scripted"], key=lambda s: s.start_time or 0)
    assert [_parent_id(chat) for chat in chats] == [run.context.span_id] * 2
    requests = sorted(named["provider request"], key=lambda s: s.start_time or 0)
    assert [_parent_id(r) for r in requests] == [chat.context.span_id for chat in chats]
    assert current_at_turn_end == [run.context.span_id] * 2
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]  # no bad detach


def test_a_failed_model_request_marks_chat_and_run(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    spans, provider = exporter
    agent = _agent([reply("partial", error="rate limited")], [])
    enable_tracing(agent, tracer_provider=provider)
    agent.prompt("hi")
    named = _by_name(spans.get_finished_spans())
    (chat,) = named["chat scripted"]
    (run,) = named["invoke_agent"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes["error.type"] == "error"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("error",)
    assert chat.status.description == "request error"  # the provider's text is content
    assert run.status.status_code is StatusCode.ERROR


def test_content_is_recorded_only_when_switched_on(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    spans, provider = exporter
    agent = _agent(
        [reply(tool_call("lookup", id="a")), "The answer is 42."],
        [signal_tool("lookup", lambda signal: "forty-two")],
    )
    disable = enable_tracing(agent, tracer_provider=provider, capture_content=True)
    agent.prompt("What is the answer?")
    finished = spans.get_finished_spans()
    chats = [s for s in finished if s.name.startswith("chat")]
    assert "What is the answer?" in str(chats[0].attributes["gen_ai.input.messages"])
    assert "The answer is 42." in str(chats[1].attributes["gen_ai.output.messages"])
    (tool_span,) = [s for s in finished if s.name == "execute_tool lookup"]
    assert "forty-two" in str(tool_span.attributes["gen_ai.tool.call.result"])

    disable()
    spans.clear()
    agent.stream_fn = ScriptedModel(["again"])  # the same agent, now untraced
    agent.prompt("again")
    assert spans.get_finished_spans() == ()


def test_logging_records_carry_the_run_and_tool_call(caplog: pytest.LogCaptureFixture) -> None:
    agent = _agent(
        [reply(tool_call("lookup", id="a"), tool_call("broken", id="b")), "done"],
        [signal_tool("lookup", lambda s: "ok"), signal_tool("broken", lambda s: 1 / 0)],
    )
    enable_logging(agent)
    with caplog.at_level(logging.DEBUG, logger="agentkit.run"):
        agent.prompt("go")
    records = [r for r in caplog.records if r.name == "agentkit.run"]
    run_ids = {getattr(r, "run_id", None) for r in records}
    assert len(run_ids) == 1 and None not in run_ids
    tool_records = {(r.tool_call_id, r.levelno) for r in records if hasattr(r, "tool_call_id")}
    assert ("a", logging.INFO) in tool_records
    assert ("b", logging.WARNING) in tool_records
    assert records[0].getMessage().endswith("started") and records[-1].getMessage().startswith(
        "run "
    )


@pytest.mark.processes
def test_nothing_is_imported_without_asking() -> None:
    code = (
        "import sys, agentkit, agentkit.integrations.tracing; from agentkit import Agent\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'mcp')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the run's status, the conventions' attributes, metrics, content, a real OTLP export --------


class Answer(BaseModel):
    value: int


def _run_that_ends(ending: str) -> Agent:
    """An agent whose next run ends with ``ending``: an invalid typed output (stop reason
    ``error``), its deadline (``budget``: timeout) or an abort during a tool."""

    def wait_for_abort(signal: AbortSignal) -> str:
        assert signal.wait(WAIT)
        return "stopped"

    if ending == "invalid_output":
        agent = _agent(["not json at all"], [])
        agent.output_type, agent.output_retries = Answer, 0
        return agent
    agent = _agent(
        [reply(tool_call("wait_for_abort", id="w")), "done"],
        [signal_tool("wait_for_abort", wait_for_abort)],
    )
    if ending == "deadline":
        agent.budgets = Budgets(timeout=0.2)
    else:
        agent.subscribe(lambda e: agent.abort() if e.type == "tool_execution_start" else None)
    return agent


@pytest.mark.parametrize(
    ("ending", "stop_reason", "error_type"),
    [
        ("invalid_output", "error", "OutputValidationError"),
        ("deadline", "budget", "timeout"),
        ("aborted", "aborted", "aborted"),
    ],
)
def test_the_run_span_status_follows_the_runs_stop_reason(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    ending: str,
    stop_reason: str,
    error_type: str,
) -> None:
    spans, provider = exporter
    agent = _run_that_ends(ending)
    enable_tracing(agent, tracer_provider=provider)
    result = agent.prompt("go")
    agent.close()
    assert result.stop_reason == stop_reason
    (run,) = _by_name(spans.get_finished_spans())["invoke_agent"]
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes["error.type"] == error_type
    # The description names what happened, never the model's text it rejected.
    assert "not json" not in (run.status.description or "")


def test_chat_spans_carry_the_conventions_attributes_and_count_cached_input(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    spans, provider = exporter
    usage = Usage(input=600, output=50, cache_read=400, total_tokens=1050)
    agent = _agent([reply('{"value": 7}', usage=usage)], [])
    agent.session_id, agent.output_type = "conversation-7", Answer
    enable_tracing(agent, tracer_provider=provider)
    assert agent.prompt("seven?").output == Answer(value=7)
    named = _by_name(spans.get_finished_spans())
    (chat,) = named["chat scripted"]
    (run,) = named["invoke_agent"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 1000  # cached tokens included
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 400
    assert chat.attributes["gen_ai.usage.output_tokens"] == 50
    assert chat.attributes["gen_ai.request.stream"] is True
    assert chat.attributes["gen_ai.conversation.id"] == "conversation-7"
    assert chat.attributes["gen_ai.output.type"] == "json"
    assert run.attributes["gen_ai.output.type"] == "json"
    assert run.attributes["gen_ai.usage.input_tokens"] == 1000
    assert run.attributes["gen_ai.usage.cache_read.input_tokens"] == 400


@pytest.mark.parametrize("answer", ['{"value": 7}', "not json at all"], ids=["typed", "failed"])
def test_a_runs_own_output_type_is_the_one_the_spans_say(
    exporter: tuple[InMemorySpanExporter, TracerProvider], answer: str
) -> None:
    # The output type is the run's option here, not the agent's: the spans say json all the
    # same, also for a typed run that fails (it has no output to tell by).
    spans, provider = exporter
    agent = _agent([answer, '{"value": 8}'], [])
    enable_tracing(agent, tracer_provider=provider)
    result = agent.prompt("seven?", output_type=Answer, output_retries=0)
    assert result.stop_reason == ("stop" if answer.startswith("{") else "error")
    assert agent.prompt("eight?").text == '{"value": 8}'  # the agent's own: text
    named = _by_name(spans.get_finished_spans())
    typed, plain = sorted(named["chat scripted"], key=lambda span: span.start_time or 0)
    runs = sorted(named["invoke_agent"], key=lambda span: span.start_time or 0)
    assert typed.attributes["gen_ai.output.type"] == runs[0].attributes["gen_ai.output.type"]
    assert typed.attributes["gen_ai.output.type"] == "json"
    assert plain.attributes["gen_ai.output.type"] == "text"
    assert runs[1].attributes["gen_ai.output.type"] == "text"


def test_a_run_knows_its_options_its_own_over_its_agents() -> None:
    from dataclasses import fields

    from agentkit.options import RUN_OPTIONS

    seen: list[Any] = []
    agent = _agent(["one", "two"], [])
    agent.budgets, agent.deps = Budgets(max_turns=3), "the agent's"
    agent.subscribe(lambda e: seen.append(agent.run_options) if e.type == "agent_start" else None)
    run = agent.start("go", deps="the run's", tool_choice="none", output_retries=5)
    run.result()
    assert run.options is not None and seen == [run.options]
    assert (run.options.deps, run.options.tool_choice, run.options.output_retries) == (
        "the run's", "none", 5)  # fmt: skip
    assert run.options.budgets == Budgets(max_turns=3) and run.options.output_type is None
    assert agent.run_options is None  # idle
    agent.prompt("again")
    assert seen[1].deps == "the agent's" and seen[1].tool_choice is None
    assert {f.name for f in fields(run.options)} == RUN_OPTIONS  # one field per run option


def test_token_usage_and_operation_duration_histograms() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    usage = Usage(input=600, output=50, cache_read=400, total_tokens=1050)
    agent = _agent(
        [reply(tool_call("lookup", id="a"), usage=usage), reply("done", usage=usage)],
        [signal_tool("lookup", lambda signal: "found")],
    )
    enable_tracing(agent, tracer_provider=TracerProvider(), meter_provider=meters)
    agent.prompt("go")
    agent.close()

    data = reader.get_metrics_data()
    assert data is not None
    metrics = {
        m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    }
    tokens = metrics["gen_ai.client.token.usage"]
    assert tokens.unit == "{token}"
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens.data.data_points}
    assert (by_type["input"].count, by_type["input"].sum) == (2, 2000)
    assert (by_type["output"].count, by_type["output"].sum) == (2, 100)
    assert by_type["input"].attributes["gen_ai.request.model"] == "scripted"
    duration = metrics["gen_ai.client.operation.duration"]
    assert duration.unit == "s"
    counts = {p.attributes["gen_ai.operation.name"]: p.count for p in duration.data.data_points}
    assert counts == {"chat": 2, "invoke_agent": 1}


SECRET = "the launch code is 0451"


def test_no_content_reaches_a_span_with_capture_off_not_even_through_an_error(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    from tests.providers.replay_server import ReplayServer, Reply, make_model
    from tests.providers.replay_server import options as test_options

    spans, provider = exporter

    def parse(signal: AbortSignal) -> str:
        raise ValueError(f"cannot parse: {SECRET}")

    server = ReplayServer()
    server.start()
    try:
        for capture in (False, True):
            # A tool that fails quoting its input, then a provider whose 400 quotes the prompt.
            agent = _agent([reply(tool_call("parse", id="p")), "ok"], [signal_tool("parse", parse)])
            enable_tracing(agent, tracer_provider=provider, capture_content=capture)
            agent.prompt("parse it")
            body = json.dumps({"error": {"message": f"Invalid prompt: {SECRET}"}}).encode()
            server.enqueue(Reply(status=400, body=body, content_type="application/json"))
            agent.stream_fn = None  # the default: the real providers, over HTTP
            agent.state.model = make_model("openai-completions", server.url)
            agent.stream_options = test_options()
            failed = agent.prompt(f"Tell me {SECRET}")
            assert failed.stop_reason == "error" and SECRET in (failed.error_message or "")
            agent.close()

            finished = spans.get_finished_spans()
            recorded = [str(s.status.description) + str(dict(s.attributes or {})) for s in finished]
            statuses = [s.status.description or "" for s in finished]
            if capture:  # the same runs do carry the text when content is switched on
                assert any(SECRET in d for d in statuses)
            else:
                assert not [r for r in recorded if SECRET in r]
                chat = [s for s in finished if s.name == "chat gpt-4o-mini"][-1]
                assert chat.attributes["error.type"] == "400"
                assert chat.status.description == "provider error (HTTP 400)"
            spans.clear()
    finally:
        server.stop()


def test_no_content_reaches_a_log_record_with_capture_off(caplog: pytest.LogCaptureFixture) -> None:
    from tests.providers.replay_server import ReplayServer, Reply, make_model
    from tests.providers.replay_server import options as test_options

    server = ReplayServer()
    server.start()
    try:
        for capture in (False, True):
            # A provider whose 400 quotes the prompt, over real HTTP.
            model = make_model("openai-completions", server.url)
            agent = Agent(model=model, stream_options=test_options())
            if capture:
                enable_logging(agent, capture_content=True)
            else:
                enable_logging(agent)  # the default
            body = json.dumps({"error": {"message": f"Invalid prompt: {SECRET}"}}).encode()
            server.enqueue(Reply(status=400, body=body, content_type="application/json"))
            caplog.clear()
            with caplog.at_level(logging.DEBUG, logger="agentkit.run"):
                failed = agent.prompt(f"Tell me {SECRET}")
            agent.close()
            assert failed.stop_reason == "error" and SECRET in (failed.error_message or "")
            records = [r for r in caplog.records if r.name == "agentkit.run"]
            (error,) = [r for r in records if r.levelno == logging.ERROR]
            if capture:  # the same run's record carries the text when content is switched on
                assert SECRET in error.getMessage()
            else:
                assert not [r for r in records if SECRET in r.getMessage() + str(r.__dict__)]
                assert error.getMessage() == "model request error: provider error (HTTP 400)"
            assert error.http_status == 400  # type: ignore[attr-defined]
    finally:
        server.stop()


def test_a_failed_run_reaches_a_real_otlp_http_receiver() -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    exported: list[Any] = []
    arrived = threading.Event()

    class Receiver(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    exported.extend(scope.spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            if any(s.name == "invoke_agent" for s in exported):
                arrived.set()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    serving = threading.Thread(target=httpd.serve_forever, name="otlp-receiver", daemon=True)
    serving.start()
    try:
        host, port = httpd.server_address[:2]
        provider = TracerProvider()
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"http://{host}:{port}/v1/traces"))
        )
        agent = _run_that_ends("deadline")
        enable_tracing(agent, tracer_provider=provider)
        assert agent.prompt("go").stop_reason == "budget"
        agent.close()
        assert arrived.wait(WAIT)
        provider.shutdown()
    finally:
        httpd.shutdown()
        httpd.server_close()
        serving.join(WAIT)
    (run,) = [s for s in exported if s.name == "invoke_agent"]
    attributes = {a.key: a.value for a in run.attributes}
    assert run.status.code == run.status.STATUS_CODE_ERROR
    assert attributes["error.type"].string_value == "timeout"
    assert {s.name for s in exported} >= {"chat scripted", "execute_tool wait_for_abort"}


def test_a_compaction_is_a_span_under_its_run_and_on_its_own_when_asked_for(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    from agentkit.compaction import Compaction
    from tests.compaction_support import Windowed, agent_for

    spans, provider = exporter
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction())
    enable_tracing(agent, tracer_provider=provider)
    turns = 0
    while windowed.summaries == 0:  # until the conversation nears the window
        assert agent.prompt(f"fetch page {turns}").stop_reason == "stop"
        turns += 1
        assert turns < 30
    named = _by_name(spans.get_finished_spans())
    (span,) = named["compaction"]
    runs = {s.context.span_id: s for s in named["invoke_agent"]}
    assert _parent_id(span) in runs  # under the run whose request it made fit
    attributes = dict(span.attributes or {})
    assert attributes["agentkit.compaction.reason"] == "threshold"
    assert attributes["agentkit.compaction.strategy"] == "summarize"
    assert attributes["agentkit.compaction.tokens_after"] < attributes[
        "agentkit.compaction.tokens_before"]  # fmt: skip
    assert attributes["agentkit.compaction.requests"] == 1
    assert attributes["gen_ai.usage.input_tokens"] > 0
    # the summary request is the compaction's, not a turn: no chat span of its own
    assert len(named["chat windowed"]) == len(windowed.sizes) - windowed.summaries

    spans.clear()
    agent.compact()
    (manual,) = _by_name(spans.get_finished_spans())["compaction"]
    assert manual.parent is None and manual.attributes["agentkit.compaction.reason"] == "manual"
