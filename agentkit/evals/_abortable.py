"""One run of an agent that the evaluation's abort signal stops: what the runner and the judge
share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..agent import Agent
    from ..results import RunResult


def run_abortably(agent: Agent, prompt: Any, signal: AbortSignal | None, **options: Any) -> RunResult:
    """``agent.prompt(prompt, **options)``, aborted as soon as ``signal`` fires.

    The run is started first and the abort linked to it after, so an abort that comes at any
    instant reaches it (``add_callback`` calls at once when the signal has already fired): a
    callback on the agent itself could fire before the run is active and be lost.
    """
    run = agent.start(prompt, **options)
    unlink = signal.add_callback(run.abort) if signal is not None else None
    try:
        return run.result()
    finally:
        if unlink is not None:
            unlink()
