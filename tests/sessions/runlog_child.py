"""A child process for the run-log tests: runs one run of an agent with a session, the run's id
given, and says what happens on stdout, one line each.

Usage: ``python runlog_child.py STORE_URL SESSION RUN_ID LEASE MODE``; LEASE is the run log's
lease in seconds; MODE is

- ``wait``: the agent calls a tool that waits (60 s at most) until its run is aborted; it prints
  ``started`` when the tool runs and ``aborted <time.time()>`` when the abort reaches it;
- ``resume``: the agent continues the session (a run delivered again after its first
  attempt's process was killed) and ends it; it prints ``ended <stop_reason>``;
- ``deltas:<n>:<delay>``: the agent answers with ``n`` one-character deltas, ``delay``
  seconds apart; it prints ``started`` first and ``ended <stop_reason>`` last.
"""

from __future__ import annotations

import sys
import time

from agentkit import Agent, runlog, tool
from agentkit.abort import AbortSignal
from agentkit.sessions import Session, open_store
from agentkit.testing import ScriptedModel, reply, tool_call


def say(*words: object) -> None:
    print(*words, flush=True)


def main(store_url: str, name: str, run_id: str, lease: float, mode: str) -> None:
    store = open_store(store_url)
    store.run_log().lease = lease

    @tool
    def wait_for_abort(signal: AbortSignal) -> str:
        """Work until aborted."""
        say("started")
        if signal.wait(60):
            say("aborted", repr(time.time()))
        return "stopped"

    if mode.startswith("deltas:"):
        _, count, delay = mode.split(":")
        model = ScriptedModel([reply("x" * int(count), delay=float(delay))], chunk_size=1)
    elif mode == "resume":
        model = ScriptedModel(["Resumed and done."])
    else:
        model = ScriptedModel([reply(tool_call("wait_for_abort", {})), "Resumed and done."])
    agent = Agent(model=model.model, stream_fn=model, tools=[wait_for_abort],
                  session=Session(name, store))  # fmt: skip
    with runlog.run_id(run_id):
        if mode == "resume":
            result = agent.continue_()
        else:
            if mode.startswith("deltas:"):
                say("started")
            result = agent.prompt("go")
    say("ended", result.stop_reason)
    agent.close()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
