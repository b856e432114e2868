"""Typed output on the real embedded model: llama.cpp's ``json_schema`` grammar makes the small
model answer with JSON of the schema, which the run validates. Protocol facts only (valid,
typed output), never wording."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from agentkit import Agent, Budgets
from agentkit.providers import stream_simple
from tests.support import NEEDS_EMBEDDED_MODEL

pytestmark = NEEDS_EMBEDDED_MODEL


class Capital(BaseModel):
    country: str
    capital: str
    population_millions: float


def test_embedded_model_answers_in_the_schema(embedded_server: Any) -> None:
    agent = Agent(
        model=embedded_server.model_for("openai-completions"),
        stream_fn=stream_simple,
        system_prompt="You answer questions about geography.",
        output_type=Capital,
        budgets=Budgets(max_turns=4, timeout=300),
        max_tokens=200,
    )
    seen: list[Any] = []
    with agent.stream("What is the capital of France, and roughly how many million people live "
                      "there?") as events:
        for _ in events:
            if events.partial_output is not None:
                seen.append(events.partial_output)
    result = events.result()
    assert result.stop_reason == "stop", result.error_message
    assert isinstance(result.output, Capital)
    assert result.output.capital and result.output.country
    assert result.usage.requests >= 1 and result.usage.output > 0
    assert seen and isinstance(seen[-1], dict)  # the object was visible while it grew
