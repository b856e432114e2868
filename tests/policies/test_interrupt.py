"""``agent.interrupt(message)``: the request or tool batch going on stops, the run goes on with
the message as its next user turn; tools that ignore the abort are given up on after the grace;
the transcript stays valid; and ``!line`` in ``agentkit chat``."""

from __future__ import annotations

import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from agentkit import (
    AbortSignal,
    Agent,
    AssistantMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    cli,
)
from agentkit.event_stream import AssistantMessageEventStream
from agentkit.events import StartEvent, TextDeltaEvent
from agentkit.interrupts import INTERRUPTED_TEXT
from agentkit.providers.transform import prepare_context
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import Context, Model, TextContent
from tests.support import WAIT, signal_tool
from tests.terminal import Terminal

HERE = Path(__file__).resolve().parent

MESSAGE = "stop that, use metric units"


def _last_user_text(context: Any) -> str:
    users = [m for m in context.messages if getattr(m, "role", None) == "user"]
    content = users[-1].content
    return content if isinstance(content, str) else content[0].text


def _echo(context: Any, options: Any) -> str:
    """A scripted reply that says what the model last heard from the user."""
    return f"heard: {_last_user_text(context)}"


def _assert_every_call_answered_right_after(messages: list[Any]) -> None:
    """Every tool call of a completed assistant message has exactly one result, right after
    it; an aborted response's calls never ran and have none (providers leave it out)."""
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage) or message.stop_reason == "aborted":
            continue
        calls = [b.id for b in message.content if isinstance(b, ToolCall)]
        following = messages[index + 1 : index + 1 + len(calls)]
        assert [m.tool_call_id for m in following] == calls
        later = [m for m in messages[index + 1 + len(calls) :] if isinstance(m, ToolResultMessage)]
        assert not {m.tool_call_id for m in later} & set(calls)


def _interrupt_when(agent: Agent, ready: threading.Event) -> threading.Thread:
    """Interrupt ``agent`` from another thread once ``ready`` is set."""

    def interrupter() -> None:
        assert ready.wait(WAIT)
        agent.interrupt(MESSAGE)

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    return thread


def test_interrupting_a_response_keeps_it_as_aborted_and_goes_on_with_the_message() -> None:
    model = ScriptedModel([reply("Converting to imperial units", hang=True), _echo])
    agent = Agent(model=model.model, stream_fn=model)
    streaming = threading.Event()
    agent.subscribe(lambda e: streaming.set() if e.type == "message_update" else None)
    interrupter = _interrupt_when(agent, streaming)
    result = agent.prompt("How tall is Everest?")
    interrupter.join(WAIT)

    assert result.stop_reason == "stop" and result.text == f"heard: {MESSAGE}"
    assert [m.role for m in result] == ["user", "assistant", "user", "assistant"]
    cut = result[1]
    assert cut.stop_reason == "aborted" and cut.error_message == INTERRUPTED_TEXT
    assert cut.text == "Converting to imperial units"  # the partial response is kept
    assert agent.signal is None and not agent.state.is_streaming
    # The second request heard the message; the cut-off response is left out of it.
    second = model.requests[1].messages
    assert second[-1].content[0].text == MESSAGE
    sent = prepare_context(model.model, Context(messages=second)).messages
    assert [m.role for m in sent] == ["user", "user"]


