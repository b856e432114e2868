"""Running a dataset: each case on a fresh agent, on a pool of plain threads, then judged.

:func:`run_dataset` blocks its caller (a script, a notebook cell, a Celery task, a pytest
item) while up to ``concurrency`` cases run at once, each on a worker thread
(``agentkit-eval_N``) that builds the case's agent, sends its turns, and runs the evaluators.
Every model request of every case, replayed ones included, takes a permit from the
``rate_limiter`` when one is given (the agents share it).

Aborting: Ctrl-C in the caller's thread (the main thread) aborts every case under way, cancels
the ones not started, waits for the aborted runs to wind down, and raises
:class:`EvalInterrupted` (a ``KeyboardInterrupt``) carrying the partial report; no worker
thread is left behind. A second Ctrl-C while they wind down stops the waiting at once. From any
other thread, fire the ``signal`` given to the run: the evaluation then ends the same way but
returns its report, marked ``interrupted``.

Nothing here needs an event loop, so it runs as it is inside a running one (a Jupyter cell);
:func:`arun_dataset` is for code that wants to ``await`` it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..abort import AbortController, AbortSignal
from ..agent import Agent
from ..budgets import Budgets
from ..errors import EvalInterrupted
from ..results import RunResult, RunUsage
from ..types import UserMessage, role_of
from ..waits import get_item
from ._abortable import run_abortably
from .evaluators import CaseRun, Evaluation, Evaluator, as_evaluations, as_evaluator
from .progress import make_progress
from .recording import tool_calls_of
from .replay import Replay, SameResult
from .report import CaseResult, Report, Status

if TYPE_CHECKING:
    from ..limits import RateLimiter
    from .cases import Case
    from .recording import Turn

Mode = Literal["live", "replay"]

DEFAULT_CONCURRENCY = 4
DEFAULT_JUDGE_BUDGETS = Budgets(max_turns=3, timeout=300)
"""A judge's limits unless the run gives others: a typed answer within three requests (two
retries of an invalid one), in five minutes."""

INTERRUPTED_TEXT = "the evaluation was interrupted"

SWEEP = 1.0
"""Seconds without a case ending after which the caller's thread looks at every case."""


class DatasetLike(Protocol):
    """What the runner reads of the dataset it runs: a :class:`~agentkit.evals.dataset.Dataset`
    is one. (A Protocol because ``Dataset.run`` calls this module: the dataset's module stands
    above the runner, not under it.)"""

    @property
    def name(self) -> str:
        """Names the report, unless the run is given a name."""
        ...

    @property
    def cases(self) -> Sequence[Case]:
        """The cases to run, in order."""
        ...

    @property
    def evaluators(self) -> Sequence[Evaluator | Callable[[CaseRun], Any]]:
        """What judges every case (each case adds its own)."""
        ...


@dataclass(frozen=True)
class Settings:
    """How each case runs: the agent factory, the mode and what the runs share."""

    factory: Callable[[], Any]
    mode: Mode = "live"
    rate_limiter: RateLimiter | None = None
    budgets: Budgets | None = None
    judge: Callable[[], Agent] | None = None
    judge_budgets: Budgets = DEFAULT_JUDGE_BUDGETS
    same_result: SameResult | None = None
    on_divergence: Literal["stop", "continue"] = "stop"
    evaluators: Sequence[Evaluator] = field(default_factory=tuple)


