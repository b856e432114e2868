"""Sub-agents as tools (``agent.as_tool()``): a fresh run per call, parallel calls independent,
the parent's abort, budgets and deadline reaching the child, usage adding up (per child too),
events and spans nesting, typed output, a session of the child's own; over real HTTP against
the replay server where a provider is involved."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    AbortSignal,
    Agent,
    Budgets,
    ToolExecutionUpdateEvent,
    ToolResultMessage,
    Usage,
    tool,
)
from agentkit.sessions import Session, open_store
from agentkit.subagents import SubAgentEvent, child_runs
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.providers.replay_server import (
    ReplayServer,
    Reply,
    call_delta,
    chat_sse,
    make_model,
    options,
)
from tests.support import WAIT, signal_tool

USAGE = Usage(input=100, output=10, cache_read=0, total_tokens=110)


def _user_text(context: Any) -> str:
    users = [m for m in context.messages if getattr(m, "role", None) == "user"]
    content = users[-1].content
    return content if isinstance(content, str) else content[0].text


def _report(context: Any, options: Any) -> Any:
    """The child's scripted answer: a report on the task it was given."""
    return reply(f"report on {_user_text(context)}", usage=USAGE)


def _child(*scripts: Any, **options: Any) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(list(scripts))
    agent = Agent(
        model=model.model,
        stream_fn=model,
        name="researcher",
        description="Researches one topic and reports.",
        system_prompt="You research.",
        **options,
    )
    return agent, model


def _parent(replies: list[Any], tools: list[Any], **options: Any) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(replies)
    return Agent(model=model.model, stream_fn=model, tools=tools, **options), model


def _delegate(*tasks: str, name: str = "researcher") -> Any:
    return reply(*(tool_call(name, {"task": t}, id=f"call-{t}") for t in tasks), usage=USAGE)


def test_the_tool_takes_its_name_description_and_input_from_the_agent() -> None:
    child, _ = _child()
    tool = child.as_tool()
    assert (tool.name, tool.description) == ("researcher", "Researches one topic and reports.")
    assert tool.parameters["required"] == ["task"]

    class Question(BaseModel):
        topic: str
        depth: int = 1

    typed = child.as_tool("deep_researcher", input_type=Question)
    assert typed.name == "deep_researcher"
    assert set(typed.parameters["properties"]) == {"topic", "depth"}
    with pytest.raises(ValueError, match="needs a name"):
        Agent(stream_fn=ScriptedModel()).as_tool()


def test_parallel_calls_are_fresh_independent_runs_whose_usage_adds_into_the_parents() -> None:
    both_searching = threading.Barrier(2, timeout=WAIT)  # the two children's tools overlap

    def search(signal: AbortSignal) -> str:
        both_searching.wait()
        return "results"

    def search_then_report(context: Any, options: Any) -> Any:
        return reply(tool_call("search"), usage=USAGE)

    child, child_model = _child(
        search_then_report,
        search_then_report,
        _report,
        _report,
        tools=[signal_tool("search", search)],
    )
    before = list(child.state.messages)
    parent, parent_model = _parent(
        [_delegate("tides", "volcanoes"), reply("Both researched.", usage=USAGE)],
        [child.as_tool()],
    )
    result = parent.prompt("Research tides and volcanoes")

    assert result.stop_reason == "stop" and result.text == "Both researched."
    results = {m.tool_call_id: m for m in result if isinstance(m, ToolResultMessage)}
    assert results["call-tides"].content[0].text == "report on tides"
    assert results["call-volcanoes"].content[0].text == "report on volcanoes"
    # Each child request saw its own task only: the two runs shared no transcript.
    for request in child_model.requests:
        tasks = [m for m in request.messages if getattr(m, "role", None) == "user"]
        assert len(tasks) == 1
    assert child.state.messages == before and not child.state.is_streaming  # never ran itself
    # The parent's usage counts its own two requests and the children's four.
    assert result.usage.requests == 2 + 4
    assert result.usage.tool_calls == 2 + 2
    assert result.usage.input == 6 * 100 and result.usage.output == 6 * 10
    per_child = {c.tool_call_id: c for c in child_runs(result)}
    assert set(per_child) == {"call-tides", "call-volcanoes"}
    for run in per_child.values():
        assert (run.agent, run.stop_reason) == ("researcher", "stop")
        assert (run.usage.requests, run.usage.tool_calls, run.usage.input) == (2, 1, 200)
    assert results["call-tides"].usage is not None and results["call-tides"].usage.input == 200


