"""MCPServer against servers that misbehave: lines that are not UTF-8 or not JSON-RPC on a
stdio server's stdout, servers that crash, exit at start-up or never answer; and the ways back
(restart, automatic restart, a new server in a closed one's place). The servers are real
processes: ``tests/mcp_servers/fault_server.py`` (written by hand, so it can write anything on
the wire) and the SDK-based ``tool_server.py``."""

from __future__ import annotations

import os
import signal as signals
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")

from agentkit import Agent, AgentToolResult, ToolResultMessage  # noqa: E402
from agentkit.integrations._mcp_connection import SHUTDOWN_GRACE  # noqa: E402
from agentkit.integrations.mcp import MCPServer, MCPServerError  # noqa: E402
from agentkit.testing import ScriptedModel, reply, tool_call  # noqa: E402
from tests.mcp_servers.processes import FAULT_SERVER  # noqa: E402
from tests.servers import MCPHttpServer  # noqa: E402

pytestmark = pytest.mark.processes

WAIT = 30.0
"""Generous bound (seconds) for anything that should happen at once; never reached when it does."""


def fault_server(*args: str, **options: Any) -> MCPServer:
    return MCPServer.stdio(sys.executable, [FAULT_SERVER, *args], name="faulty", **options)


@pytest.fixture
def no_leaked_threads() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leftover = {t for t in set(threading.enumerate()) - before if t.name.startswith("agentkit")}
    assert not leftover, f"threads outlived close(): {leftover}"


def in_background(fn: Callable[[], AgentToolResult]) -> Callable[[], AgentToolResult]:
    """Start ``fn`` on a thread; return a getter that fails (instead of hanging) if it does not
    finish within WAIT."""
    box: list[AgentToolResult] = []
    thread = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    thread.start()

    def result() -> AgentToolResult:
        thread.join(WAIT)
        assert box, "the call never returned"
        return box[0]

    return result


def test_a_line_that_is_not_utf8_is_skipped_and_every_call_goes_on(no_leaked_threads: None) -> None:
    server = fault_server().start()
    try:
        in_flight = in_background(lambda: server.call_tool("slow", {"seconds": 0.5}))
        bad = in_background(lambda: server.call_tool("bad_utf8", {}))
        assert bad().text == "printed bad utf-8"
        assert in_flight().text == "slept"
        later = in_background(lambda: server.call_tool("echo", {"text": "still here"}))
        assert later().text == "still here"
        assert server.alive
    finally:
        server.close()


def test_a_non_json_line_is_skipped(no_leaked_threads: None) -> None:
    with fault_server() as server:
        assert server.call_tool("garbage", {}).text == "printed garbage"
        assert server.call_tool("echo", {"text": "ok"}).text == "ok"
        assert server.alive

def test_a_request_of_the_servers_that_cannot_be_read_is_answered() -> None:
    # The server sends its client a request with an id and a numeric method: the SDK's reader
    # cannot read it and would drop it, the server waiting on that id for ever.
    with fault_server() as server:
        assert server.call_tool("ask_badly", {}).text == "-32600"
        assert server.call_tool("echo", {"text": "ok"}).text == "ok"


@pytest.mark.parametrize("fault", ["bad-utf8", "garbage"])
def test_a_bad_line_before_the_first_answer_does_not_stop_the_start(fault: str) -> None:
    with fault_server("--start", fault, connect_timeout=WAIT) as server:
        assert server.call_tool("echo", {"text": "started"}).text == "started"


def test_a_crash_fails_the_calls_in_flight_and_later_at_once_and_says_why(
    no_leaked_threads: None,
) -> None:
    server = fault_server().start()
    try:
        in_flight = in_background(lambda: server.call_tool("slow", {"seconds": 600}))
        crash = server.call_tool("crash", {})
        assert crash.is_error and "'faulty'" in crash.text and "exited with status 1" in crash.text
        assert "exited with status 1" in in_flight().text
        assert not server.alive
        later = in_background(lambda: server.call_tool("echo", {"text": "x"}))()
        assert later.is_error and "exited with status 1" in later.text
    finally:
        server.close()


def test_alive_turns_false_when_the_server_dies_between_calls() -> None:
    with fault_server() as server:
        pid = int(server.call_tool("pid", {}).text)
        assert server.alive
        connection = server._connection
        assert connection is not None
        os.kill(pid, signals.SIGKILL)
        # The transport notices the exit by itself; no call is needed to find out.
        assert connection.ended.wait(WAIT)
        assert not server.alive
        result = server.call_tool("echo", {"text": "x"})
        assert result.is_error and "killed by signal SIGKILL" in result.text


