"""Typed output: the agent answers with a validated pydantic object, not text to pick apart.

Run it: ``python samples/typed_output.py [--model PROVIDER:MODEL_ID]``. The agent looks up a
city with a tool, then answers as a ``CityReport``; the request asks each API for the schema
natively (OpenAI ``response_format``, Responses ``text.format``, Anthropic ``output_format``,
Gemini ``responseSchema``, llama.cpp's ``json_schema`` grammar for ``--model local``). The
scripted model's first answer misses a field: the validation error goes back to the model,
which then answers correctly. The partial object is printed as it streams.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

from _support import model_from_command_line
from pydantic import BaseModel

from agentkit import Agent, RunResult, tool
from agentkit.testing import reply, tool_call


class CityReport(BaseModel):
    """What the caller gets back."""

    city: str
    country: str
    population_millions: float
    landmarks: list[str]


@tool
def city_facts(city: str) -> str:
    """Look up facts about a city.

    Args:
        city: The city's name.
    """
    return f"{city}: capital of France, 2.1 million people, Eiffel Tower, Louvre."


SCRIPT = [
    reply(tool_call("city_facts", {"city": "Paris"})),
    '{"city": "Paris", "country": "France", "landmarks": ["Eiffel Tower"]}',
    '{"city": "Paris", "country": "France", "population_millions": 2.1, '
    '"landmarks": ["Eiffel Tower", "Louvre"]}',
]


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> RunResult:
    """Ask for a typed report; print the partial object as it grows and the final one."""
    model, stream_fn = model_from_command_line(SCRIPT, argv, __doc__)
    agent = Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="Use city_facts, then answer with the report.",
        tools=[city_facts],
        output_type=CityReport,
    )
    last = None
    with agent.stream("Tell me about Paris.") as events:
        for _ in events:
            if events.partial_output is not None and events.partial_output != last:
                last = events.partial_output
                print(f"partial: {last}", file=out)
    result = events.result().raise_for_error()
    report: CityReport = result.output
    print(f"report: {report!r}", file=out)
    print(f"requests: {result.usage.requests}, tokens: {result.usage.total_tokens}", file=out)
    return result


if __name__ == "__main__":
    main()