@pytest.mark.parametrize("execution", ["parallel", "inline"])
def test_the_childs_events_reach_the_parents_listeners_in_order(execution: str) -> None:
    loop_threads: list[threading.Thread] = []  # where the child's loop ran
    child, _ = _child(
        _report,
        prepare_request=lambda request, signal: loop_threads.append(threading.current_thread()),
    )
    tool_threads: list[threading.Thread] = []
    parent, _ = _parent([_delegate("tides"), "ok"], [child.as_tool()], tool_execution=execution)
    updates: list[SubAgentEvent] = []
    parent.subscribe(
        lambda e: (
            updates.append(e.partial_result) if isinstance(e, ToolExecutionUpdateEvent) else None
        )
    )
    parent.subscribe(
        lambda e: (
            tool_threads.append(threading.current_thread()) if e.type == "agent_start" else None
        )
    )
    parent.prompt("go")
    # The child's run had no worker of its own: its loop ran on the parent's tool thread, or
    # inline on the parent's own thread, where the parent's listeners (and so the child's
    # events, live) run too.
    (loop_thread,) = loop_threads
    if execution == "inline":
        assert loop_thread is tool_threads[0]
    else:
        assert loop_thread is not tool_threads[0] and loop_thread.name.startswith("agentkit-tool")
    assert all(isinstance(u, SubAgentEvent) for u in updates)
    assert {(u.agent, u.tool_call_id) for u in updates} == {("researcher", "call-tides")}
    kinds = [u.event.type for u in updates]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert "message_update" in kinds


class Report(BaseModel):
    topic: str
    facts: list[str]


def test_a_typed_output_is_the_tools_result() -> None:
    answer = {"topic": "tides", "facts": ["the moon pulls"]}
    child, _ = _child(json.dumps(answer), output_type=Report)
    parent, parent_model = _parent([_delegate("tides"), "ok"], [child.as_tool()])
    result = parent.prompt("go")
    (message,) = [m for m in result if isinstance(m, ToolResultMessage)]
    assert json.loads(message.content[0].text) == answer
    ends = []
    parent.subscribe(lambda e: ends.append(e) if e.type == "tool_execution_end" else None)
    parent_model.add(_delegate("tides"), "ok")
    child.stream_fn = ScriptedModel([json.dumps(answer)])
    parent.prompt("again")
    assert ends[0].result.structured_content == answer


def test_the_child_draws_from_the_parents_remaining_budget() -> None:
    def search_forever(context: Any, options: Any) -> Any:
        return reply(tool_call("search"), usage=USAGE)

    child, child_model = _child(
        *[search_forever] * 10, tools=[signal_tool("search", lambda s: "more")]
    )
    parent, _ = _parent(
        [_delegate("tides"), "never asked"], [child.as_tool()], budgets=Budgets(max_turns=3)
    )
    result = parent.prompt("go")
    # The parent's first request left 2 turns: the child made 2, then the parent had none.
    assert len(child_model.requests) == 2
    (run,) = child_runs(result)
    assert (run.stop_reason, run.usage.requests) == ("budget", 2)
    assert result.stop_reason == "budget" and result.budget == "max_turns"
    assert result.usage.requests == 3


@pytest.mark.parametrize("execution", ["parallel", "inline"])
def test_children_of_one_batch_share_the_parents_turns_and_tool_calls(execution: str) -> None:
    def search_forever(context: Any, options: Any) -> Any:
        return reply(tool_call("search"), usage=USAGE)

    searches: list[str] = []
    both_started = threading.Barrier(2, timeout=WAIT) if execution == "parallel" else None

    def search(signal: AbortSignal) -> str:
        searches.append("s")
        if both_started is not None and len(searches) <= 2:
            both_started.wait()  # the siblings run at once, each with a search under way
        return "more"

    child, child_model = _child(*[search_forever] * 20, tools=[signal_tool("search", search)])
    parent, parent_model = _parent(
        [_delegate("tides", "moons"), "never asked"], [child.as_tool()],
        budgets=Budgets(max_turns=4, max_tool_calls=5), tool_execution=execution,
    )  # fmt: skip
    result = parent.prompt("go")
    runs = child_runs(result)
    # The parent's request left 3 turns, shared by both children: never 3 each.
    assert len(child_model.requests) == 3
    assert sum(run.usage.requests for run in runs) == 3
    assert result.usage.requests == 4 and len(parent_model.requests) == 1
    assert result.usage.tool_calls <= 5 and len(searches) <= 3
    assert result.stop_reason == "budget"


