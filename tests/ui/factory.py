"""An agent factory for ``agentkit ui --agent tests.ui.factory:build`` (a scripted model)."""

from __future__ import annotations

from agentkit import Agent
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel


def build(session: Session) -> Agent:
    """A scripted agent that answers once, kept in ``session``."""
    model = ScriptedModel(["Hello from the page."])
    return Agent(model=model.model, stream_fn=model, session=session)
