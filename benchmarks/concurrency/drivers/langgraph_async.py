#!/usr/bin/env python3
"""langgraph, native asyncio: asyncio.gather of N `await graph.ainvoke(...)` on one graph.

Prebuilt create_react_agent (deprecated in langgraph 1.x for langchain.agents.create_agent,
still shipped; the warning is silenced) with langchain-openai ChatOpenAI(streaming=True,
base_url=fake server; its default client: up to 1000 connections, 100 kept alive).
recursion_limit 2*TURNS+10 (each round is two graph steps). The native tool is an async def;
--tool sync gives a plain function, which langchain runs in the loop's default thread pool.
LangSmith tracing stays off (no env).
"""

import harness  # noqa: I001  (first: times the imports that follow)

import warnings
from importlib.metadata import version as _dist_version

warnings.filterwarnings("ignore")

from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

FRAMEWORK = "langgraph"
MODE = "asyncio"
NATIVE_TOOL = "async"


def version() -> str:
    return (f"langgraph {_dist_version('langgraph')} (langchain-openai "
            f"{_dist_version('langchain-openai')}, langchain-core {_dist_version('langchain-core')})")


class State:
    pass


async def abuild(args) -> State:
    s = State()
    s.llm = ChatOpenAI(model=harness.MODEL, base_url=args.base_url, api_key=harness.API_KEY,
                       streaming=True)
    s.graph = create_react_agent(s.llm, tools=[harness.tool_fn(args)], prompt=harness.SYSTEM)
    s.config = {"recursion_limit": 2 * args.turns + 10}
    return s


async def arun(s: State, i: int) -> str:
    out = await s.graph.ainvoke({"messages": [{"role": "user", "content": harness.prompt(i)}]},
                                config=s.config)
    return str(out["messages"][-1].content)


if __name__ == "__main__":
    harness.main(__import__(__name__))