def test_the_parents_deadline_ends_the_childs_tool() -> None:
    child_tool_aborted = threading.Event()

    def wait_for_abort(signal: AbortSignal) -> str:
        if signal.wait(WAIT):
            child_tool_aborted.set()
        return "stopped"

    child, _ = _child(
        reply(tool_call("wait_for_abort")),
        "late",
        tools=[signal_tool("wait_for_abort", wait_for_abort)],
    )
    parent, _ = _parent(
        [_delegate("tides"), "late"], [child.as_tool()], budgets=Budgets(timeout=0.3)
    )
    result = parent.prompt("go")
    assert child_tool_aborted.wait(WAIT)
    assert result.stop_reason == "budget" and result.budget == "timeout"
    # The deadline decided the run's result: it does not wait for the child to report, so the
    # call is either the child's own aborted run or given up on at the deadline.
    (outcome,) = [m for m in result if m.role == "tool_result"]
    runs = child_runs(result)
    assert runs == [] or [r.stop_reason for r in runs] in (["budget"], ["aborted"])
    if not runs:
        assert "deadline" in outcome.content[0].text


def test_a_child_given_up_on_at_the_deadline_still_counts_its_spend_in_the_parent() -> None:
    in_hook, release = threading.Event(), threading.Event()

    def stubborn_hook(ctx: Any, signal: AbortSignal) -> None:
        in_hook.set()
        release.wait(WAIT)  # ignores every abort: the child's own deadline cannot end it

    @tool
    def lookup() -> str:
        """Looks up."""
        return "found"

    child, _ = _child(
        reply(tool_call("lookup"), usage=USAGE), "never", tools=[lookup],
        before_tool_call=stubborn_hook,
    )  # fmt: skip
    parent, _ = _parent(
        [_delegate("tides"), "late"], [child.as_tool()], budgets=Budgets(timeout=0.5)
    )
    try:
        result = parent.prompt("go")
        assert in_hook.is_set()  # the child was still going when the parent ended
        assert result.stop_reason == "budget" and result.budget == "timeout"
        (outcome,) = [m for m in result if m.role == "tool_result"]
        assert "deadline" in outcome.content[0].text  # given up on, no result of its own
        # The parent's request and the child's; the sub-agent call and the child's own.
        assert (result.usage.requests, result.usage.tool_calls) == (2, 2)
        assert result.usage.input == 2 * USAGE.input
        counted = result.usage.model_copy(deep=True)
    finally:
        release.set()
    for thread in [t for t in threading.enumerate() if t.name.startswith("agentkit-tool")]:
        thread.join(WAIT)  # the child's run winds down on the call's thread
    assert result.usage == counted  # what it reports later changes nothing


def test_the_childs_spans_nest_under_the_parents_execute_tool_span() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentkit.integrations.tracing import enable_tracing

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    child, _ = _child(_report, _report)
    parent, _ = _parent([_delegate("tides", "volcanoes"), "ok"], [child.as_tool()], name="lead")
    enable_tracing(parent, tracer_provider=provider)
    parent.prompt("go")
    finished = spans.get_finished_spans()
    (lead,) = [s for s in finished if s.name == "invoke_agent lead"]
    calls = {
        s.attributes["gen_ai.tool.call.id"]: s
        for s in finished
        if s.name == "execute_tool researcher"
    }
    children = [s for s in finished if s.name == "invoke_agent researcher"]
    assert len(children) == 2
    assert {s.parent.span_id for s in children} == {c.context.span_id for c in calls.values()}
    assert all(c.parent.span_id == lead.context.span_id for c in calls.values())
    child_ids = {s.context.span_id for s in children}
    child_chats = [
        s for s in finished if s.name == "chat scripted" and s.parent.span_id in child_ids
    ]
    assert len(child_chats) == 2


