"""Compaction against the embedded llama.cpp server with a small context: its real refusal is a
ContextOverflowError, and an agent that trims recovers from it. Skipped without the ``local``
extra or its weights."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentkit import Agent
from agentkit.errors import ContextOverflowError
from agentkit.transcript import COMPACTION_ROLE, user_message
from agentkit.types import AssistantMessage, TextContent, role_of
from tests.support import running_local_model

pytestmark = pytest.mark.embedded

CTX = 1024


@pytest.fixture(scope="module")
def small_server() -> Iterator[Any]:
    with running_local_model(n_ctx=CTX) as server:
        yield server


def long_history() -> list[Any]:
    """Earlier turns worth about 1,500 tokens: more than the window."""
    history: list[Any] = []
    for turn in range(6):
        history.append(user_message(f"Note {turn}: " + "the archive holds old letters. " * 40))
        history.append(AssistantMessage(content=[TextContent(text=f"Noted {turn}.")]))
    return history


def test_the_servers_refusal_is_a_context_overflow_error(small_server: Any) -> None:
    agent = Agent(model=small_server.model_for("openai-completions"), messages=long_history(),
                  max_tokens=16)  # fmt: skip
    result = agent.prompt("What do the notes say?")
    assert result.stop_reason == "error"
    assert isinstance(result.error, ContextOverflowError), result.error_message
    assert "context size" in str(result.error)


@pytest.mark.parametrize(
    ("compaction", "reason"),
    [
        ({"strategy": "trim"}, "threshold"),  # the window is the server's context size
        ({"strategy": "trim", "context_window": 0}, "overflow"),  # no threshold: refused first
    ],
)
def test_an_agent_that_trims_stays_inside_the_servers_context(
    small_server: Any, compaction: dict[str, Any], reason: str
) -> None:
    model = small_server.model_for("openai-completions")
    assert model.context_window == CTX
    agent = Agent(model=model, messages=long_history(), max_tokens=16, compaction=compaction)
    result = agent.prompt("Say hello.")
    assert result.stop_reason in ("stop", "length"), result.error_message
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    assert len(records) == 1 and records[0].reason == reason
    assert records[0].strategy == "trim" and records[0].requests == 0
    refused = [m for m in result if getattr(m, "stop_reason", None) == "error"]
    assert len(refused) == (1 if reason == "overflow" else 0)
