"""The stdio transport of :class:`~agentkit.integrations.mcp.MCPServer`: a server subprocess
speaking newline-delimited JSON-RPC on its stdin/stdout.

agentkit keeps its own transport instead of the SDK's ``stdio_client`` for three things a
client of someone else's server needs:

- **A bad line is skipped, not fatal.** A line that is not UTF-8 (which kills the SDK's reader,
  leaving every call waiting) or not JSON-RPC (a stray ``print``, a logging library) is logged
  and dropped; the connection carries on. A request of
  the server's that cannot be read (an id without a method, say) is answered with a JSON-RPC
  error instead, so the server does not wait on it.
- **The server's exit is noticed and explained.** When stdout ends, ``on_exit`` gets what
  happened ("exited with status 3", "was killed by signal 9", with the end of its stderr)
  before the read stream closes, so the calls that then fail at once can say why.
- **Shutdown keeps to a deadline.** Closing waits ``grace()`` seconds for the server to leave
  after its stdin closes, then ends its process group; ``grace()`` is read at that moment, so a
  start-up that ran out of time stops the server at once instead of waiting out a grace period.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import anyio.abc
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, jsonrpc_message_adapter

from ._mcp_answers import answer_to_request

logger = logging.getLogger("agentkit.mcp")

STDERR_TAIL = 2000
"""How many characters of the server's latest stderr an exit report quotes."""

MAX_LINE = 64 * 1024 * 1024
"""The longest stdout line read (bytes); a longer one is dropped as a fault."""

EXIT_NOTICE = 2.0
"""How long (seconds) the reader waits, after stdout ended, for the process's exit status."""

TERM_GRACE = 1.0
"""Seconds between SIGTERM and SIGKILL when the process group is ended."""


class StdioProcess:
    """What a stdio transport reports of its process: exit status and the end of its stderr."""

    def __init__(self) -> None:
        self.process: anyio.abc.Process | None = None
        self.stderr_tail = ""  # the latest STDERR_TAIL characters the server wrote to stderr

    def describe_exit(self) -> str:
        """One line on how the process ended (or that it closed its stdout while running)."""
        code = self.process.returncode if self.process is not None else None
        if code is None:
            what = "closed its stdout"
        elif code < 0:
            try:
                what = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with status {code}"
        tail = self.stderr_tail.strip()
        if tail:
            last = tail.splitlines()[-3:]
            what += " (stderr: " + " | ".join(line.strip() for line in last)[-500:] + ")"
        return what


@asynccontextmanager
async def stdio_transport(
    command: str,
    args: list[str],
    *,
    env: dict[str, str] | None,
    cwd: str | None,
    name: str,
    on_exit: Callable[[str], None],
    grace: Callable[[], float],
    report: StdioProcess,
) -> AsyncIterator[tuple[Any, Any]]:
    """Run ``command args`` and yield the (read, write) streams of its JSON-RPC messages.

    ``on_exit(reason)`` runs on the event loop when the server's stdout ends while the
    transport is open (the server exited or crashed); it does not run for our own shutdown.
    Raises ``OSError`` when the process cannot be spawned.
    """
    process = await anyio.open_process(
        [command, *args],
        env=get_default_environment() | (env or {}),
        cwd=cwd,
        start_new_session=True,  # its own process group, ended as one on shutdown
    )
    report.process = process
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    closing = False

    async def read_stdout() -> None:
        assert process.stdout is not None
        buffer = b""
        try:
            async with read_writer:
                async for chunk in process.stdout:
                    lines = (buffer + chunk).split(b"\n")
                    buffer = lines.pop()
                    if len(buffer) > MAX_LINE:
                        logger.warning("MCP server %r wrote a line over %d bytes; dropped", name, MAX_LINE)
                        buffer = b""
                    for line in lines:
                        message = _parse(line, name)
                        if isinstance(message, JSONRPCError):  # its request waits: answer it
                            await write_stream.send(SessionMessage(message))
                        elif message is not None:
                            await read_writer.send(message)
                if not closing:
                    with anyio.move_on_after(EXIT_NOTICE):
                        while process.returncode is None:
                            await anyio.sleep(0.01)
                    on_exit(report.describe_exit())
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # our shutdown closed a stream under the read

    async def read_stderr() -> None:
        assert process.stderr is not None
        decoder = _decoder()
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async for chunk in process.stderr:
                text = decoder.decode(chunk)
                report.stderr_tail = (report.stderr_tail + text)[-STDERR_TAIL:]
                _pass_through(text)

    async def write_stdin() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for item in write_reader:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await read_writer.aclose()  # the server stopped reading: end the session, not hang

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(read_stdout)
        tasks.start_soon(read_stderr)
        tasks.start_soon(write_stdin)
        try:
            yield read_stream, write_stream
        finally:
            closing = True
            # Shielded: the server must be stopped even when the caller was cancelled.
            with anyio.CancelScope(shield=True):
                write_stream.close()
                read_stream.close()
                await _stop(process, grace())
            tasks.cancel_scope.cancel()


async def _stop(process: anyio.abc.Process, grace: float) -> None:
    """Close the server's stdin, give it ``grace`` seconds to leave, then end its group."""
    if process.stdin is not None:
        with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    with anyio.move_on_after(max(grace, 0.0)):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if sys.platform == "win32":  # pragma: no cover - POSIX is what the tests run
        if process.returncode is None:
            process.kill()
    else:
        # The whole group: a server's own children go with it, also when the server left.
        pgid = process.pid
        if process.returncode is None and grace > 0:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
            with anyio.move_on_after(TERM_GRACE):
                while process.returncode is None:
                    await anyio.sleep(0.01)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    with anyio.move_on_after(EXIT_NOTICE):
        while process.returncode is None:
            await anyio.sleep(0.01)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.aclose()


def _parse(line: bytes, name: str) -> SessionMessage | JSONRPCError | None:
    """One stdout line as a message; the error to answer a request the SDK cannot read with
    (the server waits on its id); or ``None`` (logged) for a blank or broken line."""
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        logger.warning("MCP server %r wrote a line that is not UTF-8; skipped: %r", name, line[:200])
        return None
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError:
        answer = answer_to_request(text)
        if answer is not None:
            logger.warning("MCP server %r sent a request that cannot be read; answered: %s",
                           name, answer.error.message)  # fmt: skip
            return answer
        logger.warning("MCP server %r wrote a line that is not JSON-RPC; skipped: %r", name, text[:200])
        return None


def _decoder() -> Any:
    import codecs

    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def _pass_through(text: str) -> None:
    """Show the server's stderr where ours goes, as a subprocess's own stderr would be."""
    with suppress(Exception):
        sys.stderr.write(text)
        sys.stderr.flush()
