"""The run seam (agentkit.policy): the named points, their order, their threads and what each
hook may do, on a real loop over a scripted model."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import pytest

from agentkit import (
    Agent,
    AgentToolResult,
    BatchOutcome,
    EndRun,
    ModelRequest,
    PreparedCall,
    RunPolicy,
    RunScope,
    TextContent,
    ToolBatchRun,
    ToolCallRun,
    ToolResultMessage,
    tool,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import AssistantMessage
from tests.support import make_agent


@tool
def echo(text: str) -> str:
    """Say it back."""
    return text


@tool(requires_approval=True)
def wire(amount: int) -> str:
    """Move money."""
    return f"moved {amount}"


class Journal(RunPolicy):
    """Writes down every point it is called at, in order, with its thread."""

    def __init__(self, name: str, log: list[str], threads: dict[str, str] | None = None) -> None:
        self.name, self.log, self.threads = name, log, threads if threads is not None else {}

    def _note(self, point: str) -> None:
        self.log.append(f"{self.name}.{point}")
        self.threads.setdefault(point, threading.current_thread().name)

    def start(self, run: RunScope) -> None:
        self._note("start")

    def before_turn(self, run: RunScope, pending: list[Any]) -> None:
        self._note("before_turn")

    def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
        self._note("request")
        message = call_next(request)
        self._note("request_done")
        return message

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        self._note("review")

    def wrap_batch(self, run: RunScope, batch: ToolBatchRun, call_next: Any) -> BatchOutcome:
        self._note("batch")
        return call_next(batch)

    def wrap_tool_call(self, run: RunScope, call: ToolCallRun, call_next: Any) -> Any:
        self._note("call")
        return call_next(call)

    def at_final_answer(self, run: RunScope, message: AssistantMessage) -> None:
        self._note("final")

    def end(self, run: RunScope, result: Any) -> None:
        self._note(f"end:{result.stop_reason}")


def test_the_points_are_called_in_order_the_first_policy_outermost() -> None:
    log: list[str] = []
    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "hi"})), "done"],
        tools=[echo],
        policies=[Journal("a", log), Journal("b", log)],
    )
    assert agent.prompt("go").text == "done"
    assert log == [
        "a.start", "b.start",
        "a.request", "b.request", "b.request_done", "a.request_done",
        "a.batch", "b.batch", "a.review", "b.review", "a.call", "b.call",
        "a.before_turn", "b.before_turn",
        "a.request", "b.request", "b.request_done", "a.request_done",
        "a.final", "b.final",
        "b.end:stop", "a.end:stop",
    ]  # fmt: skip


def test_hooks_run_on_the_runs_thread_but_a_tool_calls_wrap_on_its_tool_thread() -> None:
    threads: dict[str, str] = {}
    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "hi"})), "done"],
        tools=[echo],
        policies=[Journal("a", [], threads)],
    )
    agent.prompt("go")
    assert threads["call"] != threads["request"]
    assert {threads[p] for p in ("start", "request", "batch", "review", "final", "end:stop")} == {
        threads["request"]
    }


def test_a_policy_keeps_state_for_one_run_in_the_copy_for_run_makes() -> None:
    class Counter(RunPolicy):
        def __init__(self) -> None:
            self.requests = 0
            self.seen: list[int] = []

        def for_run(self, run: RunScope) -> RunPolicy:
            copy = Counter()
            copy.seen = self.seen  # the tally of every run, kept by the agent's policy
            return copy

        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            self.requests += 1
            return call_next(request)

        def end(self, run: RunScope, result: Any) -> None:
            self.seen.append(self.requests)

    counter = Counter()
    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "x"})), "one", "two"], tools=[echo], policies=[counter]
    )
    agent.prompt("first")
    agent.prompt("second")
    assert counter.seen == [2, 1] and counter.requests == 0


def test_end_run_from_a_request_ends_the_run_with_its_own_reason() -> None:
    class CostCap(RunPolicy):
        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            if run.result.usage.requests >= 1:
                raise EndRun("cost_cap", "this user's budget is spent", detail={"user": "ann"})
            return call_next(request)

    agent, model = make_agent(
        [reply(tool_call("echo", {"text": "x"})), "never"], tools=[echo], policies=[CostCap()]
    )
    result = agent.prompt("go")
    assert result.stop_reason == "cost_cap"
    assert result.error_message == "this user's budget is spent"
    assert result.ending.detail == {"user": "ann"}
    assert len(model.requests) == 1
    assert [m.role for m in result] == ["user", "assistant", "tool_result"]
    agent.prompt("and again")  # the agent stays usable
    assert agent.state.messages[-1].role in ("assistant", "user")


def test_end_run_in_a_batch_leaves_no_call_without_a_result() -> None:
    class Stop(RunPolicy):
        def wrap_batch(self, run: RunScope, batch: ToolBatchRun, call_next: Any) -> Any:
            raise EndRun("stopped", "no tools today")

    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "a"}), tool_call("echo", {"text": "b"}))],
        tools=[echo],
        policies=[Stop()],
    )
    result = agent.prompt("go")
    results = [m for m in result if isinstance(m, ToolResultMessage)]
    assert result.stop_reason == "stopped"
    assert len(results) == 2 and all(r.is_error for r in results)
    assert "no tools today" in results[0].content[0].text


def test_a_review_denies_one_call_and_lets_the_other_run() -> None:
    class NoShouting(RunPolicy):
        def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
            for call in calls:
                if call.args["text"].isupper():
                    call.deny("no shouting")

    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "HI"}), tool_call("echo", {"text": "hi"})), "ok"],
        tools=[echo],
        policies=[NoShouting()],
    )
    result = agent.prompt("go")
    first, second = [m for m in result if isinstance(m, ToolResultMessage)]
    assert first.is_error and first.content[0].text == "no shouting"
    assert not second.is_error and second.content[0].text == "hi"


def test_a_call_that_needs_approval_runs_only_when_a_policy_allowed_it() -> None:
    class Allow(RunPolicy):
        def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
            for call in calls:
                call.allow(arguments={"amount": 1})  # an edited amount, validated again

    refused, _ = make_agent([reply(tool_call("wire", {"amount": 5})), "ok"], tools=[wire])
    result = refused.prompt("go")
    assert "needs approval" in result[2].content[0].text
    allowed, _ = make_agent(
        [reply(tool_call("wire", {"amount": 5})), "ok"], tools=[wire], policies=[Allow()]
    )
    assert allowed.prompt("go")[2].content[0].text == "moved 1"


def test_wrap_tool_call_may_change_a_result_and_a_raise_becomes_an_error_result() -> None:
    class Redact(RunPolicy):
        def wrap_tool_call(self, run: RunScope, call: ToolCallRun, call_next: Any) -> Any:
            if call.args["text"] == "boom":
                raise RuntimeError("wrapper broke")
            result = call_next(call)
            text = result.content[0].text.replace("sk-secret", "[redacted]")
            return AgentToolResult(content=[TextContent(text=text)])

    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "key sk-secret"}), tool_call("echo", {"text": "boom"})),
         "ok"],
        tools=[echo],
        policies=[Redact()],
    )  # fmt: skip
    first, second = [m for m in agent.prompt("go") if isinstance(m, ToolResultMessage)]
    assert first.content[0].text == "key [redacted]"
    assert second.is_error and second.content[0].text == "wrapper broke"


def test_a_request_retried_by_a_policy_keeps_both_responses_and_counts_both() -> None:
    class RetryOnce(RunPolicy):
        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            message = call_next(request)
            if message.stop_reason == "error":
                message = call_next(request)
            return message

    model = ScriptedModel([reply(error="overloaded"), "fine"])
    agent = Agent(model=model.model, stream_fn=model, policies=[RetryOnce()])
    result = agent.prompt("go")
    assert result.text == "fine" and result.stop_reason == "stop"
    assert result.usage.requests == 2
    assert [m.stop_reason for m in result if isinstance(m, AssistantMessage)] == ["error", "stop"]


def test_a_policy_may_answer_without_asking_the_model() -> None:
    class Cached(RunPolicy):
        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            return AssistantMessage(
                content=[TextContent(text="from the cache")], api="cache", provider="cache",
                model="cache", stop_reason="stop",
            )  # fmt: skip

    agent, model = make_agent(["never asked"], policies=[Cached()])
    events: list[str] = []
    agent.subscribe(lambda e: events.append(e.type))
    result = agent.prompt("go")
    assert result.text == "from the cache" and model.requests == []
    assert events.count("message_end") == 2  # the prompt's and the cached answer's
    assert agent.state.messages[-1].text == "from the cache"


def test_a_changed_request_reaches_the_model() -> None:
    class Lower(RunPolicy):
        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            options = request.options.model_copy(update={"max_tokens": 7})
            return call_next(dataclasses.replace(request, options=options))

    agent, model = make_agent(["ok"], policies=[Lower()])
    agent.prompt("go")
    assert model.requests[0].options.max_tokens == 7


def test_at_final_answer_asks_for_another_turn() -> None:
    class Insist(RunPolicy):
        def at_final_answer(self, run: RunScope, message: AssistantMessage) -> Any:
            if "please" not in message.text:
                return [f"Say please. You said: {message.text}"]
            return None

    agent, model = make_agent(["no", "yes please"], policies=[Insist()])
    result = agent.prompt("go")
    assert result.text == "yes please" and len(model.requests) == 2


def test_a_hook_that_raises_fails_the_run_and_every_end_hook_still_runs() -> None:
    log: list[str] = []

    class Broken(RunPolicy):
        def before_turn(self, run: RunScope, pending: list[Any]) -> None:
            raise ValueError("the hook broke")

    agent, _ = make_agent(
        [reply(tool_call("echo", {"text": "x"})), "never"],
        tools=[echo],
        policies=[Journal("a", log), Broken()],
    )
    result = agent.prompt("go")
    assert result.stop_reason == "error" and "the hook broke" in (result.error_message or "")
    assert log[-1] == "a.end:stop"  # end ran, though the run failed
    tool_results = [m for m in agent.state.messages if isinstance(m, ToolResultMessage)]
    assert len(tool_results) == 1  # the transcript stays whole


def test_an_outermost_policy_goes_before_the_built_ins() -> None:
    seen: list[Any] = []

    class First(RunPolicy):
        outermost = True

        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            seen.append(("first", request.signal is run.signal))  # the lane's is further in
            return call_next(request)

    class Last(RunPolicy):
        def wrap_request(self, run: RunScope, request: ModelRequest, call_next: Any) -> Any:
            seen.append(("last", request.signal is run.signal))
            return call_next(request)

    agent, _ = make_agent(['{"result": 7}'], policies=[Last(), First()], output_type=int)
    assert agent.prompt("go").output == 7
    assert seen == [("first", True), ("last", False)]


def test_policies_as_a_run_option_replace_the_agents() -> None:
    log: list[str] = []
    agent, _ = make_agent(["a", "b"], policies=[Journal("agent", log)])
    agent.prompt("one", policies=[Journal("run", log)])
    assert {entry.split(".")[0] for entry in log} == {"run"}
    agent.prompt("two")
    assert log[-1] == "agent.end:stop"


def test_a_policy_that_is_not_one_is_refused_where_it_is_given() -> None:
    with pytest.raises(TypeError, match="RunPolicy"):
        Agent(policies=[object()])
    agent, _ = make_agent(["a"])
    with pytest.raises(TypeError, match="RunPolicy"):
        agent.prompt("x", policies=["nope"])


def test_how_a_run_ended_is_kept_in_its_session_when_its_messages_do_not_say(
    tmp_path: Any,
) -> None:
    from agentkit.sessions import Session
    from agentkit.ui.view import transcript

    class Stop(RunPolicy):
        def before_turn(self, run: RunScope, pending: list[Any]) -> None:
            raise EndRun("guardrail", "the answer leaked a key", budget="secrets")

    url = f"sqlite:///{tmp_path / 's.db'}"
    model = ScriptedModel([reply(tool_call("echo", {"text": "x"})), "never", "fine"])
    agent = Agent(model=model.model, stream_fn=model, tools=[echo], policies=[Stop()],
                  session=Session("ended", url))  # fmt: skip
    assert agent.prompt("go").stop_reason == "guardrail"
    stored = Session("ended", url).load()
    assert stored[-1].role == "run_end" and stored[-1].stop_reason == "guardrail"
    assert (stored[-1].error_message, stored[-1].budget) == ("the answer leaked a key", "secrets")
    assert agent.state.messages[-1] == stored[-1]  # memory and store alike
    assert transcript(stored)[1].stop_reason == "guardrail"  # the page's "last stop"
    agent.prompt("again", policies=[])
    assert Session("ended", url).load()[-1].role == "assistant"  # a run that stopped: no entry
