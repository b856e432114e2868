"""The travel desk as an application module, for ``agentkit eval --agent`` and ``pytest --eval``
(``tests.evals.desk_app:make_agent``)."""

from __future__ import annotations

import threading

from agentkit import Agent, Model, tool
from agentkit.abort import AbortSignal
from agentkit.testing import ScriptedModel
from tests.evals.support import SYSTEM, colder_weather, weather


def make_agent() -> Agent:
    """The desk as recorded."""
    return Agent(tools=[weather], system_prompt=SYSTEM)


def make_colder_agent() -> Agent:
    """The desk with a changed tool: its replays diverge."""
    return Agent(tools=[colder_weather], system_prompt=SYSTEM)


def make_judge() -> Agent:
    """A judge that finds every answer fine."""
    model = ScriptedModel(['{"reason": "Fine.", "passed": true, "score": 1.0}'])
    return Agent(model=model.model, stream_fn=model)


NOT_A_FACTORY: Model | None = None


ENTERED = threading.Event()
"""Set when a blocking weather call has started (its run then waits for the abort)."""


@tool(name="weather")
def blocking_weather(city: str, signal: AbortSignal) -> str:
    """The weather in a city (it waits until the run is aborted).

    Args:
        city: The city's name.
    """
    ENTERED.set()
    signal.wait()
    return "no weather today"


def make_blocking_agent() -> Agent:
    """The desk whose tool waits for the abort: for Ctrl-C."""
    return Agent(tools=[blocking_weather], system_prompt=SYSTEM)