def run_dataset(
    dataset: DatasetLike,
    agent: Callable[[], Any],
    *,
    mode: Mode = "live",
    concurrency: int = DEFAULT_CONCURRENCY,
    rate_limiter: RateLimiter | None = None,
    budgets: Budgets | dict[str, Any] | None = None,
    judge: Callable[[], Agent] | None = None,
    judge_budgets: Budgets | dict[str, Any] | None = None,
    same_result: SameResult | None = None,
    on_divergence: Literal["stop", "continue"] = "stop",
    progress: Any = "auto",
    signal: AbortSignal | None = None,
    name: str | None = None,
) -> Report:
    """Run every case of ``dataset`` and judge it; return the :class:`Report`.

    ``agent()`` makes a new :class:`~agentkit.Agent` for each case (the runner closes it after);
    it sets the model, tools, hooks and policies under test. ``mode="live"`` asks the agent's
    own model; ``mode="replay"`` plays each case's recording instead (see
    :mod:`agentkit.evals.replay`; ``same_result`` and ``on_divergence`` are its settings).
    ``concurrency`` cases run at once. ``rate_limiter`` is given to every agent that has none,
    and counts replayed requests too. ``budgets`` limit each turn of each case (the agent's own
    otherwise). ``judge()`` makes the agent an :class:`~agentkit.evals.LLMJudge` asks, under
    ``judge_budgets``. ``progress`` is ``"auto"``, ``True``, ``False``, ``"bar"``,
    ``"notebook"`` or a :class:`~agentkit.evals.progress.Progress`. ``signal`` aborts the
    evaluation from another thread (see the module). ``name`` names the report (the dataset's
    name by default).
    """
    if mode not in ("live", "replay"):
        raise ValueError(f"mode is 'live' or 'replay', not {mode!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency is a whole number of 1 or more, not {concurrency!r}")
    if not callable(agent):
        raise TypeError(f"agent is a function that makes an Agent, not {agent!r}")
    if judge is not None and not callable(judge):
        raise TypeError(f"judge is a function that makes an Agent, not {judge!r}")
    settings = Settings(
        factory=agent,
        mode=mode,
        rate_limiter=rate_limiter,
        budgets=Budgets.of(budgets) if budgets is not None else None,
        judge=judge,
        judge_budgets=Budgets.of(judge_budgets) if judge_budgets else DEFAULT_JUDGE_BUDGETS,
        same_result=same_result,
        on_divergence=on_divergence,
        evaluators=tuple(as_evaluator(e) for e in dataset.evaluators),
    )
    evaluation = Runner(settings, concurrency, make_progress(progress))
    return evaluation.run(dataset.cases, name or dataset.name, signal)


async def arun_dataset(dataset: DatasetLike, agent: Callable[[], Any], **options: Any) -> Report:
    """:func:`run_dataset` for asyncio callers: it runs on a thread of the loop's executor
    while the loop goes on. Cancelling the awaiting task aborts the evaluation and waits for
    its threads to end before the cancellation propagates."""
    controller = AbortController()
    outer: AbortSignal | None = options.pop("signal", None)
    unlink = outer.add_callback(controller.abort) if outer is not None else None
    options.setdefault("progress", "auto")
    loop = asyncio.get_running_loop()
    call = functools.partial(run_dataset, dataset, agent, signal=controller.signal, **options)
    future = loop.run_in_executor(None, call)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        controller.abort(INTERRUPTED_TEXT)
        await asyncio.wait([future])  # its threads end before the cancellation goes on
        raise
    finally:
        if unlink is not None:
            unlink()


