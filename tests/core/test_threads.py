"""The thread rules: where the loop and listeners run, parallel batches, cross-thread control,
Ctrl-C, no leaked threads, and prompting from inside a running asyncio loop."""

from __future__ import annotations

import asyncio
import gc
import signal as signals
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agentkit import AbortSignal, Agent, AgentTool, AgentToolResult, TextContent, tool
from agentkit.testing import reply, tool_call
from tests.support import Recorder, make_agent, make_tool


def test_loop_and_listeners_run_on_the_worker_thread_in_order() -> None:
    stream_threads: list[threading.Thread] = []

    def progress(
        tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: Any
    ) -> AgentToolResult:
        for step in range(3):
            on_update({"step": step})
        return AgentToolResult(content=[TextContent(text="done")])

    progress_tool = AgentTool("progress", "Reports progress.", {"type": "object"}, progress)
    agent, model = make_agent([reply(tool_call("progress")), "finished"], tools=[progress_tool])
    original = agent.stream_fn

    def recording_stream_fn(*args: Any) -> Any:
        stream_threads.append(threading.current_thread())
        return original(*args)

    agent.stream_fn = recording_stream_fn
    recorder = Recorder()
    in_listener = threading.Lock()
    overlaps: list[str] = []

    def exclusive(event: Any) -> None:
        if not in_listener.acquire(blocking=False):
            overlaps.append(event.type)
            return
        try:
            recorder(event)
        finally:
            in_listener.release()

    agent.subscribe(exclusive)
    agent.prompt("go")
    caller = threading.current_thread()
    workers = set(recorder.threads)
    assert len(workers) == 1 and caller not in workers
    assert stream_threads and set(stream_threads) == workers  # the loop ran there too
    assert overlaps == []
    updates = recorder.of("tool_execution_update")
    assert [u.partial_result["step"] for u in updates] == [0, 1, 2]
    kinds = recorder.types
    assert kinds.index("tool_execution_start") < kinds.index("tool_execution_update")
    assert kinds.index("tool_execution_update") < kinds.index("tool_execution_end")
    assert kinds[-1] == "agent_end"


def test_prompt_returns_only_after_listeners_are_done() -> None:
    agent, _ = make_agent(["hi"])
    finished: list[str] = []
    agent.subscribe(lambda e: finished.append(e.type) if e.type == "agent_end" else None)
    agent.prompt("go")
    assert finished == ["agent_end"]


def test_parallel_batch_runs_every_call_at_once() -> None:
    count = 16
    barrier = threading.Barrier(count, timeout=10)

    @tool
    def meet_the_others(n: int, signal: AbortSignal) -> str:
        """Waits until every call of the batch is running."""
        barrier.wait()  # breaks (an error result) unless all 16 calls run at the same time
        return str(n)

    calls = [tool_call("meet_the_others", {"n": i}) for i in range(count)]
    agent, _ = make_agent([reply(*calls), "done"], tools=[meet_the_others])
    assert agent.max_tool_workers >= 16
    new = agent.prompt("go")
    results = [m for m in new if m.role == "tool_result"]
    assert [r.content[0].text for r in results] == [str(i) for i in range(count)]
    assert not any(r.is_error for r in results)  # the barrier held: the calls overlapped


