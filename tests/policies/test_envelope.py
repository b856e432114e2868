"""The run envelope: results, usage, budgets, typed output, tool controls and
approvals, on a scripted model. Waits on other threads use events and generous bounds."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from typing_extensions import TypedDict

from agentkit import (
    AbortError,
    AbortSignal,
    Agent,
    Approvals,
    AssistantMessage,
    BudgetExceededError,
    Budgets,
    Model,
    ModelCost,
    OutputValidationError,
    ProviderError,
    RunContext,
    RunResult,
    ToolCall,
    ToolResultMessage,
    ToolRetry,
    Usage,
    UserMessage,
    tool,
)
from agentkit.budgets import DEFAULT_MAX_TURNS
from agentkit.testing import ScriptedModel, reply, thinking, tool_call
from tests.support import WAIT, make_agent

PRICED = Model(
    id="priced", api="scripted", provider="scripted", base_url="",
    cost=ModelCost(input=1000.0, output=1000.0),  # USD per million tokens: 0.001 per token
)


def usage(input: int, output: int) -> Usage:
    return Usage(input=input, output=output, total_tokens=input + output)


def priced_agent(replies: list[Any], **options: Any) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(replies, model=PRICED)
    return Agent(model=PRICED, stream_fn=model, **options), model


def call_results(result: list[Any]) -> tuple[list[str], list[str]]:
    """Ids of every tool call and of every tool result in ``result``."""
    calls = [c.id for m in result if isinstance(m, AssistantMessage) for c in m.content
             if isinstance(c, ToolCall)]
    results = [m.tool_call_id for m in result if isinstance(m, ToolResultMessage)]
    return calls, results


@tool
def echo(text: str) -> str:
    """Echo the text back."""
    return text


# --- results ------------------------------------------------------------------------------------


def test_prompt_returns_a_result_that_is_still_the_message_list() -> None:
    agent, _ = priced_agent(
        [reply(tool_call("echo", {"text": "x"}), usage=usage(10, 2)),
         reply(thinking("hmm"), "Hello ", "world", usage=usage(20, 3))],
        tools=[echo],
    )
    result = agent.prompt("hi")
    assert isinstance(result, RunResult) and isinstance(result, list)
    assert [m.role for m in result] == ["user", "assistant", "tool_result", "assistant"]
    assert result[-1] is agent.state.messages[-1]
    assert result.text == "Hello world"  # thinking comes first and is left out
    assert result[-1].text == "Hello world"
    assert result.stop_reason == "stop" and result.budget is None and result.error_message is None
    u = result.usage
    assert (u.input, u.output, u.total_tokens, u.requests, u.tool_calls) == (30, 5, 35, 2, 1)
    assert u.cost.total == pytest.approx(0.035)  # from the model's prices
    assert result.raise_for_error() is result
    assert result.messages == list(result)


def test_failed_run_raises_provider_error_with_its_status_on_request() -> None:
    agent, _ = make_agent([reply(error="Rate limited (HTTP 429): slow down")])
    result = agent.prompt("hi")
    assert result.stop_reason == "error" and result.text == ""
    assert result.error_message == "Rate limited (HTTP 429): slow down"
    with pytest.raises(ProviderError) as info:
        result.raise_for_error()
    assert info.value.status == 429


def test_aborted_run_result_and_stream_and_run_results() -> None:
    agent, _ = make_agent([reply("partial", hang=True), "two", "three"])
    run = agent.start("hi")
    assert agent.wait_for_idle(0.05) is False
    run.abort()
    result = run.result(WAIT)
    assert result.stop_reason == "aborted"
    with pytest.raises(AbortError):
        result.raise_for_error()
    assert agent.start("again").result(WAIT).text == "two"
    with agent.stream("more") as events:
        for _ in events:
            pass
    assert events.result().text == "three" and events.result().usage.requests == 1


def test_a_failing_hook_is_the_results_error() -> None:
    def broken(turn: Any, signal: Any) -> None:
        raise RuntimeError("hook broke")

    agent, _ = make_agent(["fine"], finish_turn=broken)
    result = agent.prompt("hi")
    assert result.stop_reason == "error" and "hook broke" in (result.error_message or "")
    with pytest.raises(RuntimeError, match="hook broke"):
        result.raise_for_error()


def test_model_as_provider_colon_id() -> None:
    agent = Agent(model="openai:gpt-4.1-mini")
    assert (agent.state.model.provider, agent.state.model.id) == ("openai", "gpt-4.1-mini")
    assert agent.state.model.cost.input > 0  # priced from the catalog
    with pytest.raises(ValueError, match="provider:id"):
        Agent(model="gpt-4.1-mini")
    # Read as the command line reads --model: a local server's preset, a provider's default.
    local = Agent(model="ollama:llama3.2").state.model
    assert (local.provider, local.id, local.base_url) == (
        "ollama",
        "llama3.2",
        "http://127.0.0.1:11434/v1",
    )
    assert Agent(model="anthropic").state.model.id == "claude-sonnet-4-5"


# --- budgets ------------------------------------------------------------------------------------


def runaway(context: Any, options: Any) -> Any:
    return reply(tool_call("echo", {"text": "again"}))


def test_max_turns_ends_the_run_with_a_valid_transcript() -> None:
    agent, model = make_agent([runaway] * 10, tools=[echo], budgets=Budgets(max_turns=3))
    result = agent.prompt("loop")
    assert result.stop_reason == "budget" and result.budget == "max_turns"
    assert len(model.requests) == 3 and result.usage.requests == 3
    calls, results = call_results(result)
    assert calls == results and len(calls) == 3  # every call has its result
    with pytest.raises(BudgetExceededError) as info:
        result.raise_for_error()
    assert info.value.limit == "max_turns"


def test_default_turn_cap_stops_a_runaway_model_unless_lifted() -> None:
    model = ScriptedModel([runaway] * (DEFAULT_MAX_TURNS + 5))
    agent = Agent(model=model.model, stream_fn=model, tools=[echo])
    result = agent.prompt("loop")
    assert (result.stop_reason, result.budget) == ("budget", "max_turns")
    assert len(model.requests) == DEFAULT_MAX_TURNS

    lifted = ScriptedModel([runaway] * (DEFAULT_MAX_TURNS + 5) + ["done"])
    agent = Agent(model=lifted.model, stream_fn=lifted, tools=[echo], budgets={"max_turns": None})
    assert agent.prompt("loop").text == "done"
    assert len(lifted.requests) == DEFAULT_MAX_TURNS + 6


def test_max_tool_calls_refuses_the_excess_calls_and_ends() -> None:
    batch = reply(*(tool_call("echo", {"text": str(i)}) for i in range(3)))
    executed: list[str] = []

    @tool
    def record(text: str) -> str:
        """Record."""
        executed.append(text)
        return text

    model = ScriptedModel([reply(tool_call("record", {"text": "a"})),
                           reply(*(tool_call("record", {"text": t}) for t in "bcd")), "never"])
    agent = Agent(model=model.model, stream_fn=model, tools=[record],
                  budgets=Budgets(max_tool_calls=2))
    result = agent.prompt("go")
    assert executed == ["a", "b"]
    assert (result.stop_reason, result.budget) == ("budget", "max_tool_calls")
    calls, results = call_results(result)
    assert calls == results and len(calls) == 4
    refused = [m for m in result if isinstance(m, ToolResultMessage)][-2:]
    assert all(m.is_error and "max_tool_calls" in m.content[0].text for m in refused)
    assert result.usage.tool_calls == 2
    del batch


@pytest.mark.parametrize(
    ("budgets", "limit"),
    [
        (Budgets(max_output_tokens=10), "max_output_tokens"),
        (Budgets(max_input_tokens=250), "max_input_tokens"),
        (Budgets(max_cost=0.25), "max_cost"),
    ],
)
def test_token_and_cost_budgets(budgets: Budgets, limit: str) -> None:
    def spend(context: Any, options: Any) -> Any:
        return reply(tool_call("echo", {"text": "x"}), usage=usage(100, 4))  # 0.104 USD

    agent, model = priced_agent([spend] * 10, tools=[echo], budgets=budgets)
    result = agent.prompt("go")
    assert (result.stop_reason, result.budget) == ("budget", limit)
    assert len(model.requests) == 3
    calls, results = call_results(result)
    assert calls == results


def test_summary_turn_without_tools_after_a_budget() -> None:
    agent, model = make_agent([runaway, runaway, "Summary: echoed twice."], tools=[echo],
                              budgets=Budgets(max_turns=2, summarize=True))
    result = agent.prompt("loop")
    assert result.text == "Summary: echoed twice."
    assert (result.stop_reason, result.budget) == ("budget", "max_turns")
    last = model.requests[-1]
    assert last.options.tool_choice == "none"
    assert "max_turns" in last.messages[-1].content[0].text


@pytest.mark.parametrize("execution", ["parallel", "inline"])
def test_deadline_during_a_tool_aborts_it_and_ends_on_time(execution: str) -> None:
    seen = threading.Event()

    @tool
    def slow(signal: Any) -> str:
        """Wait for the abort."""
        if signal.wait(WAIT * 4):
            seen.set()
            return "stopped"
        return "finished"

    agent, _ = make_agent([reply(tool_call("slow", {})), "never"], tools=[slow],
                          budgets=Budgets(timeout=0.3), tool_execution=execution)
    started = time.monotonic()
    result = agent.prompt("go")
    assert time.monotonic() - started < WAIT
    if execution == "inline":  # the run waited for the call, on its own thread
        assert seen.is_set()
    assert seen.wait(WAIT)  # the tool got its abort (the run need not wait for it to stop)
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    calls, results = call_results(result)
    assert calls == results
    deadline_threads = ("agentkit-deadline", "agentkit-tool-deadline")
    assert not [t for t in threading.enumerate() if t.name in deadline_threads]


@pytest.mark.parametrize(
    "bad", [{"max_turns": 0}, {"max_cost": -1.0}, {"timeout": 0}, {"max_tool_calls": -3},
            {"max_turn": 3}]
)
def test_bad_budgets_are_refused_at_construction(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Agent(budgets=bad)
    with pytest.raises(ValidationError):
        Budgets(**bad)


# --- typed output -------------------------------------------------------------------------------


class City(BaseModel):
    name: str
    population: int


@dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    left: str
    right: str


@pytest.mark.parametrize(
    ("output_type", "text", "expected"),
    [
        (City, '{"name": "Paris", "population": 2100000}', City(name="Paris", population=2100000)),
        (Point, '```json\n{"x": 1, "y": 2}\n```', Point(1, 2)),
        (Pair, '{"left": "a", "right": "b"}', {"left": "a", "right": "b"}),
        (int, '{"result": 42}', 42),
        (list[str], '{"result": ["a", "b"]}', ["a", "b"]),
    ],
)
def test_typed_output_kinds(output_type: Any, text: str, expected: Any) -> None:
    agent, _ = make_agent([text], output_type=output_type)
    result = agent.prompt("answer")
    assert result.output == expected and result.stop_reason == "stop"


def test_invalid_output_is_sent_back_and_retried() -> None:
    agent, model = make_agent(['{"name": "Paris"}', '{"name": "Paris", "population": 2}'])
    result = agent.prompt("answer", output_type=City)
    assert result.output == City(name="Paris", population=2)
    feedback = model.requests[1].messages[-1]
    assert isinstance(feedback, UserMessage)
    assert "population: Field required" in feedback.content[0].text
    assert agent.output_type is None  # the run's option did not stick


def test_output_that_never_validates_fails_clearly_after_the_retries() -> None:
    agent, model = make_agent(["not json", '{"name": 1}', '{"population": "x"}', "unused"],
                              output_type=City, output_retries=2)
    result = agent.prompt("answer")
    assert len(model.requests) == 3
    assert result.stop_reason == "error" and result.output is None
    assert isinstance(result.error, OutputValidationError)
    assert "population: Input should be a valid integer" in result.error.errors
    with pytest.raises(OutputValidationError, match="after 2 retries"):
        result.raise_for_error()


def test_output_type_without_a_schema_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="cannot be described as a JSON schema"):
        Agent(output_type=threading.Lock)
    agent = Agent()
    with pytest.raises(TypeError, match="JSON schema"):
        agent.prompt("x", output_type=object())
    with pytest.raises(TypeError, match="unknown run option"):
        agent.prompt("x", max_turns=3)
    with pytest.raises(ValueError, match="output_retries"):
        Agent(output_retries=-1)
    assert not agent.state.is_streaming  # nothing started


def test_stream_shows_the_partial_object() -> None:
    model = ScriptedModel([reply('{"name": "Paris", "population": 2100000}')], chunk_size=3)
    agent = Agent(model=model.model, stream_fn=model, output_type=City)
    seen: list[Any] = []
    with agent.stream("answer") as events:
        for _ in events:
            if events.partial_output is not None and events.partial_output not in seen:
                seen.append(dict(events.partial_output))
    assert seen[0] in ({}, {"name": "P"}, {"name": "Par"}) or "population" not in seen[0]
    assert seen[-1] == {"name": "Paris", "population": 2100000}
    assert events.result().output == City(name="Paris", population=2100000)


# --- tool controls ------------------------------------------------------------------------------


def test_tool_timeout_gives_an_error_result_and_the_run_goes_on() -> None:
    aborted = threading.Event()
    release = threading.Event()

    returned = threading.Event()

    @tool(timeout=0.2)
    def stuck(signal: Any) -> str:
        """Hang."""
        if signal.wait(WAIT):
            aborted.set()
        release.wait(WAIT)
        returned.set()
        return "late"

    agent, _ = make_agent([reply(tool_call("stuck", {})), "recovered"], tools=[stuck])
    result = agent.prompt("go")
    assert not returned.is_set()  # the run went on without waiting for the stuck tool
    release.set()
    assert returned.wait(WAIT)
    assert result.text == "recovered"
    timed_out = [m for m in result if isinstance(m, ToolResultMessage)][0]
    assert timed_out.is_error and timed_out.content[0].text == "Tool stuck timed out after 0.2 s"
    assert aborted.wait(WAIT)  # the tool's own signal was aborted


def test_tool_retry_with_a_budget() -> None:
    attempts: list[int] = []

    @tool(max_retries=1)
    def picky(n: int, ctx: RunContext[None]) -> str:
        """Only likes 3."""
        attempts.append(ctx.retry)
        if n != 3:
            raise ToolRetry(f"{n} is wrong, use a bigger number")
        return "ok"

    agent, _ = make_agent(
        [reply(tool_call("picky", {"n": 1})), reply(tool_call("picky", {"n": 2})),
         reply(tool_call("picky", {"n": 3})), "done"],
        tools=[picky],
    )
    result = agent.prompt("go")
    texts = [m.content[0].text for m in result if isinstance(m, ToolResultMessage)]
    assert "1 is wrong" in texts[0] and "call picky again" in texts[0]
    assert "more than its budget (1)" in texts[1] and "do not call it again" in texts[1]
    assert texts[2] == "ok" and attempts == [0, 1, 2]


@dataclass
class Deps:
    user: str


def test_deps_reach_tools_and_stay_out_of_the_schema() -> None:
    @tool
    def whoami(ctx: RunContext[Deps], greeting: str) -> str:
        """Greet the current user."""
        return f"{greeting}, {ctx.deps.user} ({ctx.tool_name})"

    assert set(whoami.parameters["properties"]) == {"greeting"}
    agent, _ = make_agent(
        [reply(tool_call("whoami", {"greeting": "hi"})), "done",
         reply(tool_call("whoami", {"greeting": "yo"})), "done"],
        tools=[whoami], deps=Deps("ada"),
    )
    first = agent.prompt("who")
    second = agent.prompt("who", deps=Deps("bob"))
    assert first[2].content[0].text == "hi, ada (whoami)"
    assert second[2].content[0].text == "yo, bob (whoami)"


def test_tool_choice_per_agent_and_per_run() -> None:
    agent, model = make_agent(["a", "b"], tools=[echo], tool_choice="required")
    agent.prompt("one")
    agent.prompt("two", tool_choice={"name": "echo"})
    assert model.requests[0].options.tool_choice == "required"
    assert model.requests[1].options.tool_choice == {"name": "echo"}


@pytest.mark.parametrize("bad", [{"timeout": 0}, {"max_retries": -1}])
def test_bad_tool_controls(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        tool(**bad)(lambda: "x")


# --- approvals ----------------------------------------------------------------------------------


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def decide_from_another_thread(approvals: Approvals, decide: Any) -> threading.Thread:
    def worker() -> None:
        request = approvals.wait_for_request(WAIT)
        assert request is not None
        decide(request)

    thread = threading.Thread(target=worker)
    thread.start()
    return thread


def test_approval_from_another_thread() -> None:
    approvals = Approvals()
    agent, _ = make_agent([reply(tool_call("delete", {"path": "a.txt"})), "done"],
                          tools=[delete], approvals=approvals)
    seen: list[Any] = []

    def decide(request: Any) -> None:
        seen.append((request.tool_name, request.arguments, [r.id for r in approvals.pending()]))
        assert approvals.approve(request.id)
        assert not approvals.approve(request.id)  # decided already

    thread = decide_from_another_thread(approvals, decide)
    result = agent.prompt("clean up")
    thread.join(WAIT)
    assert seen[0][:2] == ("delete", {"path": "a.txt"}) and len(seen[0][2]) == 1
    assert result[2].content[0].text == "deleted a.txt" and not result[2].is_error
    assert approvals.pending() == []


def test_rejection_carries_its_reason_and_the_run_goes_on() -> None:
    approvals = Approvals()
    agent, _ = make_agent([reply(tool_call("delete", {"path": "b"})), "ok, not deleted"],
                          tools=[delete], approvals=approvals)
    thread = decide_from_another_thread(
        approvals, lambda r: approvals.reject(r.id, "not on Fridays"))
    result = agent.prompt("clean up")
    thread.join(WAIT)
    assert result[2].is_error
    assert result[2].content[0].text == "Tool call delete was rejected: not on Fridays"
    assert result.text == "ok, not deleted"


def test_approval_timeout_and_abort_end_the_wait() -> None:
    approvals = Approvals(timeout=0.1, tools={"echo"})
    agent, _ = make_agent([reply(tool_call("echo", {"text": "x"})), "gave up"],
                          tools=[echo], approvals=approvals)
    result = agent.prompt("go")
    assert "Nobody approved echo within 0.1 s" in result[2].content[0].text

    patient = Approvals()
    agent, _ = make_agent([reply(tool_call("delete", {"path": "c"})), "never"],
                          tools=[delete], approvals=patient)
    run = agent.start("go")
    assert patient.wait_for_request(WAIT) is not None
    run.abort()
    result = run.result(WAIT)
    assert result.stop_reason == "aborted"
    assert "Operation aborted" in result[2].content[0].text


def test_approve_always_and_unbrokered_tools() -> None:
    approvals = Approvals(on_request=lambda r: approvals.approve(r.id, always=True))
    agent, _ = make_agent([reply(tool_call("delete", {"path": "1"})),
                           reply(tool_call("delete", {"path": "2"})), "done"],
                          tools=[delete], approvals=approvals)
    calls: list[str] = []
    approvals.on_request = lambda r: (calls.append(r.id), approvals.approve(r.id, always=True))
    result = agent.prompt("go")
    assert len(calls) == 1  # the second call needed no approval
    assert [m.content[0].text for m in result if isinstance(m, ToolResultMessage)] == [
        "deleted 1", "deleted 2"]

    agent, _ = make_agent([reply(tool_call("delete", {"path": "x"})), "done"], tools=[delete])
    result = agent.prompt("go")
    assert "needs approval, but the agent has no approvals broker" in result[2].content[0].text


def test_a_deadline_as_a_point_in_time() -> None:
    from datetime import datetime, timedelta, timezone

    soon = datetime.now(timezone.utc) + timedelta(seconds=0.2)
    agent, _ = make_agent([reply("thinking hard", hang=True)], budgets={"deadline": soon})
    result = agent.prompt("go")
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    assert result[-1].stop_reason == "aborted"  # the request was cut off on time


def test_approval_policy_sees_the_validated_arguments_and_the_signal() -> None:
    seen: list[Any] = []

    def decide(request: Any) -> None:
        seen.append((request.arguments, request.signal is not None))
        approvals.reject(request.id)

    approvals = Approvals(tools=lambda call: call.name == "add_one", on_request=decide)

    @tool
    def add_one(n: int) -> int:
        """Add one."""
        return n + 1

    agent, _ = make_agent([reply(tool_call("add_one", {"n": "41"})), "fine"], tools=[add_one],
                          approvals=approvals)
    result = agent.prompt("go")
    assert seen == [({"n": 41}, True)]  # coerced from "41", as it would have run
    assert result[2].content[0].text == "Tool call add_one was rejected"


def test_a_deadline_ends_an_approval_wait() -> None:
    approvals = Approvals()
    agent, _ = make_agent([reply(tool_call("delete", {"path": "d"})), "never"],
                          tools=[delete], approvals=approvals, budgets=Budgets(timeout=0.2))
    result = agent.prompt("go")  # nobody decides: the deadline ends the wait
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    assert result[2].is_error and approvals.pending() == []


def test_a_deadline_does_not_wait_out_the_abort_grace_of_a_tool_that_ignores_it() -> None:
    release = threading.Event()
    returned = threading.Event()

    @tool
    def deaf() -> str:
        """Ignore the abort."""
        release.wait(WAIT * 12)
        returned.set()
        return "late"

    # a grace far longer than the test waits: a run that waited it out could not pass
    agent, _ = make_agent([reply(tool_call("deaf", {})), "never"], tools=[deaf],
                          budgets=Budgets(timeout=0.2), tool_abort_grace=WAIT * 12)
    results: list[Any] = []
    ended = threading.Event()

    def run() -> None:
        results.append(agent.prompt("go"))
        ended.set()

    runner = threading.Thread(target=run, name="test-run")
    runner.start()
    try:
        assert ended.wait(WAIT), "the run waited for the abort grace after its deadline"
    finally:
        release.set()
    runner.join(WAIT)
    assert returned.wait(WAIT)
    result = results[0]
    assert (result.stop_reason, result.budget) == ("budget", "timeout")
    calls, result_ids = call_results(result)
    assert calls == result_ids  # the call still has its result, right after its message
    assert result[2].is_error and "deadline" in result[2].content[0].text


@pytest.mark.parametrize("mode", ["parallel", "inline"])
def test_a_timed_out_call_that_ends_at_once_on_its_abort_still_reports_the_timeout(
    mode: str,
) -> None:
    """The call's own end, brought at once by its timeout's abort (as a cancelled coroutine's
    ``CancelledError`` is), never wins over the timed-out result: here the abort's callback holds
    the timer until the call's end was announced, the widest the race can open."""
    ended = threading.Event()

    @tool(timeout=0.2)
    def slow(signal: AbortSignal) -> str:
        """Return as soon as the call is aborted."""
        signal.add_callback(lambda: ended.wait(WAIT))
        return "stopped by the abort" if signal.wait(WAIT) else "never aborted"

    agent, _ = make_agent(
        [reply(tool_call("slow", {})), "recovered"], tools=[slow], tool_execution=mode
    )
    agent.subscribe(lambda event: ended.set() if event.type == "tool_execution_end" else None)
    result = agent.prompt("go")
    timed_out = [m for m in result if isinstance(m, ToolResultMessage)][0]
    assert timed_out.is_error and timed_out.content[0].text == "Tool slow timed out after 0.2 s"
    assert result.text == "recovered"


def test_an_async_tools_timeout_cancels_its_coroutine() -> None:
    import asyncio

    cancelled = threading.Event()
    finished = threading.Event()

    @tool(timeout=0.2)
    async def slow() -> str:
        """Sleep long."""
        try:
            await asyncio.sleep(WAIT * 4)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        finished.set()
        return "done"

    agent, _ = make_agent([reply(tool_call("slow", {})), "recovered"], tools=[slow])
    result = agent.prompt("go")
    assert result.text == "recovered"
    timed_out = [m for m in result if isinstance(m, ToolResultMessage)][0]
    assert timed_out.content[0].text == "Tool slow timed out after 0.2 s"
    assert cancelled.wait(WAIT), "the coroutine ran on after its timeout"
    assert not finished.is_set()
