"""Quickstart: an agent with two tools, printing its answer as it streams.

Run it: ``python samples/quickstart.py`` (scripted model, offline), or
``python samples/quickstart.py --model openai:gpt-4o-mini`` for a real one (see ``_support.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, TextIO

from _support import choose_model, exit_status, sample_parser

from agentkit import Agent, tool
from agentkit.testing import reply, tool_call

CITY_TEMPERATURES = {"paris": 18.0, "lisbon": 23.5, "oslo": 9.0}


@tool
def get_temperature(city: str) -> str:
    """Get the current temperature of a city, in degrees Celsius.

    Args:
        city: The city, e.g. "Paris".
    """
    celsius = CITY_TEMPERATURES.get(city.lower())
    if celsius is None:
        raise ValueError(f"no weather station in {city}")
    return f"{celsius} °C"


@tool
def to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.
    """
    return round(celsius * 9 / 5 + 32, 1)


SCRIPT = [
    reply(
        "Let me check.",
        tool_call("get_temperature", {"city": "Lisbon"}),
        tool_call("to_fahrenheit", {"celsius": 23.5}),
    ),
    "It is 23.5 °C in Lisbon right now, which is 74.3 °F. A fine day for a walk by the river.",
]


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> list[Any]:
    """Ask the agent one question, print text deltas and tool calls as they come."""
    parser = sample_parser(__doc__)
    parser.add_argument("question", nargs="?", default="How warm is it in Lisbon, in °F?")
    args = parser.parse_args(argv)

    model, stream_fn = choose_model(SCRIPT, args.model, delay=0.02)
    agent = Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="You answer weather questions. Use the tools.",
        tools=[get_temperature, to_fahrenheit],
    )
    print(f"> {args.question}", file=out)
    with agent.stream(args.question) as events:  # leaving the block early aborts the run
        for event in events:
            if event.type == "message_update":
                delta = event.assistant_message_event
                if delta.type == "text_delta":
                    out.write(delta.delta)
                    out.flush()
            elif event.type == "message_end" and event.message.role == "assistant":
                if event.message.error_message:  # a provider error or an abort
                    out.write(f"[{event.message.stop_reason}: {event.message.error_message}]")
                out.write("\n")
            elif event.type == "tool_execution_start":
                print(f"  [calling {event.tool_name}({event.args})]", file=out)
            elif event.type == "tool_execution_end":
                print(f"  [{event.tool_name} -> {event.result.text}]", file=out)
    return agent.state.messages


if __name__ == "__main__":
    sys.exit(exit_status(main()))
