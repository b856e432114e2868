"""``agentkit mcp serve``: an agent and agentkit tools served over MCP, as a real
``python -m agentkit mcp serve`` process, over stdio and streamable HTTP, driven by the SDK's own
client and by a third-party one, the MCP Inspector's command-line mode (npm, installed by
``scripts/test`` into ``.venv/npm``; those tests skip, saying so, where it is missing). Also
clients that cancel and clients that go away mid-run: the run must be aborted."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import mcp  # noqa: E402

from agentkit.cli.mcp_serve import load_tools  # noqa: E402
from agentkit.errors import CliError  # noqa: E402
from tests.mcp_servers.processes import (  # noqa: E402
    ROOT,
    HttpServerProcess,
    free_port,
    npm_bin,
    npm_skip_reason,
)

pytestmark = pytest.mark.processes

WAIT = 60.0
"""Generous bound (seconds) for anything that should happen soon; never reached when it does."""

RESEARCH = "tests.mcp_servers.served:research_agent"
TOOLBOX = "tests.mcp_servers.served:toolbox"
PROGRESS = ["thinking", "running lookup", "lookup done", "thinking"]


def serve_argv(target: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agentkit", "mcp", "serve", target, *extra]


def server_env(marker: Path | None = None) -> dict[str, str]:
    """What the served process needs: this checkout on its path, and the abort marker."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {"PYTHONPATH": path}
    if marker is not None:
        env["AGENTKIT_TEST_ABORT_MARKER"] = str(marker)
    return env


def stdio_params(target: str, marker: Path | None = None) -> mcp.StdioServerParameters:
    argv = serve_argv(target)
    return mcp.StdioServerParameters(
        command=argv[0], args=argv[1:], env=server_env(marker), cwd=str(ROOT)
    )


def http_server(target: str, marker: Path | None = None) -> HttpServerProcess:
    port = free_port()
    return HttpServerProcess(
        serve_argv(target, "--http", "--port", str(port)), port, env=server_env(marker)
    )


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Served:
    """The target served on one transport: what the SDK's ``Client`` connects to."""

    def __init__(self, transport: str, target: str, marker: Path | None = None) -> None:
        self.process = http_server(target, marker) if transport == "http" else None
        self.target: Any = self.process.url if self.process else stdio_params(target, marker)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "aborted"


# --- the SDK's own client -------------------------------------------------------------------


def test_an_agent_answers_a_task_with_progress_on_the_way(transport: str) -> None:
    served = Served(transport, RESEARCH)

    async def client() -> tuple[list[Any], Any, list[str]]:
        async with mcp.Client(served.target) as session:
            tools = (await session.list_tools()).tools
            progress: list[str] = []

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                progress.append(message or "")

            result = await session.call_tool(
                "run_agent", {"task": "What is the answer?"}, progress_callback=on_progress
            )
            return tools, result, progress

    try:
        tools, result, progress = asyncio.run(client())
    finally:
        served.stop()
    assert [t.name for t in tools] == ["run_agent"]
    assert tools[0].input_schema["required"] == ["task"]
    assert not result.is_error and result.content[0].text == "The answer is 42."
    assert progress == PROGRESS


def test_plain_tools_are_served_with_their_schemas_and_checked_arguments(transport: str) -> None:
    served = Served(transport, TOOLBOX)

    async def client() -> tuple[list[Any], Any, Any]:
        async with mcp.Client(served.target) as session:
            tools = (await session.list_tools()).tools
            good = await session.call_tool("lookup", {"key": "answer"})
            bad = await session.call_tool("lookup", {"key": 7, "extra": True})
            return tools, good, bad

    try:
        tools, good, bad = asyncio.run(client())
    finally:
        served.stop()
    by_name = {t.name: t for t in tools}
    assert set(by_name) == {"lookup", "stuck", "wait_aborted"}
    assert by_name["lookup"].input_schema["properties"]["key"]["type"] == "string"
    assert good.content[0].text == "42" and not good.is_error
    assert bad.is_error and "Validation failed" in bad.content[0].text


