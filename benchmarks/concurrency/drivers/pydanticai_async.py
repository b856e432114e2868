#!/usr/bin/env python3
"""pydantic-ai, native asyncio: asyncio.gather of N `await agent.run(...)` on one Agent.

OpenAIChatModel + OpenAIProvider(base_url=fake server), the provider's own default HTTP
client (httpx2: up to 1000 connections, 100 kept alive while idle). An event_stream_handler
makes every model request a streamed one (as the other rows are). The native tool is an
async def; --tool sync gives a plain function, which pydantic-ai runs in a worker thread
(anyio.to_thread).
"""

import harness  # noqa: I001  (first: times the imports that follow)

from importlib.metadata import version as _dist_version

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

FRAMEWORK = "pydantic-ai"
MODE = "asyncio"
NATIVE_TOOL = "async"


def version() -> str:
    return f"pydantic-ai-slim {_dist_version('pydantic-ai-slim')} (openai {_dist_version('openai')})"


async def _drain(ctx, events) -> None:
    async for _ev in events:
        pass


class State:
    pass


async def abuild(args) -> State:
    s = State()
    provider = OpenAIProvider(base_url=args.base_url, api_key=harness.API_KEY)
    s.agent = Agent(OpenAIChatModel(harness.MODEL, provider=provider), instructions=harness.SYSTEM,
                    tools=[harness.tool_fn(args)])
    s.limits = UsageLimits(request_limit=args.turns + 5)
    return s


async def arun(s: State, i: int) -> str:
    result = await s.agent.run(harness.prompt(i), usage_limits=s.limits, event_stream_handler=_drain)
    return str(result.output)


if __name__ == "__main__":
    harness.main(__import__(__name__))