def test_a_stream_that_ignores_the_interrupt_is_ended_after_the_grace() -> None:
    answer = ScriptedModel([_echo])

    def deaf_then_scripted(model: Model, context: Context, options: Any) -> Any:
        if len([m for m in context.messages if getattr(m, "role", None) == "user"]) > 1:
            return answer(model, context, options)  # the request after the interrupt
        stream = AssistantMessageEventStream()
        partial = AssistantMessage(content=[TextContent(text="so far")])
        stream.push(StartEvent(partial))
        stream.push(TextDeltaEvent(0, "so far", partial))
        return stream  # never ends, never looks at its signal

    agent = Agent(model=answer.model, stream_fn=deaf_then_scripted, tool_abort_grace=0.1)
    streaming = threading.Event()
    agent.subscribe(lambda e: streaming.set() if e.type == "message_update" else None)
    interrupter = _interrupt_when(agent, streaming)
    result = agent.prompt("go")
    interrupter.join(WAIT)
    assert [m.role for m in result] == ["user", "assistant", "user", "assistant"]
    assert result[1].stop_reason == "aborted" and result[1].error_message == INTERRUPTED_TEXT
    assert result[1].content[0].text == "so far"
    assert result.stop_reason == "stop" and result.text == f"heard: {MESSAGE}"


def test_interrupting_a_batch_stops_running_tools_gives_up_on_stubborn_ones_and_goes_on() -> None:
    started = {name: threading.Event() for name in ("polite", "stubborn")}
    release_stubborn = threading.Event()
    stubborn_done = threading.Event()
    quick_ended = threading.Event()

    def quick(signal: AbortSignal) -> str:
        return "quick result"

    def polite(signal: AbortSignal) -> str:
        started["polite"].set()
        assert signal.wait(WAIT)  # stops when told
        return "polite stopped"

    def stubborn(signal: AbortSignal) -> str:
        started["stubborn"].set()
        release_stubborn.wait(WAIT)  # ignores the abort
        stubborn_done.set()
        return "stubborn finished anyway"

    calls = [tool_call(n, id=n) for n in ("quick", "polite", "stubborn")]
    model = ScriptedModel([reply(*calls), _echo])
    agent = Agent(
        model=model.model,
        stream_fn=model,
        tools=[
            signal_tool("quick", quick),
            signal_tool("polite", polite),
            signal_tool("stubborn", stubborn),
        ],
        tool_abort_grace=0.2,
    )
    agent.subscribe(
        lambda e: (
            quick_ended.set()
            if e.type == "tool_execution_end" and e.tool_call_id == "quick"
            else None
        )
    )

    def interrupter() -> None:
        for event in (quick_ended, *started.values()):
            assert event.wait(WAIT)
        agent.interrupt(MESSAGE)

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    try:
        result = agent.prompt("Measure everything")
    finally:
        thread.join(WAIT)
        release_stubborn.set()
    assert stubborn_done.wait(WAIT)  # its thread was left to finish on its own

    assert result.stop_reason == "stop" and result.text == f"heard: {MESSAGE}"
    results = {m.tool_call_id: m for m in result if isinstance(m, ToolResultMessage)}
    assert results["quick"].content[0].text == "quick result"  # it ended before the interrupt
    for name in ("polite", "stubborn"):
        text = results[name].content[0].text
        assert results[name].is_error and "interrupted by the user" in text and MESSAGE in text
    assert [m.role for m in result] == [
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "tool_result",
        "user",
        "assistant",
    ]
    _assert_every_call_answered_right_after(agent.state.messages)
    second = model.requests[1].messages
    assert [m.role for m in second[-4:]] == ["tool_result"] * 3 + ["user"]


def test_a_sequential_batch_interrupted_in_its_first_call_runs_no_other() -> None:
    first_running = threading.Event()
    ran: list[str] = []

    def first(signal: AbortSignal) -> str:
        ran.append("first")
        first_running.set()
        signal.throw_if_aborted() if signal.wait(WAIT) else None
        return "never"

    def second(signal: AbortSignal) -> str:
        ran.append("second")
        return "ran"

    model = ScriptedModel([reply(tool_call("first", id="a"), tool_call("second", id="b")), _echo])
    agent = Agent(
        model=model.model,
        stream_fn=model,
        tools=[signal_tool("first", first), signal_tool("second", second)],
        tool_execution="sequential",
    )
    interrupter = _interrupt_when(agent, first_running)
    result = agent.prompt("go")
    interrupter.join(WAIT)
    assert ran == ["first"]
    tool_results = [m for m in result if isinstance(m, ToolResultMessage)]
    assert [m.tool_call_id for m in tool_results] == ["a", "b"]
    assert all("interrupted by the user" in m.content[0].text for m in tool_results)
    assert result.text == f"heard: {MESSAGE}"