@pytest.mark.parametrize(
    "transport, mode", [("stdio", "auto"), ("http", "auto"), ("http", "legacy")]
)
def test_a_client_that_cancels_aborts_the_run(transport: str, mode: str) -> None:
    # 2026-era HTTP cancels by closing the request's response stream; the handshake era (and
    # stdio) by a notifications/cancelled message.
    served = Served(transport, TOOLBOX)

    async def client() -> str:
        async with mcp.Client(served.target, mode=mode) as session:
            blocked = asyncio.Event()

            async def on_progress(value: float, total: float | None, message: str | None) -> None:
                if message == "block: waiting":
                    blocked.set()

            call = asyncio.ensure_future(
                session.call_tool("stuck", {"task": "wait"}, progress_callback=on_progress)
            )
            await asyncio.wait_for(blocked.wait(), WAIT)
            call.cancel()  # the SDK sends notifications/cancelled for the request
            with pytest.raises(asyncio.CancelledError):
                await call
            answer = await session.call_tool("wait_aborted", {})
            return str(answer.content[0].text)

    try:
        assert asyncio.run(client()) == "aborted"
    finally:
        served.stop()


DISCONNECTING_CLIENT = """
import asyncio, json, sys
import mcp

async def main():
    target = json.loads(sys.argv[1])
    if isinstance(target, dict):
        target = mcp.StdioServerParameters(**target)
    async with mcp.Client(target) as session:
        async def on_progress(value, total, message):
            print(message, flush=True)
        await session.call_tool("stuck", {"task": "wait"}, progress_callback=on_progress)

asyncio.run(main())
"""


def kill_when_blocked(argv: list[str]) -> None:
    """Run a client process until the served run is blocked, then kill it (no goodbye)."""
    client = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert client.stdout is not None
    for line in client.stdout:
        if "block: waiting" in line:
            break
    client.kill()
    client.wait(WAIT)


def blocked_marker(marker: Path) -> Path:
    """The file the served ``block`` tool writes when it starts waiting."""
    return marker.with_name(marker.name + ".blocked")


def wait_for_file(path: Path) -> bool:
    """Whether ``path`` appears within WAIT seconds (the served process writes it)."""
    import time

    deadline = time.monotonic() + WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # another process writes it: there is nothing in this one to wait on
    return True


def test_a_client_that_goes_away_aborts_the_run(transport: str, marker: Path) -> None:
    served = Served(transport, TOOLBOX, marker)
    target = served.target if isinstance(served.target, str) else served.target.model_dump()
    try:
        kill_when_blocked([sys.executable, "-c", DISCONNECTING_CLIENT, json.dumps(target)])
        assert wait_for_file(marker), "the run went on after its client had gone"
    finally:
        served.stop()


# --- the MCP Inspector's command-line client (third party) -----------------------------------

INSPECTOR = npm_bin("mcp-inspector")
needs_inspector = pytest.mark.skipif(INSPECTOR is None, reason=npm_skip_reason("MCP Inspector"))


def inspector_argv(url: str | None, target: str, *method: str, marker: Path | None = None) -> list[str]:
    """The Inspector's command line: against ``url`` (HTTP), or launching ``target`` (stdio)."""
    assert INSPECTOR is not None
    if url is not None:
        return [INSPECTOR, "--cli", url, "--transport", "http", *method]
    env = [part for key, value in server_env(marker).items() for part in ("-e", f"{key}={value}")]
    return [INSPECTOR, "--cli", *env, *serve_argv(target), *method]


def run_inspector(argv: list[str]) -> Any:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=WAIT, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_inspector
def test_the_inspector_lists_and_calls_the_agent(transport: str) -> None:
    served = Served(transport, RESEARCH)
    url = served.process.url if served.process else None
    try:
        listed = run_inspector(inspector_argv(url, RESEARCH, "--method", "tools/list"))
        assert [t["name"] for t in listed["tools"]] == ["run_agent"]
        call = ["--method", "tools/call", "--tool-name", "run_agent"]
        called = run_inspector(
            inspector_argv(url, RESEARCH, *call, "--tool-arg", "task=What is the answer?")
        )
        assert called["content"][0]["text"] == "The answer is 42." and not called["isError"]
    finally:
        served.stop()


