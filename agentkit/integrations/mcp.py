"""MCP tools: an MCP server's tools as :class:`~agentkit.AgentTool` objects, over stdio or
streamable HTTP, on the official ``mcp`` SDK (install the ``mcp`` extra).

The SDK is asyncio-based while agentkit is not. Each :class:`MCPServer` therefore runs its
session on an asyncio event loop of a thread of its own (``agentkit-mcp-<name>``, see
:mod:`._mcp_connection`): tool calls made on agentkit's tool threads are handed to that loop
and waited for with the run's abort signal. User code stays plain sync code, a running event
loop in the calling thread (Jupyter, FastAPI) does not matter, and :meth:`MCPServer.close`
joins the thread, so none outlives it.

    with MCPServer.stdio("python", ["server.py"]) as server:
        server.attach(agent)        # its tools join the agent's, kept current; closes with it

A server that goes away fails its calls at once with the reason; :meth:`MCPServer.restart`
connects again (``auto_restart=True`` does it by itself for a stdio server that died).

This module is ``agentkit.integrations.mcp``; the SDK is the top-level package ``mcp``. Imports
here are absolute, so ``import mcp`` always means the SDK.
"""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from agentkit._extras import needs_extra
from agentkit.abort import ABORTED_TEXT, AbortSignal
from agentkit.errors import AgentError, MCPServerError
from agentkit.hooks import TurnContext, TurnUpdate
from agentkit.loop import AgentContext
from agentkit.tools import OnUpdate, RunContext, current_run_context, error_result
from agentkit.types import AgentTool, AgentToolResult

if TYPE_CHECKING:
    from agentkit import Agent

    from ._mcp_connection import Connection

logger = logging.getLogger("agentkit.mcp")

RunHeaders = Callable[[RunContext[Any]], Mapping[str, str]]
"""Per-run HTTP headers: given the tool call's :class:`~agentkit.RunContext` (its ``deps``),
the headers its request carries, e.g. ``{"Authorization": f"Bearer {ctx.deps.token}"}``."""


