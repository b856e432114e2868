"""MCP tools: an MCP server's tools as :class:`~agentkit.AgentTool` objects, over stdio or
streamable HTTP, on the official ``mcp`` SDK (install the ``mcp`` extra).

The SDK is asyncio-based while agentkit is not. Each :class:`MCPServer` therefore runs one
asyncio event loop on a thread of its own (``agentkit-mcp-<name>``): tool calls made on
agentkit's tool pool are handed to that loop and waited for with the run's abort signal. User
code stays plain sync code, a running event loop in the calling thread (Jupyter, FastAPI) does
not matter, and :meth:`MCPServer.close` joins the thread, so none outlives it.

    with MCPServer.stdio("python", ["server.py"]) as server:
        agent = Agent(model=..., tools=server.tools)
        server.attach(agent)        # follow tools/list_changed, close with the agent

This module is ``agentkit.integrations.mcp``; the SDK is the top-level package ``mcp``. Imports here are
absolute, so ``import mcp`` always means the SDK.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agentkit import (
    AbortSignal,
    AgentTool,
    AgentToolResult,
    ImageContent,
    TextContent,
)
from agentkit.abort import ABORTED_TEXT
from agentkit.errors import MCPServerError
from agentkit.hooks import TurnContext, TurnUpdate
from agentkit.loop import AgentContext
from agentkit.tools import OnUpdate, error_result

if TYPE_CHECKING:
    from agentkit import Agent

logger = logging.getLogger("agentkit.mcp")

def _require_sdk() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MCPServerError("agentkit.integrations.mcp needs the MCP SDK: pip install 'agentkit[mcp]'") from exc
    return mcp


@dataclass
class MCPTool(AgentTool):
    """An :class:`AgentTool` that calls tool ``remote_name`` on an MCP ``server``."""

    server: MCPServer | None = None
    remote_name: str = ""


class MCPServer:
    """One MCP server, connected on a private event-loop thread; its tools as ``AgentTool``s.

    Build one with :meth:`stdio` (a subprocess) or :meth:`http` (a streamable HTTP URL). It
    connects on :meth:`start` (or entering ``with``); :meth:`close` ends the session, stops a
    subprocess and joins the thread. :attr:`tools` is the current tool list; it follows the
    server's ``tools/list_changed`` notifications. A call made while the run is aborted is
    cancelled on the server (MCP cancellation) and ends at once; a server that crashed gives
    error results naming it. ``protocol`` is the SDK's connect mode: ``"auto"`` (the 2026-era
    protocol when the server speaks it, else the initialize handshake) or ``"legacy"``.
    """

    def __init__(
        self,
        target: Any,
        *,
        name: str,
        tool_prefix: str = "",
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
        protocol: str = "auto",
    ) -> None:
        self.name = name
        self.tool_prefix = tool_prefix
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.protocol = protocol
        self._target = target
        # Guards _tools, _listeners, _failure and the start/close state across threads.
        self._lock = threading.Lock()
        self._tools: list[AgentTool] = []
        self._listeners: list[Callable[[list[AgentTool]], None]] = []
        self._failure: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Any = None
        self._stop: asyncio.Event | None = None  # set on the loop thread to end the session
        self._main_task: asyncio.Task[None] | None = None  # holds the session open
        self._ready = threading.Event()  # the first listing is in, or the connection failed
        self._closed = False
        # Bumped each time a tools/list_changed notification starts a refresh; _settled
        # trails it and reaches it when the refresh is done (tools_settled waits on it).
        self._changes = 0
        self._settled = 0
        self._settled_cond = threading.Condition(self._lock)

    # --- construction --------------------------------------------------------------------------

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
        tool_prefix: str = "",
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
        protocol: str = "auto",
    ) -> MCPServer:
        """A server run as a subprocess speaking MCP on its stdin/stdout.

        With ``args`` omitted, ``command`` is split like a shell line (``"python server.py"``).
        """
        mcp = _require_sdk()
        if args is None:
            parts = shlex.split(command)
            if not parts:
                raise MCPServerError("MCP server command is empty")
            command, args = parts[0], parts[1:]
        params = mcp.StdioServerParameters(command=command, args=list(args), env=env, cwd=cwd)
        return cls(
            params,
            name=name or command.rsplit("/", 1)[-1],
            tool_prefix=tool_prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            protocol=protocol,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        name: str | None = None,
        tool_prefix: str = "",
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
        protocol: str = "auto",
    ) -> MCPServer:
        """A server reached over MCP's streamable HTTP transport at ``url``."""
        _require_sdk()
        if not url.startswith(("http://", "https://")):
            raise MCPServerError(f"MCP server URL must start with http:// or https://: {url!r}")
        return cls(
            url,
            name=name or url,
            tool_prefix=tool_prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            protocol=protocol,
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MCPServer:
        """Connect and list the tools; raises :class:`MCPServerError` if that fails."""
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {self.name!r} is closed")
            if self._thread is not None:
                return self
            self._thread = threading.Thread(
                target=self._run_loop, name=f"agentkit-mcp-{self.name}", daemon=True
            )
        self._thread.start()
        if not self._ready.wait(self.connect_timeout):
            self.close()
            raise MCPServerError(
                f"MCP server {self.name!r} did not answer within {self.connect_timeout:g} s"
            )
        failure = self._failure
        if failure is not None:
            self.close()
            raise MCPServerError(f"MCP server {self.name!r} could not be started: {failure}")
        return self

    def close(self) -> None:
        """End the session (stopping a subprocess) and join the loop thread; idempotent."""
        with self._lock:
            self._closed = True
            thread, loop, stop, main = self._thread, self._loop, self._stop, self._main_task
        if loop is not None and stop is not None:
            # A connected session ends gracefully; one still connecting (a server that never
            # answers the handshake) is cancelled, or the join below would wait for it forever.
            connected = self._ready.is_set()
            try:
                loop.call_soon_threadsafe(stop.set)
                if not connected and main is not None:
                    loop.call_soon_threadsafe(main.cancel)
            except RuntimeError:  # the loop already ended (the session failed)
                pass
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> MCPServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def tools(self) -> list[AgentTool]:
        """The server's current tools (a new list each time); starts the server if needed."""
        if self._thread is None:
            self.start()
        with self._lock:
            return list(self._tools)

    @property
    def alive(self) -> bool:
        """Whether the session is up (started, not closed, not failed)."""
        return self._ready.is_set() and self._failure is None and not self._closed

    def on_tools_changed(self, listener: Callable[[list[AgentTool]], None]) -> Callable[[], None]:
        """Call ``listener(tools)`` after each refresh of the tool list; returns an unsubscribe.

        It runs on the server's loop thread: keep it short and never block on a tool call.
        """
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def tools_settled(self, timeout: float | None = None) -> bool:
        """Wait until every tool-list change notified so far has been listed; return whether."""
        with self._settled_cond:
            return self._settled_cond.wait_for(
                lambda: self._settled >= self._changes or self._failure is not None, timeout
            )

    def attach(self, agent: Agent) -> Agent:
        """Give ``agent`` this server's tools and keep them current; close with the agent.

        The server's tools are added to ``agent.state.tools``. When the list changes, the next
        run gets the new list, and an active run gets it at its next turn (through a
        ``prepare_next_turn`` that wraps any the agent already has). ``agent.close()`` closes the
        server.
        """
        previous = agent.prepare_next_turn

        def swap(tools: list[AgentTool]) -> list[AgentTool]:
            """``tools`` with this server's tools (of any listing) replaced by its current ones."""
            current = self.tools
            return [t for t in tools if not (isinstance(t, MCPTool) and t.server is self)] + current

        agent.state.tools = swap(agent.state.tools)

        def refresh(_tools: list[AgentTool]) -> None:
            agent.state.tools = swap(agent.state.tools)

        def prepare_next_turn(turn: TurnContext) -> TurnUpdate | dict[str, Any] | None:
            update = previous(turn) if previous is not None else None
            context = turn.context
            if isinstance(update, TurnUpdate) and update.context is not None:
                context = update.context
            elif isinstance(update, dict) and update.get("context") is not None:
                context = update["context"]
            self.tools_settled(self.connect_timeout)
            tools = swap(list(context.tools))
            if [id(t) for t in tools] == [id(t) for t in context.tools]:
                return update
            new_context = AgentContext(messages=context.messages, tools=tools)
            if update is None:
                return TurnUpdate(context=new_context)
            if isinstance(update, dict):
                return {**update, "context": new_context}
            return replace(update, context=new_context)

        self.on_tools_changed(refresh)
        agent.prepare_next_turn = prepare_next_turn
        agent.add_close_callback(self.close)
        return agent

    # --- calls ---------------------------------------------------------------------------------

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        signal: AbortSignal | None = None,
        on_update: OnUpdate | None = None,
    ) -> AgentToolResult:
        """Call tool ``name`` (its server-side name) and wait, abortably, for its result.

        Never raises for a failure of the call: a tool error, a dead server or an abort become
        an error result whose text says what happened.
        """
        loop = self._loop
        if self._failure is not None or loop is None or self._closed:
            return error_result(self._dead_text())
        if signal is not None and signal.aborted:
            return error_result(ABORTED_TEXT)
        future = asyncio.run_coroutine_threadsafe(self._call(name, arguments, on_update), loop)

        # Cancelling the concurrent future cancels the task on the loop, which makes the SDK
        # send notifications/cancelled for the request.
        def cancel() -> None:
            future.cancel()

        remove = signal.add_callback(cancel) if signal is not None else None
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if signal is not None and signal.aborted:
                return error_result(f"{ABORTED_TEXT}: MCP call {name} cancelled")
            return error_result(self._dead_text())
        except Exception as exc:
            return error_result(self._error_text(name, exc))
        finally:
            if remove is not None:
                remove()

    async def _call(
        self, name: str, arguments: dict[str, Any], on_update: OnUpdate | None
    ) -> AgentToolResult:
        client = self._client
        if client is None:
            return error_result(self._dead_text())

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            if on_update is None:
                return
            text = f"{progress:g}" + (f"/{total:g}" if total else "")
            if message:
                text += f" {message}"
            on_update(
                AgentToolResult(content=[TextContent(text=text)], details={"progress": progress})
            )

        result = await client.call_tool(
            name,
            arguments,
            read_timeout_seconds=self.call_timeout,
            progress_callback=progress,
        )
        return _convert_result(result)

    def _dead_text(self) -> str:
        if self._closed:
            return f"MCP server {self.name!r} is closed"
        if self._failure is not None:
            return f"MCP server {self.name!r} is not running: {self._failure}"
        return f"MCP server {self.name!r} is not connected"

    def _error_text(self, name: str, exc: BaseException) -> str:
        text = str(exc) or type(exc).__name__
        if self._closed:
            return f"MCP server {self.name!r} was closed during {name}"
        if "Connection closed" in text:
            return (
                f"MCP server {self.name!r} closed the connection during {name} "
                "(did the server exit or crash?)"
            )
        return f"MCP tool {name} on server {self.name!r} failed: {text}"

    # --- the loop thread -----------------------------------------------------------------------

    def _run_loop(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._main(loop))
            # Calls still in flight when the session ended: cancel them so their callers wake.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            with self._lock:
                self._loop = None
            self._ready.set()
            with self._settled_cond:
                self._settled_cond.notify_all()
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        mcp = _require_sdk()
        stop = asyncio.Event()
        with self._lock:
            self._loop, self._stop = loop, stop
            self._main_task = asyncio.current_task()
            if self._closed:
                return
        try:
            async with mcp.Client(
                self._target, mode=self.protocol, message_handler=self._on_message
            ) as client:
                self._client = client
                await self._refresh(client)
                watcher = None
                if _is_modern(client):
                    watcher = asyncio.ensure_future(self._listen(client))
                self._ready.set()
                await stop.wait()
                if watcher is not None:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
        except BaseException as exc:  # noqa: BLE001 - any failure ends the session, reported
            self._failure = _describe(exc)
            if self._ready.is_set():
                logger.warning("MCP server %r failed: %s", self.name, self._failure)
        finally:
            self._client = None

    async def _on_message(self, message: Any) -> None:
        mcp_types = _require_sdk().types
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._note_change()
            client = self._client
            if client is not None:
                await self._refresh(client, settles=True)
        elif isinstance(message, Exception):
            logger.debug("MCP server %r transport error: %s", self.name, message)

    async def _listen(self, client: Any) -> None:
        """Follow tool-list changes on a 2026-era connection (``subscriptions/listen``)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._note_change()
                    await self._refresh(client, settles=True)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.info("MCP server %r: tool-list subscription ended: %s", self.name, exc)

    def _note_change(self) -> None:
        with self._lock:
            self._changes += 1

    async def _refresh(self, client: Any, settles: bool = False) -> None:
        target = self._changes
        try:
            listed: list[Any] = []
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            tools = [self._agent_tool(t) for t in listed]
            with self._lock:
                self._tools = tools
                listeners = list(self._listeners)
            for listener in listeners:
                try:
                    listener(tools)
                except Exception:
                    logger.exception("MCP server %r: a tools-changed listener raised", self.name)
        finally:
            if settles:
                with self._settled_cond:
                    self._settled = max(self._settled, target)
                    self._settled_cond.notify_all()

    def _agent_tool(self, spec: Any) -> AgentTool:
        remote = spec.name
        schema = spec.input_schema or {"type": "object", "properties": {}}

        def execute(
            tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: OnUpdate
        ) -> AgentToolResult:
            return self.call_tool(remote, params, signal, on_update)

        return MCPTool(
            name=f"{self.tool_prefix}{remote}",
            description=spec.description or "",
            parameters=dict(schema),
            execute=execute,
            label=spec.title or remote,
            server=self,
            remote_name=remote,
        )


def _is_modern(client: Any) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


def _describe(exc: BaseException) -> str:
    """A one-line reason for a failure, looking inside exception groups."""
    while getattr(exc, "exceptions", None):  # an exception group (no builtin before 3.11)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return str(exc) or type(exc).__name__


def _convert_result(result: Any) -> AgentToolResult:
    """An MCP ``CallToolResult`` as an :class:`AgentToolResult`: text and images as content,
    anything else (audio, resources) as a text description; structured content kept."""
    content: list[TextContent | ImageContent] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            content.append(TextContent(text=block.text))
        elif kind == "image":
            content.append(ImageContent(data=block.data, mime_type=block.mime_type))
        elif kind == "resource_link":
            content.append(TextContent(text=f"[resource {block.uri}] {block.name}"))
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            content.append(
                TextContent(text=text if text is not None else f"[resource {resource.uri}]")
            )
        else:
            content.append(TextContent(text=json.dumps(block.model_dump(mode="json"))))
    structured = result.structured_content
    if not content and structured is not None:
        content.append(TextContent(text=json.dumps(structured)))
    return AgentToolResult(
        content=content,
        details={"mcp": True},
        structured_content=structured,
        is_error=bool(result.is_error),
    )


__all__ = ["MCPServer", "MCPServerError", "MCPTool"]
