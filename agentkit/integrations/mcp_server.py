"""agentkit as an MCP *server*: an agent, and any agentkit tools, offered to MCP clients (Claude
Desktop, IDEs, the MCP Inspector, other agents) over stdio or streamable HTTP, on the official
``mcp`` SDK (install the ``mcp`` extra).

    from agentkit.integrations.mcp_server import agent_tool, serve

    serve([agent_tool(make_agent, name="research")], transport="stdio")

- :func:`agent_tool` wraps an agent factory as one tool taking a ``task``: each call runs a
  fresh agent from the factory and answers with the run's final text. While it runs, each turn
  and tool call is reported as an MCP progress notification; a client that cancels the request
  (``notifications/cancelled``) or goes away aborts the run.
- :func:`build_server` turns a list of :class:`~agentkit.AgentTool` objects into the SDK's
  low-level ``Server``; :func:`serve` runs it. Every call runs on a thread of its own with an
  abort signal, as in an agent run: arguments are validated against the tool's schema, progress
  (``on_update``) becomes progress notifications, cancellation aborts the signal.
- From the command line: ``agentkit mcp serve module:factory [--http --port N]``.

The SDK is asyncio code; the tools are not. A call's tool runs on a thread; what it reports
crosses to the event loop through one queue, so the progress notifications go out in order and
all before the result.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agentkit._extras import needs_extra
from agentkit.abort import ABORTED_TEXT, AbortController, AbortSignal
from agentkit.errors import AgentError, MCPServerError
from agentkit.tools import OnUpdate, error_result, validate_tool_arguments
from agentkit.types import AgentTool, AgentToolResult, ImageContent, TextContent, ToolCall

if TYPE_CHECKING:
    from agentkit import Agent

logger = logging.getLogger("agentkit.mcp")

ABORT_WAIT = 30.0
"""Seconds a cancelled call waits for its tool to wind down before the handler lets go."""

AGENT_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the agent should do."}},
    "required": ["task"],
}


def agent_tool(
    factory: Callable[[], Agent],
    *,
    name: str = "run_agent",
    description: str = "Give an agent a task; it works on it with its tools and answers.",
) -> AgentTool:
    """A tool that runs an agent on a ``task`` and returns the run's final text.

    ``factory()`` makes the agent of each call (so concurrent calls and different clients
    never share a transcript); the agent is closed when its call ends. Each turn, each of the
    agent's tool calls and their own progress is reported through ``on_update`` (MCP progress
    notifications, when served); an
    abort of the call's signal aborts the run. A run that fails gives an error result with its
    failure text.
    """

    def execute(
        tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: OnUpdate
    ) -> AgentToolResult:
        agent = factory()
        steps = itertools.count(1)

        def report(event: Any) -> None:
            if event.type == "turn_start":
                text = "thinking"
            elif event.type == "tool_execution_start":
                text = f"running {event.tool_name}"
            elif event.type == "tool_execution_update":
                partial = event.partial_result
                said = partial.text if isinstance(partial, AgentToolResult) else ""
                text = f"{event.tool_name}: {said}" if said else f"{event.tool_name} working"
            elif event.type == "tool_execution_end":
                text = f"{event.tool_name} {'failed' if event.is_error else 'done'}"
            else:
                return
            on_update(AgentToolResult(content=[TextContent(text=text)], details={"progress": next(steps)}))

        try:
            agent.subscribe(report)
            run = agent.start(params["task"])
            remove = signal.add_callback(run.abort)
            try:
                result = run.result()
            finally:
                remove()
        finally:
            agent.close()
        if result.stop_reason == "aborted" or signal.aborted:
            return error_result(f"{ABORTED_TEXT}: the agent's run was cancelled")
        if result.stop_reason == "error":
            return error_result(result.error_message or "the agent's run failed")
        return AgentToolResult(
            content=[TextContent(text=result.text)],
            details={"stop_reason": result.stop_reason},
        )

    return AgentTool(
        name=name,
        description=description,
        parameters=dict(AGENT_TASK_SCHEMA),
        execute=execute,
        label=name,
    )


def build_server(
    tools: Sequence[AgentTool], *, name: str = "agentkit", instructions: str | None = None
) -> Any:
    """The SDK's low-level ``mcp.server.Server`` offering ``tools`` (see the module)."""
    import mcp_types as types
    from mcp.server import Server

    by_name = {tool.name: tool for tool in tools}
    if len(by_name) != len(tools):
        raise MCPServerError("two tools to serve have the same name")
    listing = [
        types.Tool(
            name=tool.name,
            title=tool.label if tool.label != tool.name else None,
            description=tool.description,
            input_schema=tool.parameters,
        )
        for tool in tools
    ]
    call_ids = itertools.count(1)

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listing)

    async def call_tool(ctx: Any, params: Any) -> Any:
        tool = by_name.get(params.name)
        if tool is None:
            return _mcp_result(error_result(f"no tool named {params.name!r}"))
        call = ToolCall(id=f"mcp-{next(call_ids)}", name=tool.name, arguments=params.arguments or {})
        gone = _disconnect_event(ctx)
        return _mcp_result(await _run_call(tool, call, ctx.session.report_progress, gone))

    return Server(name, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool)


