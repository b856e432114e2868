"""A child process for the reload test: a new process opens the session an earlier process
wrote, and its model reads the output that process kept (over the parent's replay server).
Prints the retrieval's result text as one JSON line.

Usage: ``python -m tests.context.outputs_child STORE_PATH SESSION SERVER_URL``.
"""

from __future__ import annotations

import json
import sys

from agentkit import Agent
from agentkit.context import ToolOutputLimit
from agentkit.sessions import Session
from agentkit.types import ToolResultMessage
from tests.providers.replay_server import API_KEY, make_model


def main(store: str, name: str, url: str) -> None:
    agent = Agent(
        model=make_model("openai-completions", url, context_window=4096),
        session=Session(name, store), policies=[ToolOutputLimit()],
        api_key=API_KEY, retry_base_delay_ms=1, max_retries=0, timeout=(5, 5),
    )  # fmt: skip
    result = agent.prompt("which line has the order?")
    read = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    print(json.dumps({"stop": result.stop_reason, "text": read[-1].content[0].text,
                      "error": read[-1].is_error}))  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:4])
