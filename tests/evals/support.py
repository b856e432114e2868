"""What the evaluation tests share: a small travel desk (its tools, its prompt), sessions
recorded by real runs of it, and agent factories for the runs under test."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentkit import Agent, AgentTool, Model, ModelCost, tool
from agentkit.sessions import Session, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import Context, StreamOptions

SYSTEM = "You are a travel desk. Look the weather up before you answer."

PRICED = Model(
    id="recorder", name="Recorder", api="scripted", provider="scripted", base_url="",
    cost=ModelCost(input=1.0, output=2.0),
)  # fmt: skip
"""The model sessions are recorded with: priced, so recorded replies cost something."""

WEATHER = {"Oslo": "snowy, -3 C", "Lisbon": "sunny, 21 C", "Rome": "cloudy, 15 C"}
CITIES = list(WEATHER)


@tool
def weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    return WEATHER.get(city, "unknown")


@tool(name="weather")
def colder_weather(city: str) -> str:
    """The weather in a city (a changed implementation: everything is colder now).

    Args:
        city: The city's name.
    """
    return "freezing, -20 C"



def script_for(city: str) -> list[Any]:
    """What the recording model answers for a two-turn conversation about ``city``."""
    return [
        reply(tool_call("weather", {"city": city})),
        f"It is {WEATHER[city]} in {city}.",
        "You're welcome!",
    ]


def record_session(store: SessionStore | str, name: str, city: str) -> None:
    """A real run of the travel desk on session ``name``: two turns, one tool call."""
    model = ScriptedModel(script_for(city), model=PRICED)
    with Agent(model=model.model, stream_fn=model, tools=[weather], system_prompt=SYSTEM,
               session=Session(name, store)) as agent:  # fmt: skip
        agent.prompt(f"What is the weather in {city}?")
        agent.prompt("Thanks!")


def record_sessions(store: SessionStore | str, count: int, prefix: str = "chat") -> list[str]:
    """``count`` recorded sessions named ``<prefix>-<n>``, cycling through the cities."""
    names = []
    for index in range(count):
        name = f"{prefix}-{index}"
        record_session(store, name, CITIES[index % len(CITIES)])
        names.append(name)
    return names


def desk(
    tools: Sequence[AgentTool] = (weather,), system_prompt: str = SYSTEM, **options: Any
) -> Callable[[], Agent]:
    """A factory of the travel desk under test (no model unless ``options`` give one: a replay
    brings its own)."""

    def make() -> Agent:
        return Agent(tools=list(tools), system_prompt=system_prompt, **options)

    return make


def answering_model(delay: float = 0.0) -> Callable[..., Any]:
    """A live model for the desk that never runs out: it looks the weather up after a user
    message and answers from the tool's result."""

    def stream_fn(model: Model, context: Context, options: StreamOptions | None = None) -> Any:
        last = context.messages[-1]
        if last.role == "user":
            text = last.content if isinstance(last.content, str) else last.content[0].text
            city = next((c for c in CITIES if c in text), None)
            answer = reply(tool_call("weather", {"city": city})) if city else "You're welcome!"
        else:
            city = context.messages[-2].content[0].arguments["city"]
            answer = f"It is {last.content[0].text} in {city}."
        return ScriptedModel([answer], model=model, delay=delay)(model, context, options)

    return stream_fn


def eval_threads() -> list[str]:
    """The names of the evaluation's live worker threads."""
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("agentkit-eval")]
