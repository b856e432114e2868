"""``tool_execution="inline"``: every call on the run's own thread, one after another, with no
tool thread; what it keeps of the threaded mode (events, order, timeouts, deadlines, aborts,
failures of listeners) and the one thing it gives up (a call that ignores an abort is waited for).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from agentkit import AbortSignal, AgentToolResult, TextContent, tool
from agentkit.testing import reply, tool_call
from tests.support import WAIT, Recorder, make_agent, make_tool, run_loop

INLINE = {"tool_execution": "inline"}


def tool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("agentkit-tool")]


def test_each_call_runs_on_the_runs_thread_in_order_and_no_tool_thread_starts() -> None:
    recorder = Recorder()
    seen: list[tuple[str, list[str]]] = []

    def body(tool_call_id: str, *_: Any) -> str:
        seen.append((threading.current_thread().name, tool_threads()))
        return tool_call_id

    run = run_loop(
        [reply(*[tool_call("t", {}, id=f"c{i}") for i in range(3)]), "done"],
        tools=[make_tool("t", body)],
        rec=recorder,
        **INLINE,
    )
    loop_thread = threading.current_thread().name  # run_loop runs the loop on this thread
    assert seen == [(loop_thread, [])] * 3  # the calls ran here, and no tool thread existed
    assert set(recorder.threads) == {threading.current_thread()}
    # One after another: each call starts after the previous one ended, in the model's order.
    labels = [e for e in recorder.labels() if e.startswith("te")]
    assert labels == [f"{kind}:c{i}" for i in range(3) for kind in ("tes", "tee")]
    ends = run.rec.of("tool_execution_end")
    assert [e.tool_call_id for e in ends] == ["c0", "c1", "c2"]
    results = [m for m in run.new_messages if m.role == "tool_result"]
    assert [m.content[0].text for m in results] == ["c0", "c1", "c2"]
    assert run.new_messages[-1].content[0].text == "done"


def test_updates_reach_the_listeners_while_the_call_runs() -> None:
    recorder = Recorder()
    before_return: list[int] = []

    def body(_id: str, _params: Any, _signal: AbortSignal, on_update: Any) -> str:
        on_update({"step": 1})
        before_return.append(len(recorder.of("tool_execution_update")))  # already delivered
        on_update({"step": 2})
        return "ok"

    run = run_loop(
        [reply(tool_call("t", {})), "done"], tools=[make_tool("t", body)], rec=recorder, **INLINE
    )
    assert before_return == [1]
    assert [e.partial_result for e in run.rec.of("tool_execution_update")] == [
        {"step": 1},
        {"step": 2},
    ]


def test_a_listener_that_raises_on_an_update_fails_the_run_not_the_tool() -> None:
    finished = threading.Event()

    def body(_id: str, _params: Any, _signal: AbortSignal, on_update: Any) -> str:
        on_update("progress")  # the listener's failure must not surface here
        finished.set()
        return "ok"

    def listener(event: Any) -> None:
        if event.type == "tool_execution_update":
            raise RuntimeError("listener broke")

    agent, _ = make_agent(
        [reply(tool_call("t", {})), "never"], tools=[make_tool("t", body)], **INLINE
    )
    agent.subscribe(listener)
    result = agent.prompt("go")
    assert finished.is_set()  # the tool went on to its end
    assert result.stop_reason == "error" and "listener broke" in (result.error_message or "")
    assert agent.prompt("again").text == "never"  # the agent stays usable


def test_a_calls_timeout_aborts_it_and_its_result_says_so() -> None:
    @tool(timeout=0.2)
    def slow(signal: AbortSignal, on_update: Any) -> str:
        """Waits for its abort, then reports once more."""
        signal.wait(WAIT)
        on_update("after the timeout")  # dropped: the call already ended
        return "late"

    agent, _ = make_agent([reply(tool_call("slow", {})), "done"], tools=[slow], **INLINE)
    recorder = Recorder()
    agent.subscribe(recorder)
    started = time.monotonic()
    result = agent.prompt("go")
    assert time.monotonic() - started < WAIT  # the timeout reached the call
    (outcome,) = [m for m in result if m.role == "tool_result"]
    assert outcome.is_error and "timed out after 0.2 s" in outcome.content[0].text
    assert recorder.of("tool_execution_update") == []
    assert result.text == "done"


def test_an_abort_reaches_the_call_and_the_run_ends_after_its_batch() -> None:
    started = threading.Event()

    def body(_id: str, _params: Any, signal: AbortSignal, _update: Any) -> str:
        started.set()
        return "stopped" if signal.wait(WAIT) else "finished"

    agent, _ = make_agent(
        [reply(tool_call("t", {}, id="c1"), tool_call("t", {}, id="c2")), "never"],
        tools=[make_tool("t", body)],
        **INLINE,
    )
    run = agent.start("go")
    assert started.wait(WAIT)
    agent.abort()
    assert run.wait(WAIT)
    result = run.result()
    assert result.stop_reason == "aborted"
    outcomes = [m for m in result if m.role == "tool_result"]
    assert [m.tool_call_id for m in outcomes] == ["c1", "c2"]  # every call has a result
    assert outcomes[1].is_error  # the second never ran


def test_a_call_that_ignores_the_abort_is_waited_for_not_given_up_on() -> None:
    started, release = threading.Event(), threading.Event()

    def stubborn(*_: Any) -> AgentToolResult:
        started.set()
        release.wait(WAIT)
        return AgentToolResult(content=[TextContent(text="returned")])

    agent, _ = make_agent(
        [reply(tool_call("stubborn", {})), "never"],
        tools=[make_tool("stubborn", stubborn)],
        tool_abort_grace=0.05,
        **INLINE,
    )
    run = agent.start("go")
    assert started.wait(WAIT)
    agent.abort()
    assert not run.wait(0.3)  # past the grace, the run still waits for the call
    release.set()
    assert run.wait(WAIT)
    result = run.result()
    assert result.stop_reason == "aborted"
    (outcome,) = [m for m in result if m.role == "tool_result"]
    assert "did not stop" not in outcome.content[0].text  # its own end, not a give-up


def test_ctrl_c_in_an_inline_call_on_the_main_thread_stops_the_loop() -> None:
    assert threading.current_thread() is threading.main_thread()  # run_loop runs here

    def interrupted(*_: Any) -> str:
        raise KeyboardInterrupt  # what Ctrl-C raises on the main thread

    with pytest.raises(KeyboardInterrupt):
        run_loop([reply(tool_call("t", {})), "never"], tools=[make_tool("t", interrupted)], **INLINE)
    # On a tool thread it can only be the tool's own doing: the call's error, as before.
    run = run_loop([reply(tool_call("t", {})), "done"], tools=[make_tool("t", interrupted)])
    (outcome,) = [m for m in run.new_messages if m.role == "tool_result"]
    assert outcome.is_error and "KeyboardInterrupt" in outcome.content[0].text
