"""agentkit in one minute: parallel tools and steering, on the scripted model (no network).

Run it: ``python samples/demo.py``. Three slow tools run at once (the batch takes about as long
as the slowest), and another thread steers the agent while the tools are running.
"""

from __future__ import annotations

import sys
import threading
import time

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.testing import ScriptedModel, reply, tool_call


@tool
def fetch_price(city: str, signal: AbortSignal) -> str:
    """Look up the average hotel price in a city.

    Args:
        city: The city to look up.
    """
    signal.wait(0.5)  # a slow lookup that an abort would cut short
    return f"{city}: {100 + len(city) * 7} EUR/night"


model = ScriptedModel(
    [
        reply(
            "Let me check three cities at once.",
            tool_call("fetch_price", {"city": "Paris"}),
            tool_call("fetch_price", {"city": "Lisbon"}),
            tool_call("fetch_price", {"city": "Vienna"}),
        ),
        "Paris is the cheapest at 135 EUR/night; Lisbon and Vienna both cost 142. Of the "
        "three, only Lisbon is by the sea.",
    ]
)

agent = Agent(
    model=model.model,
    stream_fn=model,
    system_prompt="You compare hotel prices.",
    tools=[fetch_price],
)
steered = threading.Event()


def show(event: object) -> None:
    kind = getattr(event, "type", "")
    if kind == "tool_execution_start" and not steered.is_set():
        steered.set()
        # Another thread steers while the tools run; it is injected after the batch.
        threading.Thread(target=agent.steer, args=("Prefer places near the sea.",)).start()
    if kind == "message_start" and event.message.role == "user":  # type: ignore[attr-defined]
        print(f"user: {event.message.content[0].text}")  # type: ignore[attr-defined]
    if kind == "tool_execution_end":
        print(f"  tool {event.tool_name} -> {event.result.text}")  # type: ignore[attr-defined]
    if kind == "message_end" and event.message.role == "assistant":  # type: ignore[attr-defined]
        text = "".join(b.text for b in event.message.content if b.type == "text")  # type: ignore[attr-defined]
        if text:
            print(f"assistant: {text}")


agent.subscribe(show)
started = time.monotonic()
agent.prompt("Which city is cheapest: Paris, Lisbon or Vienna?")
print(f"done in {time.monotonic() - started:.2f}s (three 0.5 s tools ran in parallel)")
print(f"{len(agent.state.messages)} messages in the transcript")
last = agent.state.messages[-1]
if last.stop_reason in ("error", "aborted"):
    sys.exit(f"the run ended with {last.stop_reason}: {last.error_message}")
