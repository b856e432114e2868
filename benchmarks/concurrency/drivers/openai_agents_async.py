#!/usr/bin/env python3
"""openai-agents (OpenAI Agents SDK), native asyncio: N `Runner.run_streamed(...)` drained at once.

One Agent with OpenAIChatCompletionsModel over one AsyncOpenAI client (the SDK's default
pool: up to 1000 connections, 100 kept alive) pointed at the fake server; run_streamed so that
every model request is streamed. Tracing disabled (its exporter would call the vendor). The
native tool is an async def; --tool sync gives a plain function, which the SDK runs with
asyncio.to_thread (the loop's default pool).
"""

import harness  # noqa: I001  (first: times the imports that follow)

import agents
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

FRAMEWORK = "openai-agents"
MODE = "asyncio"
NATIVE_TOOL = "async"


def version() -> str:
    import openai
    return f"openai-agents {agents.__version__} (openai {openai.__version__})"


class State:
    pass


async def abuild(args) -> State:
    set_tracing_disabled(True)
    s = State()
    s.client = AsyncOpenAI(base_url=args.base_url, api_key=harness.API_KEY)
    model = OpenAIChatCompletionsModel(model=harness.MODEL, openai_client=s.client)
    s.agent = Agent(name="bench", instructions=harness.SYSTEM, model=model,
                    tools=[function_tool(harness.tool_fn(args))])
    s.max_turns = args.turns + 5
    return s


async def arun(s: State, i: int) -> str:
    result = Runner.run_streamed(s.agent, harness.prompt(i), max_turns=s.max_turns)
    async for _ev in result.stream_events():
        pass
    return str(result.final_output)


async def aclose(s: State) -> None:
    await s.client.close()


if __name__ == "__main__":
    harness.main(__import__(__name__))
