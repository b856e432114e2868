#!/usr/bin/env python3
"""agentkit, asyncio style: asyncio.gather of N `await agent.aprompt(...)`, one fresh Agent each.

aprompt() (agentkit.aio) starts the run on the agent's worker thread and awaits its end
through loop.call_soon_threadsafe: the loop is never blocked, but each run still has its
worker thread (and tool thread), so this row shows what the asyncio surface costs on top
of agentkit_threads. Same Model, provider and tool as agentkit_threads.
"""

import harness  # noqa: I001  (first: times the imports that follow)

from agentkit_threads import State, final_text, version  # noqa: F401  (same agent, same model)

FRAMEWORK = "agentkit_aio"
MODE = "asyncio"
NATIVE_TOOL = "sync"


async def abuild(args) -> State:
    return State(args)


async def arun(state: State, i: int) -> str:
    agent = state.new_agent()
    try:
        return final_text(await agent.aprompt(harness.prompt(i)))
    finally:
        agent.close()  # the run is over: returns at once


if __name__ == "__main__":
    harness.main(__import__(__name__))