class Runner:
    """One evaluation under way: the worker pool, the abort that stops it, and the agents its
    cases run on."""

    def __init__(self, settings: Settings, concurrency: int, progress: Any) -> None:
        self.settings = settings
        self.concurrency = concurrency
        self.progress = progress
        self.controller = AbortController()
        # Guards _agents: the ids of the agents of the cases under way, so a factory that
        # hands out one agent twice is caught instead of failing with AgentBusyError.
        self._lock = threading.Lock()
        self._agents: set[int] = set()

    @property
    def signal(self) -> AbortSignal:
        """The evaluation's abort signal: every case's runs and judges are tied to it."""
        return self.controller.signal

    def run(self, cases: Sequence[Case], name: str, signal: AbortSignal | None) -> Report:
        """Run ``cases`` on the pool; see :func:`run_dataset`."""
        started_at, started = time.time(), time.monotonic()
        unlink = signal.add_callback(self.controller.abort) if signal is not None else None
        results: list[CaseResult | None] = [None] * len(cases)
        futures: list[Future[CaseResult]] = []
        # The index of each case that ends (cancelled ones included): the caller's thread waits
        # on this queue, a wait that Ctrl-C can end; the results are read from the futures.
        ended: queue.SimpleQueue[int] = queue.SimpleQueue()
        executor = ThreadPoolExecutor(
            max_workers=max(1, min(self.concurrency, len(cases))), thread_name_prefix="agentkit-eval"
        )
        join = True
        self.progress.start(name, len(cases))
        try:
            for index, case in enumerate(cases):
                future = executor.submit(self.run_case, case)
                future.add_done_callback(functools.partial(_put, ended, index))
                futures.append(future)
            self._wait(cases, futures, results, ended)
        except KeyboardInterrupt as interrupt:
            self.controller.abort(INTERRUPTED_TEXT)
            executor.shutdown(wait=False, cancel_futures=True)
            try:
                self._wait(cases, futures, results, ended)  # the aborted cases wind down
            except KeyboardInterrupt:
                join = False  # a second Ctrl-C: stop waiting for them
            report = self._report(name, cases, results, started_at, started)
            raise EvalInterrupted(report) from interrupt
        except BaseException:
            self.controller.abort(INTERRUPTED_TEXT)
            executor.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            executor.shutdown(wait=join)
            self.progress.close()
            if unlink is not None:
                unlink()
        return self._report(name, cases, results, started_at, started)

    def _wait(
        self,
        cases: Sequence[Case],
        futures: Sequence[Future[CaseResult]],
        results: list[CaseResult | None],
        ended: queue.SimpleQueue[int],
    ) -> None:
        """Wait until every submitted case has ended, taking each result as it comes. An index
        lost to an interrupt (taken, then the ``KeyboardInterrupt`` before its result was kept)
        is found by a look at every case after :data:`SWEEP` seconds without news."""
        waiting = {i for i in range(len(futures)) if results[i] is None}
        counts = _counts(results)
        done = sum(counts.values())
        while waiting:
            try:
                ready = [get_item(lambda timeout: ended.get(timeout=timeout), SWEEP)]
            except queue.Empty:
                ready = list(waiting)
            for index in ready:
                if index in waiting and futures[index].done():
                    result = results[index] = _outcome(cases[index], futures[index])
                    counts[result.status] = counts.get(result.status, 0) + 1
                    waiting.discard(index)
                    done += 1
            self.progress.update(done, counts)

    def _report(
        self,
        name: str,
        cases: Sequence[Case],
        results: list[CaseResult | None],
        started_at: float,
        started: float,
    ) -> Report:
        final = [r if r is not None else _cancelled(c) for c, r in zip(cases, results, strict=True)]
        return Report(
            name=name,
            mode=self.settings.mode,
            cases=final,
            started_at=started_at,
            duration=time.monotonic() - started,
            interrupted=self.signal.aborted,
        )

    # --- one case, on a worker thread ----------------------------------------------------------

    def run_case(self, case: Case) -> CaseResult:
        """Run and judge one case; never raises (a failure is the result's ``error``)."""
        if self.signal.aborted:
            return _cancelled(case)
        run = CaseRun(
            case=case,
            mode=self.settings.mode,
            signal=self.signal,
            judge=self.settings.judge,
            judge_budgets=self.settings.judge_budgets,
        )
        replay: Replay | None = None
        try:
            if self.settings.mode == "replay":
                replay = Replay(case, same_result=self.settings.same_result,
                                on_divergence=self.settings.on_divergence)  # fmt: skip
            self._play(case, run, replay)
        except Exception as exc:
            run.error = f"{type(exc).__name__}: {exc}"
        if replay is not None:
            run.divergence = replay.divergence
        if self.signal.aborted:
            return _result(run, "cancelled", [])
        evaluations = self._evaluate(run, case)
        return _result(run, _status(run, evaluations), evaluations)

    def _play(self, case: Case, run: CaseRun, replay: Replay | None) -> None:
        """Send the case's turns to a new agent, and fill ``run`` with what it did."""
        agent = self.settings.factory()
        if not isinstance(agent, Agent):
            raise TypeError(f"the agent factory returned {agent!r}, not an Agent")
        with self._lock:
            if id(agent) in self._agents:
                raise ValueError(
                    "the agent factory returned an agent another case is running; make a new "
                    "Agent on each call"
                )
            self._agents.add(id(agent))
        started = time.monotonic()
        try:
            self._prepare(agent, case, replay)
            results: list[RunResult] = []
            for turn in case.turns:
                if self.signal.aborted:
                    break
                options = {"budgets": self.settings.budgets} if self.settings.budgets else {}
                result = run_abortably(agent, _turn_input(turn), self.signal, **options)
                results.append(result)
                if result.stop_reason in ("error", "aborted"):
                    break  # the later turns would follow a failed one
            _fill(run, results)
        finally:
            run.duration = time.monotonic() - started
            with self._lock:
                self._agents.discard(id(agent))
            agent.close()

    def _prepare(self, agent: Agent, case: Case, replay: Replay | None) -> None:
        if replay is not None:
            agent.stream_fn = replay
        if self.settings.rate_limiter is not None and agent.rate_limiter is None:
            agent.rate_limiter = self.settings.rate_limiter
        if case.history:
            lead = [m for m in agent.state.messages if role_of(m) == "system"]
            agent.state.messages = lead + copy.deepcopy(case.history)

    def _evaluate(self, run: CaseRun, case: Case) -> list[Evaluation]:
        evaluations: list[Evaluation] = []
        # A case's list may have been filled after it was made: each item is checked here.
        for evaluator in (*self.settings.evaluators, *map(as_evaluator, case.evaluators)):
            if self.signal.aborted:
                break
            try:
                value = evaluator.evaluate(run)
            except Exception as exc:  # a broken check (or a failed judge) is this case's error
                evaluations.append(
                    Evaluation(evaluator.name, False, error=f"{type(exc).__name__}: {exc}")
                )
                continue
            evaluations.extend(as_evaluations(evaluator, value))
        return evaluations