def _require_sdk() -> Any:
    try:
        import mcp
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MCPServerError(
            needs_extra("agentkit.integrations.mcp (the MCP SDK)", "mcp")
        ) from exc
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
    subprocess, joins the thread and takes its tools out of the agents it was attached to.
    :attr:`tools` is the current tool list; it follows the server's ``tools/list_changed``
    notifications. A call made while the run is aborted is cancelled on the server (MCP
    cancellation) and ends at once. A server that went away (exited, crashed, dropped the
    connection) fails its calls at once with the reason and :attr:`alive` turns false;
    :meth:`restart` connects again, and ``auto_restart`` does so by itself for a stdio server.
    ``protocol`` is the SDK's connect mode: ``"auto"`` (the 2026-era protocol when the server
    speaks it, else the initialize handshake) or ``"legacy"``.
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
        auto_restart: bool = False,
        run_headers: RunHeaders | None = None,
    ) -> None:
        self.name = name
        self.tool_prefix = tool_prefix
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.protocol = protocol
        self.auto_restart = auto_restart
        self.run_headers = run_headers
        self._target = target
        # Guards _connection, _retired, _tools, _listeners, _attached, _closed and the change
        # counters across the callers' threads and the connections' loop threads.
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._retired: list[Connection] = []  # replaced connections, joined on close
        self._tools: list[AgentTool] = []
        self._listeners: list[Callable[[list[AgentTool]], None]] = []
        self._attached: list[_Attachment] = []
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
        auto_restart: bool = False,
    ) -> MCPServer:
        """A server run as a subprocess speaking MCP on its stdin/stdout.

        With ``args`` omitted, ``command`` is split like a shell line (``"python server.py"``).
        ``auto_restart=True`` starts the server again when it exits or crashes after it had
        started (the calls in flight then fail; later calls go to the new process).
        """
        _require_sdk()
        from ._mcp_connection import StdioTarget

        if args is None:
            parts = shlex.split(command)
            if not parts:
                raise MCPServerError("MCP server command is empty")
            command, args = parts[0], parts[1:]
        return cls(
            StdioTarget(command, list(args), env, cwd),
            name=name or command.rsplit("/", 1)[-1],
            tool_prefix=tool_prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            protocol=protocol,
            auto_restart=auto_restart,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        auth: Any = None,
        run_headers: RunHeaders | None = None,
        name: str | None = None,
        tool_prefix: str = "",
        connect_timeout: float = 30.0,
        call_timeout: float | None = None,
        protocol: str = "auto",
    ) -> MCPServer:
        """A server reached over MCP's streamable HTTP transport at ``url``.

        ``headers`` go on every request (``{"Authorization": "Bearer ..."}``); ``auth`` is an
        ``httpx2.Auth`` such as the SDK's ``mcp.client.auth.OAuthClientProvider``;
        ``run_headers(ctx)`` gives the headers of each tool call from its run's
        :class:`~agentkit.RunContext`, so one agent can call the server as many users, each
        with a token in the run's ``deps``. Per-run headers go only on tool calls to ``url``
        itself; the connection's own requests (handshake, listing) carry ``headers``/``auth``.
        """
        _require_sdk()
        from ._mcp_connection import HttpTarget

        if not url.startswith(("http://", "https://")):
            raise MCPServerError(f"MCP server URL must start with http:// or https://: {url!r}")
        return cls(
            HttpTarget(url, headers, auth),
            name=name or _without_userinfo(url),
            tool_prefix=tool_prefix,
            connect_timeout=connect_timeout,
            call_timeout=call_timeout,
            protocol=protocol,
            run_headers=run_headers,
        )

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> MCPServer:
        """Connect and list the tools (again, if the server went away); raises
        :class:`MCPServerError` if that fails. A connected server is left as it is."""
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {self.name!r} is closed")
            current = self._connection
        if current is not None and (current.up or not current.ready.is_set()):
            self._await_connection(current)
            return self
        return self._connect()

    def restart(self) -> MCPServer:
        """Close the current session (stopping a stdio server) and connect again; the tools
        and the agents attached keep working on the new session. Raises
        :class:`MCPServerError` if the new session cannot start."""
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {self.name!r} is closed")
        return self._connect()

    def _connect(self) -> MCPServer:
        from ._mcp_connection import Connection

        connection = Connection(
            self,
            self._target,
            name=self.name,
            protocol=self.protocol,
            call_timeout=self.call_timeout,
        )
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {self.name!r} is closed")
            old, self._connection = self._connection, connection
            self._retire(old)
        if old is not None:
            old.close()
        connection.start()
        self._await_connection(connection)
        return self

    def _await_connection(self, connection: Connection) -> None:
        """Wait for ``connection`` to be up; past ``connect_timeout`` stop it at once."""
        if not connection.wait_ready(self.connect_timeout):
            connection.close(at_once=True)
            raise MCPServerError(
                f"MCP server {self.name!r} did not answer within {self.connect_timeout:g} s"
            )
        if not connection.up:
            reason = connection.failure or "it was closed while starting"
            connection.close()
            raise MCPServerError(f"MCP server {self.name!r} could not be started: {reason}")

    def _retire(self, old: Connection | None) -> None:
        """Keep ``old`` to join on close; forget the ones that have ended (hold the lock)."""
        self._retired = [c for c in self._retired if not c.ended.is_set()]
        if old is not None:
            self._retired.append(old)

    def close(self) -> None:
        """End the session (stopping a subprocess), join the loop thread and take this server's
        tools out of the agents it was attached to; idempotent."""
        with self._lock:
            self._closed = True
            connections = [*self._retired, *([self._connection] if self._connection else [])]
            self._retired = []
            attached, self._attached = self._attached, []
            self._settled_cond.notify_all()
        for connection in connections:
            connection.close()
        for attachment in attached:
            attachment.detach()

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
        if self._connection is None:
            self.start()
        with self._lock:
            return list(self._tools)

    @property
    def alive(self) -> bool:
        """Whether the session is up now: started, not closed, and its server has not gone
        away (a stdio server that exited; a connection that broke on a call)."""
        connection = self._connection
        return not self._closed and connection is not None and connection.up

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

        def settled() -> bool:
            connection = self._connection
            return (
                self._settled >= self._changes
                or self._closed
                or connection is None
                or connection.failure is not None
            )

        with self._settled_cond:
            return self._settled_cond.wait_for(settled, timeout)

    def attach(self, agent: Agent) -> Agent:
        """Give ``agent`` this server's tools and keep them current; close with the agent.

        The server's tools are added to ``agent.state.tools``. When the list changes (or the
        server restarts), the next run gets the new list, and an active run gets it at its next
        turn (through a ``prepare_next_turn`` that wraps any the agent already has).
        ``agent.close()`` closes the server; ``close()`` takes the tools out of the agent again,
        so a new server can be attached in its place. A tool name the agent already has from
        another tool raises :class:`MCPServerError` (give one server a ``tool_prefix``).
        """
        current = self.tools
        names = {t.name for t in current}
        clashes = sorted(
            t.name
            for t in agent.state.tools
            if t.name in names and not (isinstance(t, MCPTool) and t.server is self)
        )
        if clashes:
            stale = any(
                isinstance(t, MCPTool) and t.server is not None and not t.server.alive
                for t in agent.state.tools
                if t.name in names
            )
            hint = (
                "close() the server that went away first, or restart() it"
                if stale
                else "give the server a tool_prefix"
            )
            raise MCPServerError(
                f"MCP server {self.name!r} has tools the agent already has: "
                f"{', '.join(clashes)} ({hint})"
            )
        attachment = _Attachment(self, agent)
        with self._lock:
            if self._closed:
                raise MCPServerError(f"MCP server {self.name!r} is closed")
            self._attached.append(attachment)
        attachment.install()
        agent.add_close_callback(self.close)
        return agent

    # --- calls ---------------------------------------------------------------------------------

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        signal: AbortSignal | None = None,
        on_update: OnUpdate | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> AgentToolResult:
        """Call tool ``name`` (its server-side name) and wait, abortably, for its result.

        ``headers`` are extra HTTP headers for this call (by default ``run_headers`` of the
        running tool call's context, if set). Never raises for a failure of the call: a tool
        error, a dead server or an abort become an error result whose text says what happened.
        """
        if signal is not None and signal.aborted:
            return error_result(ABORTED_TEXT)
        with self._lock:
            connection, closed = self._connection, self._closed
        if closed:
            return error_result(f"MCP server {self.name!r} is closed")
        if connection is None:
            return error_result(f"MCP server {self.name!r} is not started")
        if not connection.ready.is_set():  # an automatic restart under way
            connection.wait_ready(self.connect_timeout, signal)
            if signal is not None and signal.aborted:
                return error_result(f"{ABORTED_TEXT}: MCP call {name} cancelled")
        if headers is None and self.run_headers is not None:
            try:
                headers = self._run_headers()
            except Exception as exc:  # the user's function: its failure is this call's
                return error_result(f"run_headers of MCP server {self.name!r} failed: {exc}")
        return connection.call(name, arguments, signal, on_update, headers)

    def _run_headers(self) -> Mapping[str, str] | None:
        if self.run_headers is None:
            return None
        try:
            context = current_run_context()
        except AgentError:  # a plain call_tool, outside any run
            return None
        return self.run_headers(context)

    # --- what the connections report (on their loop threads) ------------------------------------

    def _publish_tools(self, connection: Connection, specs: list[Any]) -> None:
        tools = [self._agent_tool(spec) for spec in specs]
        with self._lock:
            if connection is not self._connection or self._closed:
                return
            self._tools = tools
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(tools)
            except Exception:
                logger.exception("MCP server %r: a tools-changed listener raised", self.name)

    def _note_change(self) -> int:
        with self._lock:
            self._changes += 1
            return self._changes

    def _settle(self, target: int) -> None:
        with self._settled_cond:
            self._settled = max(self._settled, target)
            self._settled_cond.notify_all()

    def _connection_lost(self, connection: Connection, reason: str) -> None:
        """``connection``'s server went away: wake waiters; restart it if asked to."""
        with self._settled_cond:
            self._settled_cond.notify_all()
            restart = (
                self.auto_restart
                and not self._closed
                and connection is self._connection
                and connection.ready.is_set()
            )
        if not restart:
            return
        from ._mcp_connection import Connection

        logger.warning("MCP server %r: starting it again", self.name)
        fresh = Connection(
            self, self._target, name=self.name, protocol=self.protocol, call_timeout=self.call_timeout
        )
        with self._lock:
            if self._closed or connection is not self._connection:
                return
            self._connection = fresh
            self._retire(connection)
        fresh.start()  # its own thread; calls meanwhile wait for it (wait_ready)

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


