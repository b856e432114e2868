"""One MCP session of an :class:`~agentkit.integrations.mcp.MCPServer`, on an asyncio event
loop of its own thread.

The SDK is asyncio code and agentkit is not: a :class:`Connection` runs the SDK's ``Client`` on a
private loop (thread ``agentkit-mcp-<name>``); tool calls from agentkit's tool threads are handed
to that loop and waited for with the run's abort signal. A restart is a new ``Connection``; the
server object, its tools and the agents it is attached to stay the same.

A connection ends for one of three reasons, each reported once as :attr:`Connection.failure`
(``None`` after a plain close): it could not start, its server went away (a stdio server's exit,
noticed by the transport; a connection error on a call), or it was closed. Calls in flight when
it ends fail at once with that reason; so does every later call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from agentkit.abort import ABORTED_TEXT, AbortSignal
from agentkit.tools import OnUpdate, error_result
from agentkit.types import AgentToolResult, ImageContent, TextContent

from ._mcp_stdio import StdioProcess, stdio_transport

logger = logging.getLogger("agentkit.mcp")

SHUTDOWN_GRACE = 2.0
"""Seconds a stdio server gets to leave by itself once its stdin closes (MCP's shutdown)."""

CLOSE_GRACE = 5.0
"""Seconds a graceful close may take (an HTTP session's DELETE) before it is cancelled."""

# The extra HTTP headers of the tool call running in this asyncio task (per-run credentials).
# The SDK sends each message in the context of the task that sent it, so the request hook of
# the HTTP client sees the value of the call that made the request.
call_headers: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "agentkit_mcp_call_headers", default=None
)


class Owner(Protocol):
    """What a connection reports to its :class:`MCPServer` (all called on the loop thread)."""

    def _publish_tools(self, connection: Connection, specs: list[Any]) -> None: ...

    def _note_change(self) -> int: ...

    def _settle(self, target: int) -> None: ...

    def _connection_lost(self, connection: Connection, reason: str) -> None: ...


class StdioTarget:
    """How to launch a stdio server."""

    def __init__(
        self, command: str, args: list[str], env: dict[str, str] | None, cwd: str | None
    ) -> None:
        self.command, self.args, self.env, self.cwd = command, args, env, cwd


class HttpTarget:
    """How to reach a streamable HTTP server: its URL, fixed headers and an ``httpx2.Auth``."""

    def __init__(self, url: str, headers: Mapping[str, str] | None, auth: Any) -> None:
        self.url, self.headers, self.auth = url, dict(headers or {}), auth


