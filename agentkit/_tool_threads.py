"""agentkit's executor for tool calls: a ``concurrent.futures.Executor`` of daemon threads.

``ThreadPoolExecutor`` joins its workers when the interpreter exits, so a tool that ignored an
abort (and was given up on) would keep a script from ending. These threads are daemons: a run
gives up on such a tool and the process still exits. Otherwise the executor behaves as the
standard one: threads start as calls need them, up to ``max_workers``, idle ones are reused,
``shutdown()`` stops them, and a forgotten executor's threads are told to stop when it is
collected (they never hold a reference to it).

It lives apart from :mod:`agentkit.tool_calls` because ``concurrent.futures`` (with
``logging``) costs several milliseconds to import: the first tool batch pays it, not
``import agentkit``.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Workers:
    """What an executor shares with its threads; the threads hold this, never the executor."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # Guards idle, threads and shut_down: threads become idle on their own, and any thread
        # may submit.
        self.lock = threading.Lock()
        self.idle = 0
        self.threads: list[threading.Thread] = []
        self.shut_down = False


def _serve(workers: _Workers) -> None:
    """A tool thread: run jobs until told to stop (``None``)."""
    while True:
        job = workers.jobs.get()
        if job is None:
            return
        future, fn, args, kwargs = job
        del job
        result: Any = None
        error: BaseException | None = None
        run = future.set_running_or_notify_cancel()
        if run:
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the future, as the stdlib does
                error = exc
        # Counted idle before the future completes: the thread its completion wakes may submit
        # the next call at once, and that call then finds this thread free instead of
        # starting another one.
        with workers.lock:
            workers.idle += 1
        if error is not None:
            future.set_exception(error)
        elif run:
            future.set_result(result)
        del future, fn, args, kwargs, result, error


def _stop(workers: _Workers) -> None:
    """Tell every thread of a collected executor to stop after its current job."""
    with workers.lock:
        workers.shut_down = True
        threads, workers.threads = workers.threads, []
    for _ in threads:
        workers.jobs.put(None)


class ToolThreadExecutor(Executor):
    """An executor of named daemon threads (``agentkit-tool-N``), started as calls need them."""

    def __init__(self, max_workers: int = 32, thread_name_prefix: str = "agentkit-tool") -> None:
        self.max_workers = max(1, max_workers)
        self._prefix = thread_name_prefix
        self._workers = _Workers()
        weakref.finalize(self, _stop, self._workers)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Schedule ``fn(*args, **kwargs)`` on an idle thread, or a new one below the bound."""
        future: Future[T] = Future()
        workers = self._workers
        with workers.lock:
            if workers.shut_down:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if workers.idle:
                workers.idle -= 1
            elif len(workers.threads) < self.max_workers:
                thread = threading.Thread(
                    target=_serve,
                    args=(workers,),
                    name=f"{self._prefix}-{len(workers.threads)}",
                    daemon=True,
                )
                thread.start()
                workers.threads.append(thread)
        workers.jobs.put((future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the threads after the calls already given; ``wait`` joins them.

        Pass ``wait=False`` when a call was given up on: its thread then ends on its own after
        the call returns, and nobody waits for it.
        """
        workers = self._workers
        with workers.lock:
            workers.shut_down = True
            threads, workers.threads = workers.threads, []
        if cancel_futures:
            while True:
                try:
                    job = workers.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[0].cancel()
        for _ in threads:
            workers.jobs.put(None)
        if wait:
            for thread in threads:
                thread.join()