def _put(ended: queue.SimpleQueue[int], index: int, future: Future[CaseResult]) -> None:
    ended.put(index)


def _turn_input(turn: Turn) -> str | UserMessage | list[UserMessage]:
    """A turn as ``agent.prompt()`` takes it; messages are copied, since a run keeps them."""
    if isinstance(turn, str):
        return turn
    if isinstance(turn, UserMessage):
        return turn.model_copy(deep=True)
    return [m.model_copy(deep=True) for m in turn]


def _fill(run: CaseRun, results: Sequence[RunResult]) -> None:
    """What the case's runs did, added up into ``run``."""
    usage = RunUsage()
    messages: list[Any] = []
    for result in results:
        usage.add(result.usage)
        usage.requests += result.usage.requests
        usage.tool_calls += result.usage.tool_calls
        messages.extend(result)
    run.usage, run.messages, run.turns = usage, messages, usage.requests
    run.tool_calls = tool_calls_of(messages)
    if results:
        last = results[-1]
        run.answer, run.output, run.stop_reason = last.text, last.output, last.stop_reason
        if last.stop_reason in ("error", "aborted"):
            run.error = last.error_message or last.stop_reason


def _status(run: CaseRun, evaluations: Sequence[Evaluation]) -> Status:
    if run.divergence is not None:
        return "diverged"
    if run.error is not None or any(e.error is not None for e in evaluations):
        return "error"
    if not all(e.passed for e in evaluations):
        return "failed"
    return "passed"


def _result(run: CaseRun, status: Status, evaluations: list[Evaluation]) -> CaseResult:
    metadata = {k: v for k, v in run.case.metadata.items() if k != "recording"}
    return CaseResult(
        name=run.case.name,
        status=status,
        answer=run.answer,
        output=run.output,
        evaluations=evaluations,
        tool_calls=run.tool_calls,
        usage=run.usage,
        judge_usage=run.judge_usage,
        turns=run.turns,
        duration=run.duration,
        stop_reason=run.stop_reason if run.messages else None,
        error=run.error,
        divergence=run.divergence,
        metadata=metadata,
        messages=run.messages,
    )


def _cancelled(case: Case) -> CaseResult:
    return _result(CaseRun(case=case), "cancelled", [])


def _outcome(case: Case, future: Future[CaseResult]) -> CaseResult:
    if future.cancelled():
        return _cancelled(case)
    error = future.exception()
    if error is not None:  # pragma: no cover - run_case catches every Exception
        result = _cancelled(case)
        result.status, result.error = "error", f"{type(error).__name__}: {error}"
        return result
    return future.result()


def _counts(results: Sequence[CaseResult | None]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for result in results:
        if result is not None:
            counts[result.status] = counts.get(result.status, 0) + 1
    return counts