def _without_userinfo(url: str) -> str:
    """``url`` without a ``user:password@`` part (a name shows up in every message)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


class _Attachment:
    """One agent a server is attached to: keeps the agent's tools in step with the server's,
    and undoes itself when the server closes."""

    def __init__(self, server: MCPServer, agent: Agent) -> None:
        self.server = server
        self.agent = agent
        self.previous = agent.prepare_next_turn
        self.unsubscribe: Callable[[], None] | None = None

    def swap(self, tools: list[AgentTool]) -> list[AgentTool]:
        """``tools`` with this server's tools (of any listing) replaced by its current ones (or
        by none once it is closed)."""
        server = self.server
        kept = [t for t in tools if not (isinstance(t, MCPTool) and t.server is server)]
        if server._closed:
            return kept
        with server._lock:
            return kept + list(server._tools)

    def install(self) -> None:
        self.agent.state.tools = self.swap(self.agent.state.tools)
        self.unsubscribe = self.server.on_tools_changed(self.refresh)
        self.agent.prepare_next_turn = self.prepare_next_turn

    def refresh(self, _tools: list[AgentTool]) -> None:
        self.agent.state.tools = self.swap(self.agent.state.tools)

    def detach(self) -> None:
        """The server closed: its tools leave the agent, and the hook steps aside if it can."""
        if self.unsubscribe is not None:
            self.unsubscribe()
        self.agent.state.tools = self.swap(self.agent.state.tools)
        if self.agent.prepare_next_turn == self.prepare_next_turn:
            self.agent.prepare_next_turn = self.previous

    def prepare_next_turn(self, turn: TurnContext) -> TurnUpdate | dict[str, Any] | None:
        previous = self.previous
        update = previous(turn) if previous is not None else None
        context = turn.context
        if isinstance(update, TurnUpdate) and update.context is not None:
            context = update.context
        elif isinstance(update, dict) and update.get("context") is not None:
            context = update["context"]
        self.server.tools_settled(self.server.connect_timeout)
        tools = self.swap(list(context.tools))
        if [id(t) for t in tools] == [id(t) for t in context.tools]:
            return update
        new_context = AgentContext(messages=context.messages, tools=tools)
        if update is None:
            return TurnUpdate(context=new_context)
        if isinstance(update, dict):
            return {**update, "context": new_context}
        return replace(update, context=new_context)


__all__ = ["MCPServer", "MCPServerError", "MCPTool", "RunHeaders"]