def test_start_says_how_the_server_ended_and_what_it_wrote_to_stderr() -> None:
    code = "import sys; sys.stderr.write('config file missing\\n'); sys.exit(3)"
    broken = MCPServer.stdio(sys.executable, ["-c", code], name="broken")
    with pytest.raises(MCPServerError) as caught:
        broken.start()
    message = str(caught.value)
    assert "'broken' could not be started" in message
    assert "exited with status 3" in message and "config file missing" in message


def test_an_http_server_that_is_not_there_is_named_without_its_credentials() -> None:
    from tests.mcp_servers.processes import free_port

    url = f"http://someone:secret-password@127.0.0.1:{free_port()}/mcp"
    with pytest.raises(MCPServerError) as caught:
        MCPServer.http(url).start()
    message = str(caught.value)
    assert "cannot reach the server" in message and "127.0.0.1" in message
    assert "secret-password" not in message


def test_start_keeps_to_connect_timeout_for_a_server_that_ignores_the_shutdown(
    no_leaked_threads: None,
) -> None:
    # Never answers, ignores both its stdin closing and SIGTERM: only SIGKILL ends it.
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "while True: time.sleep(1)"
    )
    mute = MCPServer.stdio(sys.executable, ["-c", code], name="mute", connect_timeout=1)
    started = time.monotonic()
    with pytest.raises(MCPServerError, match="did not answer within 1 s"):
        mute.start()
    elapsed = time.monotonic() - started
    # The server is killed when the time is up (about connect_timeout in all): start() does
    # not also wait out the shutdown grace, 2 s, and 2 s more after a SIGTERM it ignores, as
    # with the SDK's own stdio transport (connect_timeout + 4 s). The bound leaves 3 s for a
    # busy machine.
    assert elapsed < mute.connect_timeout + SHUTDOWN_GRACE + 1.0, elapsed


def test_restart_brings_a_crashed_server_back_under_the_same_tools() -> None:
    with fault_server() as server:
        first_pid = server.call_tool("pid", {}).text
        tools = server.tools
        assert server.call_tool("crash", {}).is_error
        assert not server.alive
        server.restart()
        assert server.alive
        assert server.call_tool("pid", {}).text != first_pid
        assert [t.name for t in server.tools] == [t.name for t in tools]
        # The tool objects the agent already holds reach the new process.
        echo = next(t for t in tools if t.name == "echo")
        result = echo.execute("c1", {"text": "back"}, None, lambda _u: None)  # type: ignore[arg-type]
        assert result.text == "back"


def test_auto_restart_starts_a_stdio_server_that_died_again() -> None:
    with fault_server(auto_restart=True) as server:
        first_pid = server.call_tool("pid", {}).text
        crash = server.call_tool("crash", {})
        assert crash.is_error and "exited with status 1" in crash.text  # that call is lost
        later = in_background(lambda: server.call_tool("pid", {}))()
        assert not later.is_error and later.text != first_pid
        assert server.alive


def test_without_auto_restart_a_dead_server_stays_dead() -> None:
    with fault_server() as server:
        server.call_tool("crash", {})
        assert server.call_tool("echo", {"text": "x"}).is_error
        assert not server.alive


def _results(messages: list[Any]) -> dict[str, ToolResultMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolResultMessage)}


def test_a_new_server_attached_after_close_replaces_the_old_ones_tools(
    no_leaked_threads: None,
) -> None:
    process = MCPHttpServer()
    try:
        model = ScriptedModel(
            ["first", reply(tool_call("add", {"a": 2, "b": 3}, id="a1")), "5"]
        )
        agent = Agent(model=model.model, stream_fn=model)
        old = MCPServer.http(process.url, name="tools").start()
        old.attach(agent)
        count = len(old.tools)
        agent.prompt("hello")
        old.close()
        assert not any(t.name == "add" for t in agent.state.tools)  # gone with its server

        new = MCPServer.http(process.url, name="tools").start()
        new.attach(agent)
        names = [t.name for t in agent.state.tools]
        assert len(names) == len(set(names)) == count
        messages = agent.prompt("add")
        result = _results(messages)["a1"]
        assert not result.is_error and result.content[0].text == "5"
        agent.close()
        assert not new.alive
    finally:
        process.stop()


def test_attaching_a_tool_name_the_agent_already_has_is_refused() -> None:
    with fault_server() as one, fault_server() as two:
        agent = Agent(model=ScriptedModel([]).model)
        one.attach(agent)
        with pytest.raises(MCPServerError, match="tool_prefix"):
            two.attach(agent)
        prefixed = fault_server(tool_prefix="two_").start()
        prefixed.attach(agent)
        assert "two_echo" in [t.name for t in agent.state.tools]
        agent.close()