def kill_clients(group: int) -> None:
    """SIGKILL the Node processes of ``group``: the Inspector, not the agentkit server it ran
    over stdio in the same group (which must see its client go, not be killed with it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        process_group = int(stat.rsplit(")", 1)[1].split()[2])
        program = Path(command.split(b"\0")[0].decode(errors="replace")).name
        if process_group == group and program == "node":
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@needs_inspector
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_the_inspector_going_away_mid_run_aborts_the_run(transport: str, marker: Path) -> None:
    served = Served(transport, TOOLBOX, marker)
    url = served.process.url if served.process else None
    call = ["--method", "tools/call", "--tool-name", "stuck", "--tool-arg", "task=wait"]
    try:
        argv = inspector_argv(url, TOOLBOX, *call, marker=marker)
        # Its own process group: the Inspector's launcher runs the client as a child process.
        inspector = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )
        try:
            # The Inspector prints nothing before the call ends: the served process writes a
            # file when the run is blocked. Then the client is killed, without a goodbye.
            assert wait_for_file(blocked_marker(marker)), "the run never started"
        finally:
            kill_clients(inspector.pid)
            inspector.wait(WAIT)
        assert wait_for_file(marker), "the run went on after its client had gone"
    finally:
        served.stop()


# --- requests the SDK's stdio reader cannot read ---------------------------------------------


class RawStdio:
    """A raw JSON-RPC client of a served process over stdio: lines in, lines out, no SDK."""

    def __init__(self, target: str) -> None:
        self.process = subprocess.Popen(
            serve_argv(target), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env={**os.environ, **server_env()}, cwd=str(ROOT),
        )  # fmt: skip
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reader = threading.Thread(target=self._read, name="raw-mcp-reader", daemon=True)
        self.reader.start()
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "raw", "version": "1"}}})  # fmt: skip
        assert "result" in self.receive()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, message: Any) -> None:
        assert self.process.stdin is not None
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        """The next message the server writes (its answer: a hang fails after WAIT)."""
        try:
            answer: dict[str, Any] = json.loads(self.lines.get(timeout=WAIT))
        except queue.Empty:
            raise AssertionError("the server left a request unanswered") from None
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()  # the client leaves: the server ends
        assert self.process.wait(WAIT) == 0
        self.reader.join(WAIT)


UNREADABLE = [
    ({"jsonrpc": "2.0", "id": 1}, 1, -32600),  # an id, no method
    ({"jsonrpc": "2.0", "id": 2, "method": 5}, 2, -32600),  # a numeric method
    ({"jsonrpc": "2.0", "id": "three", "method": "tools/call",
      "params": ["lookup", {"key": "answer"}]}, "three", -32602),  # array params  # fmt: skip
    ({"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": 5}, 4, -32602),
    ({"id": 5, "method": "tools/list"}, 5, -32600),  # no "jsonrpc"
    ({"jsonrpc": "1.0", "id": 6, "method": "ping"}, 6, -32600),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None, -32600),  # MCP ids are never null
    ({"jsonrpc": "2.0", "id": 7.5, "method": "ping"}, None, -32600),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, -32600),
    ([{"jsonrpc": "2.0", "id": 8, "method": "ping"}], None, -32600),  # a batch
    (b"not json", None, -32700),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "pi\xff\xfeng"', None, -32700),  # cut short
    ({"jsonrpc": "2.0"}, None, -32600),
]


def test_every_request_over_stdio_gets_an_answer_from_a_raw_client() -> None:
    client = RawStdio(TOOLBOX)
    try:
        for request, request_id, code in UNREADABLE:
            client.send(request)
            answer = client.receive()
            assert (answer.get("id", "missing"), answer["error"]["code"]) == (request_id, code), (
                request
            )
        # What gets no answer by rule gets none: a malformed notification, a client's response.
        client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": []})
        client.send({"jsonrpc": "2.0", "id": 10, "result": 5})
        client.send(b"")
        # ...and the server still serves, in order.
        client.send({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
                     "params": {"name": "lookup", "arguments": {"key": "answer"}}})  # fmt: skip
        answer = client.receive()
        assert answer["id"] == 11 and answer["result"]["content"][0]["text"] == "42"
    finally:
        client.close()


def test_a_tool_that_reads_stdin_reads_end_of_file_not_the_clients_messages() -> None:
    client = RawStdio("tests.mcp_servers.served:stdin_reader")
    try:
        client.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "read_stdin", "arguments": {}}})  # fmt: skip
        client.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})  # not the tool's to read
        answers = {a["id"]: a for a in (client.receive(), client.receive())}
        assert answers[1]["result"]["content"][0]["text"] == "''"
        assert answers[2]["result"] == {}
    finally:
        client.close()


class _Mangling:
    """A transport for the SDK's ``Client``: its stdio transport, with each ``tools/call``
    request rewritten by ``mangle`` on its way out (a client with a bug, say); the SDK's
    client then waits for an answer on that request's id."""

    def __init__(self, mangle: Callable[[Any], Any]) -> None:
        self.mangle = mangle
        self.inner: Any = None

    async def __aenter__(self) -> Any:
        from mcp.client.stdio import stdio_client

        self.inner = stdio_client(stdio_params(TOOLBOX))
        read, write = await self.inner.__aenter__()
        return read, _MangledWrites(write, self.mangle)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)


