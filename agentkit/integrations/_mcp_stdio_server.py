"""The stdin side of ``agentkit mcp serve`` over stdio: every request that has an id gets an
answer, even one the SDK's reader cannot read.

The SDK's stdio transport validates each line as a JSON-RPC message and, when that fails,
hands its server an exception that is logged and dropped: a request with an id but no method,
a numeric method, or array params for ``tools/call`` never gets a response, and a client waiting
on that id hangs. Over HTTP the same input gets a 400. Here each line is looked at first
(:func:`answer_for`): one the SDK reads is passed on as it is; one it would drop is answered
with a JSON-RPC error (the request's id, or ``null`` when it has none that is usable), written
through the transport's own writer so that two replies never interleave on stdout. A
notification or a client's response gets no answer, as JSON-RPC says.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError

from ._mcp_answers import answer_for

logger = logging.getLogger("agentkit.mcp")

class AnsweringLines:
    """The client's lines, as the SDK's ``stdio_server(stdin=...)`` iterates them: each line it
    reads is passed on; each one it would drop unanswered is answered here, through the
    transport's writer given to :meth:`answer_with` (iteration waits for it)."""

    def __init__(self, lines: AsyncIterable[str]) -> None:
        self._lines = lines
        self._writer: Any = None
        self._ready = anyio.Event()

    def answer_with(self, write_stream: Any) -> None:
        """Answer through ``write_stream``, the transport's stream of outgoing messages."""
        self._writer = write_stream
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._read()

    async def _read(self) -> AsyncIterator[str]:
        await self._ready.wait()
        async for line in self._lines:
            answer = answer_for(line)
            if answer is None:
                yield line
            elif isinstance(answer, JSONRPCError):
                logger.warning("answered a line the MCP SDK cannot read: %s", answer.error.message)
                try:
                    await self._writer.send(SessionMessage(answer))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return  # the server is shutting down


@contextmanager
def wire_stdin() -> Iterator[AsyncIterable[str]]:
    """The client's lines on stdin, read from a private copy of file descriptor 0 while fd 0
    itself reads the null device, as the SDK's own transport does: a tool (or a child process)
    that reads stdin gets end-of-file instead of the client's messages. Fd 0 is given back
    after; the copy stays open, since a worker thread may still be blocked reading it."""
    try:
        backed = sys.stdin is not None and sys.stdin.buffer.fileno() == 0
    except (AttributeError, OSError, ValueError):
        backed = False
    if not backed:  # stdin replaced in this process (a test, an embedding): read it as it is
        yield anyio.wrap_file(sys.stdin)
        return
    wire = os.dup(0)  # not inherited by children (os.dup makes non-inheritable descriptors)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        binary: BinaryIO = os.fdopen(wire, "rb", closefd=False)
        yield anyio.wrap_file(io.TextIOWrapper(binary, encoding="utf-8", errors="replace"))
    finally:
        os.dup2(wire, 0)
