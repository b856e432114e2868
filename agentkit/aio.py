"""Async callers: run an :class:`~agentkit.Agent` from asyncio code without blocking the loop.

The agent already runs on a worker thread of its own; these functions only bridge its results
and events onto the caller's event loop with ``loop.call_soon_threadsafe``, so the loop never
waits on a thread: not for a join, and not for the run's worker thread to come up (a
process-wide starter thread waits for that; see :func:`agentkit.run.starting_threads_elsewhere`).
Cancelling the awaiting task (a client that disconnects from a FastAPI endpoint,
``asyncio.wait_for`` timing out) aborts the run.

    result = await agent.aprompt("Hello", output_type=Answer)
    async for event in agent.astream("Hello"):
        ...
    result = await agent.acontinue()

Each takes the run options of its synchronous twin (``output_type``, ``output_retries``,
``budgets``, ``deps``, ``tool_choice``), which :meth:`~agentkit.Agent.start` checks and lays over
the agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .run import Listener, Run, starting_threads_elsewhere

if TYPE_CHECKING:
    from .events import AgentEvent
    from .results import RunResult
    from .types import ImageContent


class _Agent(Protocol):
    """What these callers use of an :class:`~agentkit.Agent`, named by its shape rather than
    imported: ``Agent.aprompt`` and its kin call down into this module, and an import only ever
    points down."""

    def start(
        self, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
    ) -> Run: ...
    def start_continue(self, **run_options: Any) -> Run: ...
    def subscribe(self, listener: Listener) -> Callable[[], None]: ...


_END = object()  # queue token: the run is over


def _run_finished(run: Run) -> asyncio.Future[None]:
    """A future on the running loop that completes when ``run`` has ended (listeners included)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(_run: Run) -> None:
        def set_done() -> None:
            if not done.done():
                done.set_result(None)

        try:
            loop.call_soon_threadsafe(set_done)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass

    run.add_done_callback(settle)
    return done


async def _abort_and_wait(run: Run, finished: asyncio.Future[None]) -> None:
    """Abort ``run`` and wait, without blocking the loop, until it has wound down.

    A task that is being cancelled may be cancelled again at each ``await``: asyncio does so
    when ``cancel()`` is called again, anyio's cancel scopes (Starlette, FastAPI) at every
    ``await``. An anyio shield keeps the latter from spinning this wait; either way the wait
    only ends when the run has.
    """
    run.abort()
    anyio = sys.modules.get("anyio")  # only if the application already uses it
    shield = anyio.CancelScope(shield=True) if anyio is not None else contextlib.nullcontext()
    with shield:
        while not finished.done():
            try:
                await asyncio.shield(finished)
            except asyncio.CancelledError:
                continue


async def aprompt(
    agent: _Agent, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
) -> RunResult:
    """Run ``agent`` on ``input`` and await its :class:`~agentkit.RunResult` (``Agent.prompt``
    for asyncio; ``run_options`` as for it).

    Cancelling the awaiting task aborts the run, waits for it to end, then re-raises
    ``CancelledError``.
    """
    with starting_threads_elsewhere():
        run = agent.start(input, images, **run_options)
    return await _result(run)


async def acontinue(agent: _Agent, **run_options: Any) -> RunResult:
    """Continue ``agent`` from its transcript and await the :class:`~agentkit.RunResult`
    (``Agent.continue_`` for asyncio; cancelling aborts the run as :func:`aprompt` does)."""
    with starting_threads_elsewhere():
        run = agent.start_continue(**run_options)
    return await _result(run)


async def _result(run: Run) -> RunResult:
    """Await ``run``'s end without blocking the loop; cancellation aborts it and waits."""
    finished = _run_finished(run)
    try:
        await asyncio.shield(finished)
    except asyncio.CancelledError:
        await _abort_and_wait(run, finished)
        raise
    return run._result_now()  # ended: its thread only has done callbacks left, not waited for


def start_relayed(
    agent: _Agent,
    items: asyncio.Queue[Any],
    item: Callable[[Any], Any],
    input: Any,
    images: Sequence[ImageContent] | None,
    run_options: dict[str, Any],
) -> tuple[Run, Callable[[], None], asyncio.Future[None]]:
    """Start a run from the event loop without waiting on a thread, each event put on
    ``items`` as ``item(event)`` and :data:`_END` after the last; return the run, the listener's
    unsubscribe, and a future that completes when the run has ended."""
    forward = onto_loop(items)
    unsubscribe = agent.subscribe(lambda event: forward(item(event)))
    try:
        with starting_threads_elsewhere():
            run = agent.start(input, images, **run_options)
    except BaseException:
        unsubscribe()
        raise
    run.add_done_callback(lambda _run: forward(_END))
    return run, unsubscribe, _run_finished(run)


def onto_loop(items: asyncio.Queue[Any]) -> Callable[[Any], None]:
    """A function any thread may call to put an item on ``items``, a queue of the running event
    loop (called here, on the loop); once the loop is closed nobody listens, and items are
    dropped."""
    loop = asyncio.get_running_loop()

    def forward(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(items.put_nowait, item)
        except RuntimeError:  # the loop is closed
            pass

    return forward


async def astream(
    agent: _Agent, input: Any, images: Sequence[ImageContent] | None = None, **run_options: Any
) -> AsyncGenerator[AgentEvent, None]:
    """Start a run and yield its events as they happen (``Agent.stream`` for asyncio;
    ``run_options`` as for it).

    Leaving the ``async for`` early (``break``, an exception, cancellation, ``aclose()``)
    aborts the run and waits, without blocking the loop, for it to end.
    """
    events: asyncio.Queue[Any] = asyncio.Queue()
    run, unsubscribe, finished = start_relayed(
        agent, events, lambda e: e, input, images, run_options
    )
    try:
        while True:
            item = await events.get()
            if item is _END:
                break
            yield item
    finally:
        unsubscribe()
        if not finished.done():
            await _abort_and_wait(run, finished)


__all__ = ["acontinue", "aprompt", "astream"]
