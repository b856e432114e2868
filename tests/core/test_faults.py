"""Faults the agent survives: no hang, no lost message, no poisoned
conversation, whatever a tool raises or returns and whenever Ctrl-C arrives."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    AbortSignal,
    Agent,
    AgentBusyError,
    AgentToolResult,
    AssistantMessage,
    PendingMessageQueue,
    TextContent,
    ToolExecutionUpdateEvent,
    UserMessage,
    event_to_dict,
    tool,
)
from agentkit.abort import AbortController
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import WAIT, Recorder, make_agent, make_tool

# --- a tool that raises a BaseException -------------------------------------------------------


def _raiser(exc: BaseException) -> Any:
    def run(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> Any:
        raise exc

    return run


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
@pytest.mark.parametrize(
    "exc", [SystemExit(2), KeyboardInterrupt(), GeneratorExit()], ids=lambda e: type(e).__name__
)
def test_a_tool_raising_a_base_exception_still_finishes_with_an_error_result(
    exc: BaseException, mode: str
) -> None:
    tools = [make_tool("bad", _raiser(exc)), make_tool("good")]
    calls = [tool_call("bad", {}, id="c1"), tool_call("good", {}, id="c2")]
    agent, _ = make_agent([reply(*calls), "done"], tools=tools, tool_execution=mode)

    messages = agent.start("go").result(timeout=WAIT)  # a lost report would time out here

    results = {m.tool_call_id: m for m in messages if m.role == "tool_result"}
    assert results["c1"].is_error
    assert results["c1"].content[0].text.startswith(type(exc).__name__)
    assert not results["c2"].is_error
    assert messages[-1].content[0].text == "done"


def test_an_async_tool_cancelled_inside_its_event_loop_reports_an_error_result() -> None:
    @tool
    async def cancelled() -> str:
        """Cancelled inside its own event loop."""
        raise asyncio.CancelledError()

    agent, _ = make_agent([reply(tool_call("cancelled", {}, id="c1")), "ok"], tools=[cancelled])

    messages = agent.start("go").result(timeout=WAIT)

    result = [m for m in messages if m.role == "tool_result"][0]
    assert result.is_error and result.content[0].text == "CancelledError"


def test_a_tool_raising_system_exit_after_an_abort_is_reported_not_given_up_on() -> None:
    started = threading.Event()

    def run(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> Any:
        started.set()
        signal.wait(WAIT)
        raise SystemExit("stopped")  # what argparse inside a tool does on bad input

    agent, _ = make_agent(
        [reply(tool_call("slow", {}, id="c1"))],
        tools=[make_tool("slow", run)],
        tool_abort_grace=WAIT,
    )
    run_handle = agent.start("go")
    assert started.wait(WAIT)
    run_handle.abort()
    messages = run_handle.result(timeout=WAIT)

    result = messages[-1]
    assert result.role == "tool_result"
    assert result.content[0].text == "SystemExit: stopped"  # not "did not stop within ..."


# --- Ctrl-C at any instant --------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("entry", ["prompt", "continue_", "stream"])
@pytest.mark.usefixtures("ctrl_c")  # skips off the main thread; puts the handler back after
def test_sigint_at_random_moments_always_aborts_and_waits_for_the_run(entry: str) -> None:
    rng = random.Random(1234)
    armed = threading.Event()  # the handler raises only inside the measured block

    def on_sigint(signum: int, frame: Any) -> None:
        if armed.is_set():
            armed.clear()
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    model = ScriptedModel(delay=0.0002)
    agent = Agent(model=model.model, stream_fn=model)
    main_id = threading.get_ident()
    interrupted = 0
    try:
        for _ in range(300):
            model.add("a short answer")
            if entry == "continue_" and (
                not agent.state.messages or agent.state.messages[-1].role != "user"
            ):
                agent.state.messages.append(UserMessage(content="go on"))
            delay = rng.uniform(0, 0.004)
            killer = threading.Timer(delay, signal.pthread_kill, (main_id, signal.SIGINT))
            try:
                armed.set()
                killer.start()
                if entry == "prompt":
                    agent.prompt("hi")
                elif entry == "continue_":
                    agent.continue_()
                else:
                    for _event in agent.stream("hi"):
                        pass
                armed.clear()
            except KeyboardInterrupt:
                interrupted += 1
                # At the instant the interrupt leaves prompt(), the run has ended.
                assert not agent.state.is_streaming
                assert agent.signal is None
            killer.join()
            armed.clear()
            assert agent.wait_for_idle(0)
            if model.remaining:  # interrupted before the request: drop the unused reply
                model = ScriptedModel(delay=0.0002)
                agent.stream_fn = model
    finally:
        armed.clear()
    assert interrupted > 0
    assert not agent.state.is_streaming
    roles = [m.role for m in agent.state.messages]
    # Every run that began ended with an assistant message (its reply, or "aborted").
    assert all(b == "assistant" for a, b in zip(roles, roles[1:], strict=False) if a == "user"), (
        roles
    )


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="needs pthread_kill")
@pytest.mark.parametrize("entry", ["prompt", "stream"])
@pytest.mark.usefixtures("ctrl_c")
def test_a_sigint_that_lands_on_another_thread_still_interrupts_the_main_thread(
    entry: str,
) -> None:
    # The OS may hand a Ctrl-C to any thread (here: the tool's own thread, as when it lands
    # while a tool starts a subprocess). Python only flags it for the main thread, which must
    # then raise KeyboardInterrupt although it is blocked waiting for the run.
    def interrupted_tool(_id: str, _params: dict[str, Any], sig: AbortSignal, _u: Any) -> str:
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not main
        sig.wait(60)  # the run's abort ends the call
        return "stopped"

    agent, _ = make_agent(
        [reply(tool_call("t", {}, id="c1")), "done"], tools=[make_tool("t", interrupted_tool)]
    )
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        if entry == "prompt":
            agent.prompt("go")
        else:
            for _event in agent.stream("go"):
                pass
    assert time.monotonic() - start < 30  # at once, not when the tool's 60 s wait runs out
    assert agent.wait_for_idle(WAIT)  # the interrupted run was aborted and has ended
    assert not agent.state.is_streaming
    assert agent.state.messages[-1].role in ("assistant", "tool_result")


def test_main_thread_waits_keep_their_timeouts_and_results() -> None:
    # The waits above block in slices on the main thread; what they return is unchanged.
    from agentkit.waits import SLICE, get_item, wait_event

    items: queue.SimpleQueue[int] = queue.SimpleQueue()
    start = time.monotonic()
    with pytest.raises(queue.Empty):
        get_item(lambda t: items.get(timeout=t), 2.5 * SLICE)
    assert time.monotonic() - start >= 2.5 * SLICE
    items.put(7)
    assert get_item(lambda t: items.get(timeout=t), None) == 7
    flag = threading.Event()
    assert not wait_event(flag, 2.5 * SLICE)
    threading.Timer(0.0, flag.set).start()
    assert wait_event(flag, None)
    assert not AbortController().signal.wait(0)


# --- queues and runs --------------------------------------------------------------------------


def test_start_continue_that_loses_the_race_for_the_agent_drains_nothing() -> None:
    model = ScriptedModel(["interloper answered", "follow-up answered"])
    agent = Agent(
        model=model.model,
        stream_fn=model,
        messages=[UserMessage(content="hi"), AssistantMessage(content=[TextContent(text="x")])],
    )
    interloper: list[Any] = []

    class RacingQueue(PendingMessageQueue):
        """Another thread's prompt() lands exactly while start_continue() takes the queue."""

        def drain(self) -> list[Any]:
            taken = super().drain()
            if not interloper:
                try:
                    interloper.append(agent.start("interloper"))
                except AgentBusyError:
                    interloper.append(None)  # start_continue() claimed the agent first
            return taken

    racing = RacingQueue()
    racing.enqueue(UserMessage(content="one"))
    agent._follow_ups = racing

    try:
        agent.start_continue().wait(WAIT)
    except AgentBusyError:
        assert agent.wait_for_idle(WAIT)
        agent.continue_()  # what the caller does next: the follow-up must still be there
    assert agent.wait_for_idle(WAIT)

    texts = [_text(m) for m in agent.state.messages if isinstance(m, UserMessage)]
    assert texts.count("one") == 1, texts