def test_steer_follow_up_and_abort_from_other_threads() -> None:
    started = threading.Event()

    def blocking(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        signal.wait()
        return "woken"

    agent, model = make_agent(
        [reply(tool_call("block")), "never"], tools=[make_tool("block", blocking)]
    )
    recorder = Recorder()
    agent.subscribe(recorder)
    run = agent.start("go")
    assert started.wait(5)
    helpers = [threading.Thread(target=agent.steer, args=(f"steer {i}",)) for i in range(5)] + [
        threading.Thread(target=agent.follow_up, args=(f"follow {i}",)) for i in range(5)
    ]
    for helper in helpers:
        helper.start()
    for helper in helpers:
        helper.join()
    aborted_at = time.monotonic()
    threading.Thread(target=agent.abort).start()
    run.wait(5)
    ended_at = recorder.of("agent_end") and time.monotonic()
    assert ended_at and ended_at - aborted_at < 1.0  # the rule is 100 ms; see benchmarks/
    result = [m for m in run.result() if m.role == "tool_result"][0]
    assert result.content[0].text == "woken"
    assert len(model.requests) == 1
    assert agent.has_queued_messages()  # queued messages wait for the next run
    assert len(agent.peek_queued_messages()) == 1


@pytest.mark.usefixtures("ctrl_c")
def test_keyboard_interrupt_aborts_the_run_and_the_agent_stays_usable() -> None:
    started = threading.Event()

    def blocking(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        signal.wait(10)
        return "stopped"

    agent, _ = make_agent(
        [reply(tool_call("block")), "next answer"], tools=[make_tool("block", blocking)]
    )
    main = threading.main_thread().ident
    assert main is not None

    def interrupt() -> None:
        started.wait(5)
        signals.pthread_kill(main, signals.SIGINT)

    threading.Thread(target=interrupt).start()
    with pytest.raises(KeyboardInterrupt):
        agent.prompt("go")
    assert agent.state.is_streaming is False
    assert agent.signal is None
    new = agent.prompt("again")
    assert new[-1].content[0].text == "next answer"


def test_a_second_ctrl_c_inside_the_abort_still_winds_the_run_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C twice in quick succession: the first while prompt() waits, the second while it
    aborts the run. prompt() still aborts, waits for the run's end and only then raises, and
    the agent is idle and usable (a second Ctrl-C used to escape the abort, leaving the run
    going and the agent busy: found by the notebook sample's test under load)."""
    from agentkit.run import Run

    started = threading.Event()

    def blocking(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        signal.wait(30)
        return "stopped"

    agent, _ = make_agent(
        [reply(tool_call("block")), "next answer"], tools=[make_tool("block", blocking)]
    )
    real_wait, real_abort = Run.wait, Run.abort
    pressed: list[str] = []

    def wait(self: Run, timeout: float | None = None) -> bool:
        if not pressed:  # the first Ctrl-C, once the tool runs
            started.wait(10)
            pressed.append("wait")
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    def abort(self: Run) -> None:
        if pressed == ["wait"]:  # the second, as the abort begins
            pressed.append("abort")
            raise KeyboardInterrupt
        real_abort(self)

    monkeypatch.setattr(Run, "wait", wait)
    monkeypatch.setattr(Run, "abort", abort)
    try:
        with pytest.raises(KeyboardInterrupt):
            agent.prompt("go")
        assert pressed == ["wait", "abort"]
        assert agent.state.is_streaming is False  # the run had ended before prompt() raised
        assert agent.state.messages[-1].role == "tool_result"
    finally:
        agent.abort()  # the old code left the run going
    monkeypatch.undo()
    assert agent.prompt("again")[-1].content[0].text == "next answer"


def test_no_thread_outlives_a_run() -> None:
    baseline = threading.active_count()

    @tool
    def quick(n: int) -> str:
        """Quick."""
        return str(n)

    agent, _ = make_agent(
        [reply(*[tool_call("quick", {"n": i}) for i in range(4)]), "done", reply("x", hang=True)],
        tools=[quick],
    )
    agent.prompt("go")
    assert threading.active_count() == baseline

    run = agent.start("go")
    agent.abort()
    run.wait(5)
    assert threading.active_count() == baseline

    agent.close()
    assert threading.active_count() == baseline


def test_close_during_a_run_aborts_and_leaves_no_thread() -> None:
    baseline = threading.active_count()
    agent, _ = make_agent([reply("x", hang=True)])
    agent.start("go")
    agent.close()
    assert agent.state.is_streaming is False
    assert threading.active_count() == baseline


def test_prompt_works_inside_a_running_event_loop() -> None:
    agent, _ = make_agent(["from inside a loop"])

    async def notebook_cell() -> Any:
        return agent.prompt("hi")

    new = asyncio.run(notebook_cell())
    assert new[-1].content[0].text == "from inside a loop"


def test_agent_works_from_a_non_main_thread() -> None:
    agent, _ = make_agent(["from a worker"])
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(agent.prompt("hi")))
    worker.start()
    worker.join(5)
    assert out and out[0][-1].content[0].text == "from a worker"


def _on_a_thread(fn: Any) -> Any:
    """``fn()`` called on a new (non-main) thread; its return value, or what it raised."""
    out: list[Any] = []

    def call() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out.append(exc)

    thread = threading.Thread(target=call, name="request-thread")
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and out
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def test_a_blocking_prompt_off_the_main_thread_runs_on_the_calling_thread() -> None:
    @tool
    def where() -> str:
        """Names the threads alive while the call runs."""
        return ",".join(sorted(t.name for t in threading.enumerate()))

    agent, _ = make_agent([reply(tool_call("where")), "done"], tools=[where])
    recorder = Recorder()
    agent.subscribe(recorder)
    baseline = threading.active_count()

    def prompt() -> tuple[Any, threading.Thread]:
        return agent.prompt("go"), threading.current_thread()

    result, caller = _on_a_thread(prompt)
    assert result.text == "done"
    assert set(recorder.threads) == {caller}  # the loop and every listener ran there
    alive = result[2].content[0].text.split(",")
    assert "agentkit-agent" not in alive  # no worker thread besides the caller
    assert any(name.startswith("agentkit-tool") for name in alive)  # the call kept its thread
    assert threading.active_count() == baseline


def test_a_thread_running_an_event_loop_keeps_a_worker_for_its_run() -> None:
    agent, _ = make_agent(["from a loop thread"])
    recorder = Recorder()
    agent.subscribe(recorder)

    async def handler() -> threading.Thread:
        agent.prompt("hi")
        return threading.current_thread()

    caller = _on_a_thread(lambda: asyncio.run(handler()))
    assert recorder.threads and caller not in recorder.threads


def test_an_abort_gives_up_on_a_hung_tool_of_a_run_held_by_its_calling_thread() -> None:
    started, release = threading.Event(), threading.Event()

    def hang(tool_call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> str:
        started.set()
        release.wait(30)  # ignores the abort
        return "late"

    agent, _ = make_agent(
        [reply(tool_call("hang")), "after"],
        tools=[make_tool("hang", hang)],
        tool_abort_grace=0.2,
    )
    aborter = threading.Thread(target=lambda: started.wait(10) and agent.abort())
    aborter.start()
    try:
        began = time.monotonic()
        result = _on_a_thread(lambda: agent.prompt("go"))
        took = time.monotonic() - began
    finally:
        release.set()
        aborter.join(10)
    assert result.stop_reason == "aborted"
    assert "did not stop within 0.2 s" in result[-1].content[0].text
    assert took < 5  # the grace, not the tool
    assert agent.prompt("again").text == "after"  # the agent stays usable


def test_waiting_for_a_run_held_by_a_thread_that_lives_on_does_not_wait_for_that_thread() -> None:
    in_tool, release = threading.Event(), threading.Event()

    def slow(tool_call_id: str, params: Any, signal: AbortSignal, on_update: Any) -> str:
        in_tool.set()
        release.wait(10)
        return "slow done"

    agent, _ = make_agent([reply(tool_call("slow")), "held"], tools=[make_tool("slow", slow)])
    returned, leave = threading.Event(), threading.Event()

    def request_thread() -> None:
        agent.prompt("hi")
        returned.set()
        leave.wait(30)  # a web server's thread goes on serving after the run

    thread = threading.Thread(target=request_thread, name="request-thread")
    thread.start()
    idle: list[bool] = []
    try:
        assert in_tool.wait(10)
        waiter = threading.Thread(target=lambda: idle.append(agent.wait_for_idle()))
        waiter.start()  # waits for the run, which its calling thread holds
        release.set()
        assert returned.wait(10)
        waiter.join(5)
        assert idle == [True]  # the run's end, not the end of the thread that held it
    finally:
        release.set()
        leave.set()
        thread.join(10)


def test_a_run_held_by_its_calling_thread_sees_a_copy_of_its_contextvars() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def listener(event: Any) -> None:
        seen.append(var.get())
        var.set("set by a listener")

    agent, _ = make_agent(["hi"])
    agent.subscribe(listener)

    def request_thread() -> str:
        var.set("the request's")
        agent.prompt("hi")
        return var.get()

    assert _on_a_thread(request_thread) == "the request's"  # nothing leaked back
    assert seen[0] == "the request's"  # the run started from the caller's values
    assert seen[-1] == "set by a listener"


def test_agent_constructor_does_not_need_a_model_for_scripted_runs() -> None:
    agent = Agent(stream_fn=make_agent([])[1])
    assert agent.state.model.id == "unknown"


def test_waiting_for_the_run_from_its_own_listener_fails_fast_instead_of_deadlocking() -> None:
    agent, _ = make_agent(["hi", "again"])
    problems: list[str] = []

    def listener(event: Any) -> None:
        if event.type == "turn_end":
            try:
                agent.wait_for_idle()
            except Exception as exc:
                problems.append(str(exc))

    agent.subscribe(listener)
    agent.prompt("go")
    assert problems and "cannot wait for itself" in problems[0]
    assert agent.prompt("again")[-1].content[0].text == "again"


def test_a_file_readable_on_abort_wakes_a_select_and_is_closed_after() -> None:
    import os
    import select

    from agentkit.abort import AbortController, readable_on_abort

    controller = AbortController()
    with readable_on_abort(controller.signal) as fd:
        assert select.select([fd], [], [], 0) == ([], [], [])
        aborter = threading.Thread(target=controller.abort)
        aborter.start()
        assert select.select([fd], [], [], 20)[0] == [fd]  # woken by the other thread's abort
        aborter.join()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed with the block
    with readable_on_abort(controller.signal) as fd:  # already aborted: readable at once
        assert select.select([fd], [], [], 0)[0] == [fd]
    with readable_on_abort(None) as fd:
        assert select.select([fd], [], [], 0) == ([], [], [])


def test_a_batch_runs_on_a_users_executor_in_parallel_and_leaves_it_usable() -> None:
    count = 4
    barrier = threading.Barrier(count, timeout=10)
    threads: dict[int, str] = {}
    # Call n returns once the end of call n + 1 was announced: the calls end last to first.
    may_return = {n: threading.Event() for n in range(count)}
    may_return[count - 1].set()
    numbers: dict[str, int] = {}

    @tool
    def meet(n: int) -> str:
        """Waits until every call of the batch is running."""
        threads[n] = threading.current_thread().name
        barrier.wait()
        may_return[n].wait(10)
        return str(n)

    def release_the_previous(event: Any) -> None:
        if event.type == "tool_execution_start":
            numbers[event.tool_call_id] = event.args["n"]
        elif event.type == "tool_execution_end" and numbers[event.tool_call_id] > 0:
            may_return[numbers[event.tool_call_id] - 1].set()

    with ThreadPoolExecutor(max_workers=count, thread_name_prefix="mine") as pool:
        calls = [tool_call("meet", {"n": i}) for i in range(count)]
        agent, _ = make_agent([reply(*calls), "done"], tools=[meet], tool_executor=pool)
        recorder = Recorder()
        agent.subscribe(recorder)
        agent.subscribe(release_the_previous)
        new = agent.prompt("go")
        results = [m for m in new if m.role == "tool_result"]
        assert [r.content[0].text for r in results] == [str(i) for i in range(count)]
        assert not any(r.is_error for r in results)  # the barrier held: the calls overlapped
        assert all(name.startswith("mine") for name in threads.values())
        ended = [e.tool_call_id for e in recorder.of("tool_execution_end")]
        assert ended == [r.tool_call_id for r in reversed(results)]  # announced as each ends
        assert len(set(recorder.threads)) == 1  # every event on the loop's thread
        assert pool.submit(lambda: "still usable").result(5) == "still usable"


def test_an_abort_ends_a_batch_on_a_users_executor() -> None:
    started = threading.Event()
    release = threading.Event()

    def stubborn(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        release.wait(10)  # ignores the abort
        return "late"

    with ThreadPoolExecutor(max_workers=2) as pool:
        agent, _ = make_agent(
            [reply(tool_call("stubborn")), "never"],
            tools=[make_tool("stubborn", stubborn)],
            tool_executor=pool,
            tool_abort_grace=0.1,
        )
        run = agent.start("go")
        assert started.wait(5)
        agent.abort()
        assert run.wait(5)
        result = [m for m in run.result() if m.role == "tool_result"][0]
        assert result.is_error and "did not stop within" in result.content[0].text
        release.set()
        assert pool.submit(lambda: 1).result(5) == 1  # the run did not shut the pool down


def test_the_default_executor_leaves_no_thread_and_is_a_real_executor() -> None:
    from agentkit._tool_threads import ToolThreadExecutor

    before = set(threading.enumerate())
    executor = ToolThreadExecutor(max_workers=2)
    futures = [executor.submit(threading.current_thread) for _ in range(4)]
    workers = {future.result(5) for future in futures}
    assert len(workers) <= 2
    assert all(t.daemon and t.name.startswith("agentkit-tool-") for t in workers)
    failing = executor.submit(int, "not a number")
    with pytest.raises(ValueError):
        failing.result(5)
    executor.shutdown()
    assert set(threading.enumerate()) == before
    with pytest.raises(RuntimeError):
        executor.submit(int, "1")

    forgotten = ToolThreadExecutor(max_workers=1)
    worker = forgotten.submit(threading.current_thread).result(5)
    del forgotten  # never shut down: its thread is told to stop when it is collected
    gc.collect()
    worker.join(5)
    assert not worker.is_alive()

    @tool
    def quick(n: int) -> str:
        """Quick."""
        return str(n)

    agent, _ = make_agent(
        [
            reply(*[tool_call("quick", {"n": i}) for i in range(3)]),
            reply(tool_call("quick", {"n": 9})),
            "done",
        ],
        tools=[quick],
    )
    agent.prompt("go")
    assert [t for t in threading.enumerate() if t.name.startswith("agentkit-tool")] == []


@pytest.mark.parametrize(
    ("call", "execution"),
    [("prompt", "parallel"), ("prompt", "inline"), ("stream", "parallel"), ("aprompt", "parallel")],
)
def test_a_run_with_tools_leaves_no_reference_cycles(call: str, execution: str) -> None:
    """Everything a run made is freed by reference counting when it is done with: a cycle
    (a tool batch and its futures' done callbacks, once) leaves each run's batches, and the
    agent they reach, to the garbage collector, whose collections then cost every thread of a
    busy process its time."""

    @tool
    def echo(n: int) -> str:
        """Echo."""
        return str(n)

    def run_once() -> None:
        agent, _ = make_agent(
            [reply(tool_call("echo", {"n": 1}), tool_call("echo", {"n": 2})), "done"],
            tools=[echo],
            tool_execution=execution,
        )
        if call == "stream":
            with agent.stream("go") as stream:
                assert [e for e in stream if e.type == "agent_end"]
            return
        result = asyncio.run(agent.aprompt("go")) if call == "aprompt" else agent.prompt("go")
        assert result.text == "done"

    run_once()  # first-use imports and caches
    gc.collect()
    gc.disable()
    # What exists now is not the runs' garbage: frozen, the collector skips it, so the check
    # costs the runs' own objects and not the whole test session's heap.
    gc.freeze()
    try:
        gc.set_debug(gc.DEBUG_SAVEALL)
        for _ in range(3):
            run_once()
        gc.collect()
        garbage = [type(o).__name__ for o in gc.garbage]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.unfreeze()
        gc.enable()
    assert garbage == []
