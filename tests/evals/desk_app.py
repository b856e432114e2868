"""The travel desk as an application module, for ``agentkit eval --agent`` and ``pytest --eval``
(``tests.evals.desk_app:make_agent``)."""

from __future__ import annotations

from agentkit import Agent, Model
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
