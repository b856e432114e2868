"""A child process for the compaction crash test: an agent with compaction on a session runs
until its first compaction record is durable, prints the view the model would see next (one JSON
line), says ``ready``, and waits to be killed before any further message.

Usage: ``python -m tests.policies.compaction_crash_child STORE_URL SESSION``.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from agentkit.compaction import Compaction
from agentkit.sessions import Session
from agentkit.transcript import COMPACTION_ROLE, compacted_view
from agentkit.types import role_of
from tests.compaction_support import Windowed, agent_for, view_key

FOREVER = threading.Event()  # never set: the process waits here until it is killed


def main(store_url: str, name: str) -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction(), session=Session(name, store_url))

    def listener(event: Any) -> None:
        if event.type == "message_end" and role_of(event.message) == COMPACTION_ROLE:
            print(json.dumps(view_key(compacted_view(agent.state.messages))), flush=True)
            print("ready", flush=True)
            FOREVER.wait()

    agent.subscribe(listener)
    for turn in range(20):
        agent.prompt(f"fetch page {turn}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