def _text(message: UserMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else content[0].text  # type: ignore[union-attr]


def test_run_wait_honours_its_timeout_while_a_done_callback_runs() -> None:
    release_tool = threading.Event()
    release_callback = threading.Event()
    agent, _ = make_agent(
        [reply(tool_call("gate", {}, id="c1")), "done"],
        tools=[make_tool("gate", lambda _id, params, signal, _u: release_tool.wait(WAIT) and "ok")],
    )
    run = agent.start("go")
    callback_running = threading.Event()

    def slow_callback(_run: Any) -> None:
        callback_running.set()
        release_callback.wait(WAIT)

    run.add_done_callback(slow_callback)
    release_tool.set()
    assert callback_running.wait(WAIT)
    started = time.monotonic()
    try:
        assert run.wait(0.2) is True  # the run has ended; its callback is still going
        assert time.monotonic() - started < 2.0  # 10x the timeout; WAIT if the join ignored it
    finally:
        release_callback.set()
    assert run.wait(WAIT)


def test_agent_accepts_provider_colon_id_and_reports_failures_with_it() -> None:
    def exploding(model: Any, context: Any, options: Any) -> Any:
        raise RuntimeError("provider exploded")

    agent = Agent(model="openai:gpt-4o-mini", stream_fn=exploding)
    assert (agent.state.model.provider, agent.state.model.id) == ("openai", "gpt-4o-mini")

    messages = agent.prompt("hi")

    assert messages[-1].error_message == "provider exploded"
    assert messages[-1].provider == "openai"
    with pytest.raises(ValueError, match="provider:id"):
        Agent(model="gpt-4o-mini", stream_fn=exploding)
    with pytest.raises(KeyError, match="Unknown model"):
        Agent(model="openai:no-such-model", stream_fn=exploding)


def test_leaving_a_stream_with_break_ends_the_run_while_the_stream_is_still_referenced() -> None:
    agent, _ = make_agent(
        [reply(tool_call("wait", {}, id="c1")), "done"],
        tools=[make_tool("wait", lambda _id, params, signal, _u: signal.wait(WAIT) and "aborted")],
    )
    events = agent.stream("go")  # kept in a variable: no garbage collection ends it
    for event in events:
        if event.type == "tool_execution_start":
            break

    assert not agent.state.is_streaming
    assert events.run.done()
    assert agent.state.error_message == "Operation aborted"


def test_an_abort_during_a_tool_batch_is_recorded_in_the_state() -> None:
    started = threading.Event()

    def run(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> str:
        started.set()
        signal.wait(WAIT)
        return "stopped early"

    agent, model = make_agent(
        [reply(tool_call("slow", {}, id="c1"))], tools=[make_tool("slow", run)]
    )
    handle = agent.start("go")
    assert started.wait(WAIT)
    agent.abort()
    messages = handle.result(timeout=WAIT)

    assert messages[-1].role == "tool_result"  # an abort during tools ends the run after its batch
    assert len(model.requests) == 1
    assert agent.state.error_message == "Operation aborted"


# --- what enters the transcript is serialisable ------------------------------------------------


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


def test_tool_results_that_json_cannot_hold_are_stored_serialisably() -> None:
    def weird(_id: str, params: dict[str, Any], signal: AbortSignal, _update: Any) -> AgentToolResult:
        return AgentToolResult(
            content=[TextContent(text="caf\udce9")],
            details={"obj": _Opaque(), "big": float("inf"), "nan": float("nan"), "set": {1}},
            structured_content={"when": _Opaque()},
        )

    @tool
    def returns_object() -> Any:
        """Returns something JSON cannot hold."""
        return {"handle": _Opaque(), "ratio": float("-inf")}

    agent, _ = make_agent(
        [reply(tool_call("weird", {}, id="c1"), tool_call("returns_object", {}, id="c2")), "ok"],
        tools=[make_tool("weird", weird), returns_object],
    )
    rec = Recorder()
    agent.subscribe(rec)

    messages = agent.prompt("go")

    results = {m.tool_call_id: m for m in messages if m.role == "tool_result"}
    assert results["c1"].details == {"obj": "<opaque>", "big": None, "nan": None, "set": [1]}
    assert results["c1"].content[0].text == "caf\ufffd"
    assert results["c2"].details == {"handle": "<opaque>", "ratio": None}
    for message in agent.state.messages:
        data = message.model_dump(mode="json")
        json.dumps(data, allow_nan=False).encode("utf-8")
        assert type(message).model_validate(data) == message
    for event in rec.events:
        json.dumps(event_to_dict(event), allow_nan=False).encode("utf-8")


def test_a_prompt_with_a_lone_surrogate_enters_the_transcript_encodable() -> None:
    agent, model = make_agent(["ok"])
    name = os.fsdecode(b"caf\xe9.txt")  # a non-UTF-8 file name, as os.listdir gives it

    agent.prompt(f"open {name}")
    agent.steer(f"and {name}")

    user = [m for m in agent.state.messages if m.role == "user"][0]
    assert user.content[0].text == "open caf\ufffd.txt"
    json.dumps(user.model_dump(mode="json")).encode("utf-8")
    assert model.requests[0].messages[-1] == user


def test_tool_refuses_parameter_names_pydantic_cannot_hold() -> None:
    with pytest.raises(TypeError, match="model_config"):

        @tool
        def configure(model_config: str) -> str:
            """Uses pydantic's reserved name."""
            return model_config

    with pytest.raises(TypeError, match="underscore"):

        @tool
        def hidden(_secret: str) -> str:
            """Uses a name pydantic ignores."""
            return _secret


def test_event_to_dict_gives_strict_json_for_any_partial_result() -> None:
    event = ToolExecutionUpdateEvent(
        "c1", "t", {}, {"ratio": float("nan"), "name": "caf\udce9", "obj": _Opaque()}
    )

    data = event_to_dict(event)

    assert data["partial_result"] == {"ratio": None, "name": "caf\ufffd", "obj": "<opaque>"}
    json.dumps(data, allow_nan=False).encode("utf-8")


def test_a_failure_whose_text_cannot_be_encoded_is_still_recorded_serialisably() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise ValueError("no text")

    def listener(event: Any) -> None:
        if event.type == "message_end" and event.message.role == "user":
            raise OSError("cannot open caf\udce9.txt")

    def unprintable(model: Any, context: Any, options: Any) -> Any:
        raise Unprintable()

    agent, _ = make_agent(["unused"])
    agent.subscribe(listener)
    messages = agent.prompt("hi")
    assert messages[-1].error_message == "cannot open caf\ufffd.txt"
    json.dumps(messages[-1].model_dump(mode="json")).encode("utf-8")

    other = Agent(model="openai:gpt-4o-mini", stream_fn=unprintable)
    assert other.prompt("hi")[-1].error_message == "Unprintable"


@pytest.mark.processes
def test_a_tool_given_up_on_never_holds_the_interpreter_exit(tmp_path: Path) -> None:
    # The tool ignores its signal and blocks until the process dies; the run gives up on it
    # after the grace period, and the script then ends: the stuck tool thread must not keep the
    # interpreter from exiting (a thread pool's exit hook would join it forever).
    script = tmp_path / "stuck.py"
    script.write_text(
        "import threading\n"
        "from agentkit import Agent\n"
        "from agentkit.testing import ScriptedModel, reply, tool_call\n"
        "from agentkit.tools import tool\n"
        "started = threading.Event()\n"
        "@tool\n"
        "def stuck() -> str:\n"
        '    """Never returns."""\n'
        "    started.set()\n"
        "    threading.Event().wait()\n"
        "    return 'never'\n"
        "model = ScriptedModel([reply(tool_call('stuck', {}, id='c1')), 'after'])\n"
        "agent = Agent(model=model.model, stream_fn=model, tools=[stuck],\n"
        "              tool_abort_grace=0.2)\n"
        "run = agent.start('go')\n"
        "assert started.wait(30)\n"
        "run.abort()\n"
        "messages = run.result(timeout=30)\n"
        "print(messages[-1].content[0].text)\n"
    )
    root = str(Path(__file__).resolve().parents[2])  # this checkout's agentkit
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "did not stop within 0.2 s" in done.stdout