async def _run_call(
    tool: AgentTool,
    call: ToolCall,
    progress: Callable[[float, float | None, str | None], Any],
    gone: asyncio.Event | None = None,
) -> AgentToolResult:
    """Run ``call`` on a thread of its own; report its updates; abort it when cancelled, or
    when ``gone`` is set (the HTTP client dropped the request's connection)."""
    import anyio
    import anyio.to_thread

    loop = asyncio.get_running_loop()
    reports: asyncio.Queue[tuple[str, AgentToolResult]] = asyncio.Queue()
    controller = AbortController()
    sequence = itertools.count(1)

    def on_update(partial: AgentToolResult) -> None:
        loop.call_soon_threadsafe(reports.put_nowait, ("update", partial))

    def work() -> None:
        try:
            result = _execute(tool, call, controller.signal, on_update)
        except BaseException as exc:  # noqa: BLE001 - reported to the client as the result
            result = error_result(str(exc) or type(exc).__name__)
        loop.call_soon_threadsafe(reports.put_nowait, ("done", result))

    async def abort_when_gone(event: asyncio.Event) -> None:
        await event.wait()
        controller.abort()

    worker = threading.Thread(target=work, name=f"agentkit-mcp-call-{call.name}", daemon=True)
    worker.start()
    watcher = asyncio.ensure_future(abort_when_gone(gone)) if gone is not None else None
    try:
        while True:
            kind, value = await reports.get()
            if kind == "done":
                return value
            # MCP wants progress to grow: the count of updates so far, with the tool's text.
            await progress(float(next(sequence)), None, value.text or None)
    except BaseException:
        # Cancelled by the client (notifications/cancelled) or by its going away: abort the
        # tool and give it a bounded time to wind down, so no run outlives its request.
        controller.abort()
        with anyio.CancelScope(shield=True):  # the request is cancelled; this wait is not
            await anyio.to_thread.run_sync(worker.join, ABORT_WAIT)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()


DISCONNECTED = "agentkit.disconnected"
"""The ASGI scope key of the event :class:`_WatchDisconnects` sets when the client goes."""


class _WatchDisconnects:
    """ASGI middleware noting, in each HTTP request's scope, when its client disconnects.

    On a handshake-era streamable HTTP session the SDK keeps a call running when the client
    drops the request's response stream (the client may come back for the result); agentkit
    keeps no events to resume from, so the result could never be delivered: the run is
    aborted instead. (A 2026-era client's disconnect is its cancellation; the SDK ends that
    handler itself.)
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        gone = asyncio.Event()
        scope[DISCONNECTED] = gone

        async def watched_receive() -> Any:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()
            return message

        await self.app(scope, watched_receive, send)


def _disconnect_event(ctx: Any) -> asyncio.Event | None:
    """The disconnect event of the HTTP request a handler serves, if it came over HTTP."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    event = scope.get(DISCONNECTED) if isinstance(scope, dict) else None
    return event if isinstance(event, asyncio.Event) else None


def _execute(
    tool: AgentTool, call: ToolCall, signal: AbortSignal, on_update: OnUpdate
) -> AgentToolResult:
    try:
        arguments = validate_tool_arguments(tool, call)
    except AgentError as exc:
        return error_result(str(exc))
    result = tool.execute(call.id, arguments, signal, on_update)
    if not isinstance(result, AgentToolResult):
        return AgentToolResult(content=[TextContent(text=str(result))])
    return result


def _mcp_result(result: AgentToolResult) -> Any:
    import mcp_types as types

    content: list[Any] = []
    for block in result.content:
        if isinstance(block, TextContent):
            content.append(types.TextContent(type="text", text=block.text))
        elif isinstance(block, ImageContent):
            content.append(types.ImageContent(type="image", data=block.data, mime_type=block.mime_type))
    structured = result.structured_content if isinstance(result.structured_content, dict) else None
    return types.CallToolResult(
        content=content, structured_content=structured, is_error=result.is_error
    )


def serve(
    tools: Sequence[AgentTool],
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "agentkit",
    instructions: str | None = None,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Serve ``tools`` until the client leaves (stdio) or the process is stopped (HTTP).

    ``transport`` is ``"stdio"`` or ``"http"`` (streamable HTTP at ``http://host:port/mcp``,
    127.0.0.1 by default); ``on_listening(url)`` is called once the HTTP server listens.
    """
    try:
        import anyio
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MCPServerError(needs_extra("serving MCP (the MCP SDK)", "mcp")) from exc
    server = build_server(tools, name=name, instructions=instructions)
    if transport == "stdio":
        anyio.run(_serve_stdio, server)
    elif transport == "http":
        anyio.run(_serve_http, server, host, port, on_listening)
    else:
        raise MCPServerError(f"unknown MCP transport {transport!r} (use 'stdio' or 'http')")


async def _serve_stdio(server: Any) -> None:
    from mcp.server.stdio import stdio_server

    from ._mcp_stdio_server import AnsweringLines, wire_stdin

    # The SDK's transport drops a line it cannot read without answering it: each such request
    # is answered here (see _mcp_stdio_server), so no client waits on its id for ever.
    with wire_stdin() as lines:
        stdin = AnsweringLines(lines)
        async with stdio_server(stdin=stdin) as (read_stream, write_stream):  # type: ignore[arg-type]
            stdin.answer_with(write_stream)
            await server.run(read_stream, write_stream, server.create_initialization_options())


async def _serve_http(
    server: Any, host: str, port: int, on_listening: Callable[[str], None] | None
) -> None:
    import uvicorn

    app = _WatchDisconnects(server.streamable_http_app(host=host))
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    web = uvicorn.Server(config)

    async def announce() -> None:
        while not web.started:
            await asyncio.sleep(0.05)  # uvicorn offers no event for "listening"
        if on_listening is not None:
            bound = web.servers[0].sockets[0].getsockname()[1] if web.servers else port
            on_listening(f"http://{host}:{bound}/mcp")

    watcher = asyncio.ensure_future(announce())
    try:
        await web.serve()
    finally:
        watcher.cancel()


__all__ = ["agent_tool", "build_server", "serve"]
