"""Approvals in one process: a batch's calls are asked together (a reviewer sees them at once,
one timeout covers them), a reviewer loop never sees a decided request again, edited arguments,
and deferral (the run ends waiting; the transcript keeps the requests as entries the model never
sees). The durable side, across processes and stores, is in tests/sessions/test_approvals.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agentkit import Agent, ApprovalRequest, Approvals, ToolResultMessage, tool
from agentkit.deferred import ApprovalRequestEntry, waiting_batch
from agentkit.errors import ApprovalError
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import WAIT, make_agent

ran: list[str] = []
ran_lock = threading.Lock()


@tool(requires_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    with ran_lock:
        ran.append(path)
    return f"deleted {path}"


@tool
def look(path: str) -> str:
    """Look at a file."""
    return f"saw {path}"


def batch(*paths: str) -> Any:
    return reply(*[tool_call("delete", {"path": p}) for p in paths])


def results(messages: list[Any]) -> list[str]:
    return [m.content[0].text for m in messages if isinstance(m, ToolResultMessage)]


def test_a_reviewer_sees_the_whole_batch_at_once_and_each_request_once() -> None:
    approvals = Approvals(timeout=WAIT)  # a lost answer ends the run, never hangs it
    agent, _ = make_agent([batch("a", "b", "c"), "done"], tools=[delete], approvals=approvals)
    seen: list[str] = []
    batches: list[list[str]] = []
    approved: list[bool] = []

    def reviewer() -> None:
        for _ in range(3):
            request = approvals.wait_for_request(WAIT)
            if request is None:
                return
            batches.append([r.id for r in approvals.pending()])
            seen.append(request.id)
            approved.append(approvals.approve(request.id))

    thread = threading.Thread(target=reviewer)
    thread.start()
    result = agent.prompt("clean up")
    thread.join(WAIT)
    assert len(set(seen)) == 3  # never the same (decided) request twice
    assert approved == [True, True, True]
    assert len(batches[0]) == 3  # the first request came with its whole batch
    assert results(result) == ["deleted a", "deleted b", "deleted c"]


def test_one_timeout_covers_the_whole_batch() -> None:
    """Three calls nobody decides are rejected by one expiry of the timeout, not three: each
    call's rejection is made in the one wait the batch has."""
    asked: list[list[str]] = []
    approvals = Approvals(timeout=0.05)
    approvals.on_request = lambda r: asked.append([p.id for p in approvals.pending()])
    agent, _ = make_agent([batch("a", "b", "c"), "gave up"], tools=[delete], approvals=approvals)
    result = agent.prompt("clean up")
    assert [len(ids) for ids in asked] == [3, 3, 3]  # every call was waiting from the start
    assert all("Nobody approved delete within 0.05 s" in text for text in results(result))


def test_approve_always_covers_the_rest_of_the_batch() -> None:
    asked: list[str] = []
    approvals = Approvals(timeout=WAIT)
    approvals.on_request = lambda r: (asked.append(r.id), approvals.approve(r.id, always=True))
    agent, _ = make_agent([batch("a", "b"), "done"], tools=[delete], approvals=approvals)
    assert results(agent.prompt("go")) == ["deleted a", "deleted b"]
    assert len(asked) == 1  # the second call of the tool was approved with the first


def test_an_approval_with_edited_arguments_runs_them_validated() -> None:
    approvals = Approvals(on_request=lambda r: approvals.approve(r.id, arguments={"path": "b"}))
    agent, _ = make_agent([batch("a"), "done"], tools=[delete], approvals=approvals)
    assert results(agent.prompt("go")) == ["deleted b"]

    approvals.on_request = lambda r: approvals.approve(r.id, arguments={"file": "x"})
    agent, _ = make_agent([batch("a"), "done"], tools=[delete], approvals=approvals)
    (text,) = results(agent.prompt("go"))
    assert text.startswith("The edited arguments of delete are invalid")


def test_an_on_request_that_raises_refuses_the_batch_and_leaves_nothing_waiting() -> None:
    def broken(request: ApprovalRequest) -> None:
        raise RuntimeError("the review service is down")

    approvals = Approvals(on_request=broken)
    agent, _ = make_agent([batch("a", "b"), "done"], tools=[delete], approvals=approvals)
    assert results(agent.prompt("go")) == ["the review service is down"] * 2
    assert approvals.pending() == []


