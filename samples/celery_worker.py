"""Agents in Celery tasks, with Redis as the broker and the result backend.

Run it (a Redis server on 127.0.0.1:6379, or set ``AGENTKIT_CELERY_BROKER``)::

    cd samples
    celery -A celery_worker worker --loglevel=INFO          # the worker, in one terminal
    python celery_worker.py "Summarise the incident report"  # a client, in another

A task blocks in ``agent.prompt()`` like any other blocking call; the agent runs on a thread of
its own, so the task works under every pool (prefork, threads, solo). What a task reports:

- SUCCESS only for a run that ended normally, with its answer and new messages.
- FAILURE for a run that ended in an error or was aborted (``AgentRunFailed``): a half-written
  answer is never reported as success.
- FAILURE (``WorkerLostError``) when the pool process running it dies mid-run (killed, out of
  memory): with ``acks_late`` the message is not acknowledged before the task ends, and with
  ``reject_on_worker_lost`` off it is not re-run either, since an agent's tools may already have
  had side effects.
- If the whole worker dies, nobody is left to record a failure: the task stays STARTED or
  PROGRESS, never SUCCESS, so clients wait with a timeout (``result.get(timeout=...)``).
- A soft time limit aborts the run (``prompt()`` aborts it when the limit's exception arrives).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from _support import last_text, model_spec, real_model, rule_model, scripted_delay
from celery import Celery, Task

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.events import to_jsonable
from agentkit.testing import SCRIPTED_MODEL, Reply, reply, tool_call

BROKER = os.environ.get("AGENTKIT_CELERY_BROKER", "redis://127.0.0.1:6379/0")
READ_SECONDS = 1.0  # how long read_report's (simulated) slow I/O takes
logger = logging.getLogger(__name__)

app = Celery("agentkit_samples", broker=BROKER, backend=BROKER)
app.conf.update(
    task_acks_late=True,  # acknowledge when the task ends, not when it starts
    task_reject_on_worker_lost=False,  # a lost worker fails the task instead of re-running it
    task_track_started=True,  # STARTED while the agent runs
    worker_prefetch_multiplier=1,  # agent runs are long: take one at a time
    result_extended=True,
    broker_connection_retry_on_startup=True,
)


class AgentRunFailed(Exception):
    """The agent's run ended in an error or was aborted."""


@tool
def read_report(name: str, signal: AbortSignal) -> str:
    """Read an internal report.

    Args:
        name: The report's name.
    """
    if signal.wait(READ_SECONDS):  # slow I/O, cut short by an abort
        signal.throw_if_aborted()
    return f"{name}: the database ran out of disk at 03:12 and was back at 03:40."


def demo_answer(messages: list[Any]) -> Reply | str:
    """The offline demo model: read the report, then summarise it."""
    last = messages[-1]
    if last.role == "tool_result":
        return f"Summary: {last_text([last]).split(': ', 1)[-1]}"
    if "fail" in last_text([last]).lower():
        return reply(error="the model provider is overloaded")
    return reply("Reading it.", tool_call("read_report", {"name": "incident-42"}))


def build_agent() -> Agent:
    """An agent on the demo model, or on the real model ``AGENTKIT_MODEL`` names."""
    spec = model_spec()
    if spec:
        model, stream_fn = real_model(spec)
    else:
        model, stream_fn = SCRIPTED_MODEL, rule_model(demo_answer, delay=scripted_delay(0.0))
    return Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="You summarise internal reports. Use read_report.",
        tools=[read_report],
    )


@app.task(bind=True, name="agentkit_samples.run_agent", soft_time_limit=300, time_limit=330)
def run_agent(self: Task, prompt: str) -> dict[str, Any]:
    """Run an agent on ``prompt``; return its answer and new messages (JSON)."""
    agent = build_agent()
    task_id = self.request.id  # the request is thread-local: read it on the task's thread

    def progress(event: Any) -> None:  # on the agent's thread: publish what it is doing
        if event.type == "tool_execution_start":
            try:
                self.update_state(task_id=task_id, state="PROGRESS", meta={"tool": event.tool_name})
            except Exception:  # a listener that raises would fail the run: just log
                logger.warning("could not publish progress", exc_info=True)

    agent.subscribe(progress)
    with agent:
        new_messages = agent.prompt(prompt)
    last = new_messages[-1]
    if last.stop_reason in ("error", "aborted"):
        raise AgentRunFailed(f"{last.stop_reason}: {last.error_message}")
    return {"answer": last_text([last]), "messages": to_jsonable(new_messages)}


if __name__ == "__main__":
    result = run_agent.delay(" ".join(sys.argv[1:]) or "Summarise the incident report")
    print(f"task {result.id} sent; waiting...")
    print(result.get(timeout=120)["answer"])