def test_a_grandchild_is_traced_once_under_its_parents_call() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agentkit.integrations.tracing import enable_tracing

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    grandchild, _ = _child(_report)
    grandchild.name = "fact_checker"
    child, _ = _child(
        reply(tool_call("fact_checker", {"task": "tides"}, id="g")),
        "checked",
        tools=[grandchild.as_tool()],
    )
    parent, _ = _parent([_delegate("tides"), "ok"], [child.as_tool()], name="lead")
    enable_tracing(parent, tracer_provider=provider)
    parent.prompt("go")
    runs = {s.name: s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")}
    names = [s.name for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert sorted(names) == [
        "invoke_agent fact_checker",
        "invoke_agent lead",
        "invoke_agent researcher",
    ]
    (call,) = [s for s in spans.get_finished_spans() if s.name == "execute_tool fact_checker"]
    assert runs["invoke_agent fact_checker"].parent.span_id == call.context.span_id
    assert call.parent.span_id == runs["invoke_agent researcher"].context.span_id


def test_a_child_keeps_its_own_session_named_after_the_parents(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    child, _ = _child(_report, _report, _report)
    parent, _ = _parent(
        [_delegate("tides", "volcanoes"), "ok", _delegate("comets"), "ok"],
        [child.as_tool(session=store)],
        session=Session("conversation-9", store),
    )
    parent.prompt("first")
    parent.prompt("second")
    kept = Session("conversation-9/researcher", store).load()
    tasks = [m.content[0].text for m in kept if getattr(m, "role", None) == "user"]
    assert sorted(tasks[:2]) == ["tides", "volcanoes"] and tasks[2] == "comets"
    assert [m.role for m in kept].count("assistant") == 3  # the calls ran one after another


# --- over real HTTP: the parent and the child on the replay server ------------------------------


@pytest.mark.parametrize("where", ["child tool", "child stream"])
def test_an_abort_from_another_thread_reaches_the_child_over_http(
    server: ReplayServer, where: str
) -> None:
    model = make_model("openai-completions", server.url)
    child_tool_started, child_tool_aborted = threading.Event(), threading.Event()

    def slow_search(signal: AbortSignal) -> str:
        child_tool_started.set()
        if signal.wait(WAIT):
            child_tool_aborted.set()
        return "partial results"

    server.enqueue(
        Reply(chat_sse(call_delta("p1", "researcher", {"task": "tides"}), finish="tool_calls"))
    )
    if where == "child tool":
        server.enqueue(Reply(chat_sse(call_delta("c1", "slow_search", {}), finish="tool_calls")))
    else:  # the child's answer stalls after its first bytes
        server.enqueue(
            Reply(chat_sse({"content": "Tides are"}, {"content": " caused by"}), stall_after=40)
        )
    child = Agent(
        model=model,
        name="researcher",
        stream_options=options(),
        tools=[signal_tool("slow_search", slow_search)],
    )
    parent = Agent(model=model, stream_options=options(), tools=[child.as_tool()])
    updates: list[str] = []
    parent.subscribe(
        lambda e: (
            updates.append(e.partial_result.event.type)
            if isinstance(e, ToolExecutionUpdateEvent)
            else None
        )
    )

    def abort_when_the_child_works() -> None:
        if where == "child tool":
            assert child_tool_started.wait(WAIT)
        else:
            assert server.wait_for_requests(2, WAIT)
        parent.abort()

    aborter = threading.Thread(target=abort_when_the_child_works, name="test-aborter")
    aborter.start()
    result = parent.prompt("Research tides")
    aborter.join(WAIT)

    assert result.stop_reason == "aborted"
    assert len(server.requests) == 2  # the child made no request after the abort
    if where == "child tool":
        assert child_tool_aborted.is_set()
    (run,) = child_runs(result)
    assert run.stop_reason == "aborted"
    assert updates[-1] == "agent_end"  # the child's run ended before the parent's call did
    (message,) = [m for m in result if isinstance(m, ToolResultMessage)]
    assert message.is_error
    assert not parent.state.is_streaming and not child.state.is_streaming


def test_interrupting_the_parent_stops_the_child_and_keeps_what_it_spent() -> None:
    child_tool_started = threading.Event()

    def wait_for_abort(signal: AbortSignal) -> str:
        child_tool_started.set()
        signal.wait(WAIT)
        return "stopped"

    child, _ = _child(
        reply(tool_call("wait_for_abort"), usage=USAGE),
        "never",
        tools=[signal_tool("wait_for_abort", wait_for_abort)],
    )
    parent, _ = _parent(
        [_delegate("tides"), lambda context, options: f"heard: {_user_text(context)}"],
        [child.as_tool()],
    )

    def interrupter() -> None:
        assert child_tool_started.wait(WAIT)
        parent.interrupt("never mind the tides")

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    result = parent.prompt("go")
    thread.join(WAIT)
    assert result.stop_reason == "stop" and result.text == "heard: never mind the tides"
    (message,) = [m for m in result if isinstance(m, ToolResultMessage)]
    assert message.is_error and "interrupted by the user" in message.content[0].text
    (run,) = child_runs(result)
    assert (run.stop_reason, run.usage.requests) == ("aborted", 1)
    assert result.usage.requests == 2 + 1
    assert result.usage.input == 100 + 100 + result[-1].usage.input  # the child's included