def test_a_deferred_batch_ends_the_run_and_keeps_its_finished_results() -> None:
    approvals = Approvals(defer=True)
    model = ScriptedModel([
        reply(tool_call("look", {"path": "a"}), tool_call("delete", {"path": "a"}),
              tool_call("delete", {"path": "b"})),
        "done",
    ])  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[look, delete], approvals=approvals)
    result = agent.prompt("clean up")
    assert result.stop_reason == "approval"
    assert [(r.tool_name, r.arguments) for r in result.pending_approvals] == [
        ("delete", {"path": "a"}), ("delete", {"path": "b"})]  # fmt: skip
    assert len(model.requests) == 1
    assert results(result) == ["saw a"]
    entries = [m for m in agent.state.messages if isinstance(m, ApprovalRequestEntry)]
    assert [e.arguments["path"] for e in entries] == ["a", "b"]
    assert waiting_batch(agent.state.messages) is not None
    with pytest.raises(ApprovalError, match="wait for approval"):  # between calls and results
        agent.prompt("something else")
    again = agent.continue_()  # nothing decided: it ends again, without asking the model
    assert again.stop_reason == "approval" and len(again.pending_approvals) == 2
    assert len(model.requests) == 1


def test_a_sequential_batch_holds_the_calls_after_a_deferred_one() -> None:
    approvals = Approvals(defer=True)
    model = ScriptedModel([
        reply(tool_call("look", {"path": "1"}), tool_call("delete", {"path": "2"}),
              tool_call("look", {"path": "3"})),
        "done",
    ])  # fmt: skip
    agent = Agent(model=model.model, stream_fn=model, tools=[look, delete], approvals=approvals,
                  tool_execution="sequential")  # fmt: skip
    result = agent.prompt("go")
    assert results(result) == ["saw 1"]  # 3 waits for 2, in order
    assert [r.arguments for r in result.pending_approvals] == [{"path": "2"}]
    held = [m for m in agent.state.messages if isinstance(m, ApprovalRequestEntry) and m.held]
    assert [m.arguments for m in held] == [{"path": "3"}]
    (waiting,) = result.pending_approvals
    agent.state.messages.append(
        {"role": "approval_decision", "tool_call_id": waiting.id, "approved": True})
    resumed = agent.continue_()
    assert results(resumed) == ["deleted 2", "saw 3"]  # in order, the held call after
    assert [r.tool_call_id for r in resumed if isinstance(r, ToolResultMessage)] == [
        waiting.id, held[0].tool_call_id]  # fmt: skip


def test_a_held_call_that_needs_approval_is_asked_when_its_batch_resumes() -> None:
    approvals = Approvals(defer=True)
    agent, model = make_agent([batch("1", "2"), "done"], tools=[delete], approvals=approvals,
                              tool_execution="sequential")  # fmt: skip
    first = agent.prompt("go")
    assert [r.arguments for r in first.pending_approvals] == [{"path": "1"}]  # 2 is held
    decide = {"role": "approval_decision", "tool_call_id": first.pending_approvals[0].id,
              "approved": True}  # fmt: skip
    agent.state.messages.append(decide)
    second = agent.continue_()
    assert results(second) == ["deleted 1"]
    assert second.stop_reason == "approval"  # the held call needs approval too: asked now
    assert [r.arguments for r in second.pending_approvals] == [{"path": "2"}]
    assert waiting_batch(agent.state.messages) is not None
    agent.state.messages.append({**decide, "tool_call_id": second.pending_approvals[0].id,
                                 "approved": False, "reason": "no"})  # fmt: skip
    third = agent.continue_()
    assert results(third) == ["Tool call delete was rejected: no"] and third.text == "done"
    sent = [m.role for m in model.requests[-1].messages]
    assert sent == ["system", "user", "assistant", "tool_result", "tool_result"]


def test_the_model_never_sees_the_approval_entries() -> None:
    approvals = Approvals(defer=True)
    agent, model = make_agent([batch("a"), "done"], tools=[delete], approvals=approvals)
    agent.prompt("go")
    agent.state.messages.append(
        {"role": "approval_decision", "tool_call_id": agent.state.messages[-1].tool_call_id,
         "approved": True}  # fmt: skip
    )
    result = agent.continue_()
    assert result.stop_reason == "stop" and results(result) == ["deleted a"]
    sent = [m.role for m in model.requests[-1].messages]
    assert sent == ["system", "user", "assistant", "tool_result"]



def test_a_single_call_cannot_be_deferred_and_is_refused_clearly() -> None:
    from agentkit.loop import run_tool_call
    from agentkit.transcript import failure_message
    from agentkit.types import AgentContext, ToolCall, placeholder_model

    call = ToolCall(id="c1", name="delete", arguments={"path": "x"})
    assistant = failure_message("stop", "", placeholder_model())  # the message the call is from
    outcome = run_tool_call(call, tools=[delete], assistant_message=assistant,
                            context=AgentContext(messages=[], tools=[delete]),
                            approvals=Approvals(defer=True))  # fmt: skip
    assert outcome.is_error and "waits for approval" in outcome.result.content[0].text