class Connection:
    """One session with an MCP server, held open on a private event-loop thread."""

    def __init__(
        self,
        owner: Owner,
        target: StdioTarget | HttpTarget | Any,
        *,
        name: str,
        protocol: str,
        call_timeout: float | None,
    ) -> None:
        self.owner = owner
        self.target = target
        self.name = name
        self.protocol = protocol
        self.call_timeout = call_timeout
        # Guards failure, _closing and the loop handles, which the loop thread publishes.
        self._lock = threading.Lock()
        self.failure: str | None = None
        self._closing = False
        self.ready = threading.Event()  # the first listing is in, or the connection ended
        self._ready_waiters: list[Callable[[], None]] = []  # woken with ready (wait_ready)
        self.ended = threading.Event()  # the loop thread is done
        self.grace = SHUTDOWN_GRACE  # read by the stdio transport when it stops the server
        self.process = StdioProcess()
        self.http_refusal: int | None = None  # the last 401/403 the HTTP server answered
        self.thread = threading.Thread(
            target=self._run_loop, name=f"agentkit-mcp-{name}", daemon=True
        )
        self.loop: asyncio.AbstractEventLoop | None = None
        self.client: Any = None
        self._stop: asyncio.Event | None = None  # set on the loop thread to end the session
        self._main_task: asyncio.Task[None] | None = None

    # --- state ---------------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the session is connected and has not ended or begun to end."""
        with self._lock:
            return self.ready.is_set() and self.failure is None and not self._closing

    def fail(self, reason: str) -> bool:
        """Record why the session ended (the first reason wins) and end it; return whether this
        was the first reason. Thread-safe."""
        with self._lock:
            if self.failure is not None or self._closing:
                return False
            self.failure = reason
            was_ready = self.ready.is_set()
        self._request_stop()
        if was_ready:
            logger.warning("MCP server %r went away: %s", self.name, reason)
        return True

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def wait_ready(self, timeout: float | None, signal: AbortSignal | None = None) -> bool:
        """Wait until connected or ended; an abort of ``signal`` ends the wait early."""
        if signal is None:
            return self.ready.wait(timeout)
        woken = threading.Event()
        with self._lock:
            if self.ready.is_set():
                return True
            self._ready_waiters.append(woken.set)
        remove = signal.add_callback(woken.set)
        try:
            woken.wait(timeout)
            return self.ready.is_set()
        finally:
            remove()
            with self._lock:
                if woken.set in self._ready_waiters:
                    self._ready_waiters.remove(woken.set)

    def _mark_ready(self) -> None:
        with self._lock:
            self.ready.set()
            waiters, self._ready_waiters = self._ready_waiters, []
        for wake in waiters:
            wake()

    def close(self, *, at_once: bool = False) -> None:
        """End the session and join the thread. ``at_once`` skips the server's shutdown grace
        (a start-up that ran out of time must not overrun it)."""
        with self._lock:
            self._closing = True
            if at_once:
                self.grace = 0.0
        connected = self.ready.is_set()
        self._request_stop(cancel=at_once or not connected)
        if self.thread is threading.current_thread() or not self.thread.is_alive():
            return
        if not self.thread.ident:
            return
        if not self.ended.wait(CLOSE_GRACE):
            # A graceful end that hangs (an HTTP server that does not answer the DELETE).
            self.grace = 0.0
            self._request_stop(cancel=True)
        self.thread.join()

    def _request_stop(self, cancel: bool = False) -> None:
        with self._lock:
            loop, stop, main = self.loop, self._stop, self._main_task
        if loop is None or stop is None:
            return
        try:
            loop.call_soon_threadsafe(stop.set)
            if cancel and main is not None:
                loop.call_soon_threadsafe(main.cancel)
        except RuntimeError:  # the loop already ended
            pass

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
                self.loop = None
                if self.failure is None and not self._closing:
                    self.failure = "the session ended"
            self._mark_ready()
            self.ended.set()
            loop.close()

    async def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        import mcp

        stop = asyncio.Event()
        with self._lock:
            self.loop, self._stop = loop, stop
            self._main_task = asyncio.current_task()
            if self._closing:
                return
        try:
            async with mcp.Client(
                self._transport(), mode=self.protocol, message_handler=self._on_message
            ) as client:
                self.client = client
                await self._refresh(client)
                watcher = None
                if _is_modern(client):
                    watcher = asyncio.ensure_future(self._listen(client))
                self._mark_ready()
                await stop.wait()
                if watcher is not None:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
        except BaseException as exc:  # noqa: BLE001 - any failure ends the session, reported
            with self._lock:
                if self.failure is None and not self._closing:
                    self.failure = _describe(exc)
                    if isinstance(self.target, HttpTarget) and _connection_error(exc):
                        self.failure = f"cannot reach the server: {self.failure}"
                    if self.http_refusal is not None:
                        self.failure = (
                            f"HTTP {self.http_refusal}: the server refused the credentials (or "
                            "their absence); see MCPServer.http(url, headers=..., auth=...)"
                        )
                    if self.ready.is_set():
                        logger.warning("MCP server %r failed: %s", self.name, self.failure)
        finally:
            self.client = None

    def _transport(self) -> Any:
        target = self.target
        if isinstance(target, StdioTarget):
            return stdio_transport(
                target.command,
                target.args,
                env=target.env,
                cwd=target.cwd,
                name=self.name,
                on_exit=self._exited,
                grace=lambda: self.grace,
                report=self.process,
            )
        if isinstance(target, HttpTarget):
            return _http_transport(target, self._refused)
        return target  # an SDK transport given by the caller

    def _refused(self, status: int) -> None:
        """The HTTP server answered 401 or 403 (called on the loop)."""
        self.http_refusal = status

    def _exited(self, reason: str) -> None:
        """The stdio server's stdout ended: it exited or crashed (called on the loop)."""
        if self.fail(reason):
            self.owner._connection_lost(self, reason)

    async def _on_message(self, message: Any) -> None:
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification):
            target = self.owner._note_change()
            client = self.client
            try:
                if client is not None:
                    await self._refresh(client)
            except Exception as exc:  # a listing the session's end cut short: the end says why
                logger.log(
                    logging.DEBUG if self.failure or self._closing else logging.WARNING,
                    "MCP server %r: the tool list could not be refreshed: %s",
                    self.name,
                    _describe(exc),
                )
            finally:
                self.owner._settle(target)
        elif isinstance(message, Exception):
            logger.debug("MCP server %r transport error: %s", self.name, message)

    async def _listen(self, client: Any) -> None:
        """Follow tool-list changes on a 2026-era connection (``subscriptions/listen``)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    target = self.owner._note_change()
                    try:
                        await self._refresh(client)
                    finally:
                        self.owner._settle(target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.info("MCP server %r: tool-list subscription ended: %s", self.name, exc)

    async def _refresh(self, client: Any) -> None:
        listed: list[Any] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.owner._publish_tools(self, listed)

    # --- calls ---------------------------------------------------------------------------------

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        signal: AbortSignal | None,
        on_update: OnUpdate | None,
        headers: Mapping[str, str] | None,
    ) -> AgentToolResult:
        """Call tool ``name`` and wait, abortably; never raises (failures are error results)."""
        loop = self.loop
        if loop is None or not self.up:
            return error_result(self.dead_text())
        try:
            future = asyncio.run_coroutine_threadsafe(
                self._call(name, arguments, on_update, headers), loop
            )
        except RuntimeError:  # the loop closed between the check and the hand-over
            return error_result(self.dead_text())

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
            return error_result(self.dead_text(during=name))
        except Exception as exc:
            return error_result(self._error_text(name, exc))
        finally:
            if remove is not None:
                remove()

    async def _call(
        self,
        name: str,
        arguments: dict[str, Any],
        on_update: OnUpdate | None,
        headers: Mapping[str, str] | None,
    ) -> AgentToolResult:
        client = self.client
        if client is None:
            return error_result(self.dead_text())
        call_headers.set(headers)

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
            name, arguments, read_timeout_seconds=self.call_timeout, progress_callback=progress
        )
        return convert_result(result)

    def dead_text(self, during: str | None = None) -> str:
        """Why calls fail now: the session's end, said once."""
        with self._lock:
            failure, closing = self.failure, self._closing
        where = f" during {during}" if during else ""
        if failure is not None:
            return f"MCP server {self.name!r} is not running{where}: {failure}"
        if closing:
            return f"MCP server {self.name!r} was closed{where}" if during else (
                f"MCP server {self.name!r} is closed"
            )
        return f"MCP server {self.name!r} is not connected"

    def _error_text(self, name: str, exc: BaseException) -> str:
        text = _describe(exc)
        if _connection_error(exc):
            # The server went away (an HTTP server that died, a connection that broke).
            self.fail(f"the connection broke ({text})")
            return self.dead_text(during=name)
        if self.failure is not None or self._closing:
            return self.dead_text(during=name)
        return f"MCP tool {name} on server {self.name!r} failed: {text}"