class _MangledWrites:
    def __init__(self, inner: Any, mangle: Callable[[Any], Any]) -> None:
        self.inner, self.mangle = inner, mangle

    async def send(self, item: Any) -> None:
        message = item.message
        if getattr(message, "method", None) == "tools/call":
            item.message = self.mangle(message)
        await self.inner.send(item)

    async def __aenter__(self) -> _MangledWrites:
        await self.inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic: the mangled fields' types
@pytest.mark.parametrize(
    "mangle, code",
    [
        (lambda m: type(m).model_construct(jsonrpc="2.0", id=m.id, params=m.params), -32600),
        (lambda m: type(m).model_construct(jsonrpc="2.0", id=m.id, method=5), -32600),
        (lambda m: type(m).model_construct(jsonrpc="2.0", id=m.id, method=m.method,
                                           params=list(m.params.items())), -32602),  # fmt: skip
    ],
    ids=["no method", "numeric method", "array params"],
)
def test_the_sdk_client_gets_an_error_for_a_request_the_server_cannot_read(
    mangle: Callable[[Any], Any], code: int
) -> None:
    async def client() -> Any:
        async with mcp.Client(_Mangling(mangle)) as session:
            with pytest.raises(mcp.MCPError) as failed:
                with anyio.fail_after(WAIT):  # never reached when the server answers
                    await session.call_tool("lookup", {"key": "answer"})
            assert (await session.list_tools()).tools  # the connection carries on
            return failed.value

    error = asyncio.run(client())
    assert error.error.code == code


# --- the command's own checks ----------------------------------------------------------------


def test_a_target_may_be_a_file_path() -> None:
    path = Path(__file__).parents[1] / "mcp_servers" / "served.py"
    tools = load_tools(f"{path}:toolbox")
    assert [t.name for t in tools] == ["lookup", "stuck", "wait_aborted"]
    [agent] = load_tools(f"{path}:research_agent", tool_name="research")
    assert agent.name == "research" and agent.parameters["required"] == ["task"]


def test_a_factory_that_gives_neither_agent_nor_tools_is_a_clear_error() -> None:
    with pytest.raises(CliError, match="must be a function returning an Agent"):
        load_tools("tests.mcp_servers.served:aborted")
    with pytest.raises(CliError, match="cannot import"):
        load_tools("tests.no_such_module:factory")
    with pytest.raises(CliError, match="module:factory"):
        load_tools("no_colon_here")


def test_the_command_reports_a_bad_target_and_exits_2() -> None:
    import io

    from agentkit import cli

    err = io.StringIO()
    code = cli.main(["mcp", "serve", "tests.no_such_module:factory"], stdout=io.StringIO(), stderr=err)
    assert code == 2 and "agentkit: cannot import tests.no_such_module" in err.getvalue()