def test_an_abort_after_an_interrupt_still_ends_the_run() -> None:
    model = ScriptedModel([reply("first", hang=True), reply("second", hang=True)])
    agent = Agent(model=model.model, stream_fn=model)
    hangs = threading.Semaphore(0)
    agent.subscribe(
        lambda e: (
            hangs.release()
            if e.type == "message_start" and getattr(e.message, "role", None) == "assistant"
            else None
        )
    )
    run = agent.start("go")
    assert hangs.acquire(timeout=WAIT)
    agent.interrupt(MESSAGE)
    assert hangs.acquire(timeout=WAIT)  # the second request started: the run went on
    agent.abort()
    result = run.result(timeout=WAIT)
    assert result.stop_reason == "aborted"
    assert [m.role for m in result] == ["user", "assistant", "user", "assistant"]


def test_an_interrupt_while_idle_is_heard_at_the_next_runs_first_turn() -> None:
    model = ScriptedModel([_echo])
    agent = Agent(model=model.model, stream_fn=model)
    agent.interrupt(MESSAGE)
    result = agent.prompt("hello")
    assert [m.role for m in result] == ["user", "user", "assistant"]
    assert result.text == f"heard: {MESSAGE}"


def test_a_bang_line_in_chat_interrupts_a_running_command(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    read_fd, write_fd = os.pipe()
    stdin, writer = os.fdopen(read_fd, "r"), os.fdopen(write_fd, "w")
    command = tool_call("run_command", {"command": "echo started; sleep 60"}, id="cmd")
    model = ScriptedModel([reply(command), _echo])
    running = threading.Event()

    class Out(io.StringIO):
        def write(self, text: str) -> int:
            if "run_command" in text:
                running.set()
            return super().write(text)

    out, err = Out(), Out()

    def drive() -> None:
        try:
            writer.write("count the files\n")
            writer.flush()
            assert running.wait(60)
            writer.write(f"!{MESSAGE}\n")
            writer.flush()
        finally:
            writer.close()  # end of input: the chat finishes the run, then leaves

    driver = threading.Thread(target=drive, name="test-typist")
    driver.start()
    try:
        code = cli.main(
            ["chat", "--yes", "--workspace", str(workspace)],
            stream_fn=model,
            model=model.model,
            stdin=stdin,
            stdout=out,
            stderr=err,
        )
    finally:
        driver.join(WAIT)
    assert code == 0, err.getvalue()
    assert f"interrupting: {MESSAGE}" in err.getvalue()
    assert f"heard: {MESSAGE}" in out.getvalue()
    second = model.requests[1].messages
    (result,) = [m for m in second if isinstance(m, ToolResultMessage)]
    assert result.tool_call_id == "cmd" and "interrupted by the user" in result.content[0].text
    assert isinstance(second[-1], UserMessage) and second[-1].content[0].text == MESSAGE


@pytest.mark.processes
@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")
def test_a_bang_line_typed_on_a_terminal_interrupts_the_chat(tmp_path: Path) -> None:
    term = Terminal([str(HERE.parent / "cli_pty_child.py"), "chat", str(tmp_path)], tmp_path)
    term.read_until(b"> ")
    os.write(term.fd, b"count the files\n")
    term.read_until(b"-> run_command")
    os.write(term.fd, b"!say hi instead\n")  # typed while the command runs
    term.read_until(b"heard: say hi instead")  # the run went on with the typed line
    os.write(term.fd, b"\x04")  # Ctrl-D, end of input: the chat leaves
    assert term.wait() == 0, term.output
    assert b"Traceback" not in term.output