@asynccontextmanager
async def _http_transport(
    target: HttpTarget, refused: Callable[[int], None]
) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport on an HTTP client carrying ``target``'s headers and
    auth, plus the running call's per-run headers on requests to the server's own URL.
    ``refused(status)`` hears of each 401 or 403 answer (the SDK's error does not say)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    url = httpx2.URL(target.url)

    async def add_call_headers(request: httpx2.Request) -> None:
        extra = call_headers.get()
        # Only on requests to the MCP endpoint: never to an OAuth server or a redirect target.
        if extra and (request.url.scheme, request.url.host, request.url.port, request.url.path) == (
            url.scheme,
            url.host,
            url.port,
            url.path,
        ):
            request.headers.update(extra)

    async def note_refusal(response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            refused(response.status_code)

    client = httpx2.AsyncClient(
        headers=target.headers,
        auth=target.auth,
        timeout=httpx2.Timeout(30.0, read=300.0),
        event_hooks={"request": [add_call_headers], "response": [note_refusal]},
    )
    async with client:
        async with streamable_http_client(target.url, http_client=client) as streams:
            yield streams


def _connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection itself is gone (not that one call failed)."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, MCPError) and current.error.code == CONNECTION_CLOSED:
            return True
        kind = type(current)
        if kind.__module__.startswith(("httpx", "httpcore")) and "Connect" in kind.__name__:
            return True
        pending.extend(getattr(current, "exceptions", ()))  # an exception group's members
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def _is_modern(client: Any) -> bool:
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return client.protocol_version in MODERN_PROTOCOL_VERSIONS


def _describe(exc: BaseException) -> str:
    """A one-line reason for a failure, looking inside exception groups."""
    while getattr(exc, "exceptions", None):  # an exception group (no builtin before 3.11)
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    return str(exc) or type(exc).__name__


def convert_result(result: Any) -> AgentToolResult:
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
