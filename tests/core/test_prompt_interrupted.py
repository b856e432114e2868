"""``prompt()`` interrupted by an exception from a signal handler aborts the run it waits for."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from agentkit import Agent
from agentkit.testing import ScriptedModel, reply


class SoftTimeLimit(Exception):
    """Stands for Celery's SoftTimeLimitExceeded, raised by a signal handler."""


def test_exception_from_a_signal_handler_aborts_the_run() -> None:
    def handler(signum: int, frame: object) -> None:
        raise SoftTimeLimit("time is up")

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        model = ScriptedModel([reply("x" * 100, hang=True), "still usable"], delay=0.01)
        agent = Agent(model=model.model, stream_fn=model)
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        with pytest.raises(SoftTimeLimit):
            agent.prompt("go")
        timer.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert not agent.state.is_streaming
    assert agent.state.messages[-1].stop_reason == "aborted"
    agent.prompt("again")
    assert agent.state.messages[-1].content[0].text == "still usable"
