"""Agents on Celery workers with durable sessions: a run survives the death of its worker.

Run it (a Redis server on 127.0.0.1:6379, or set ``AGENTKIT_CELERY_BROKER``)::

    cd samples
    celery -A celery_worker worker --loglevel=INFO          # one or more workers
    python celery_worker.py "Summarise the incident report"  # a client, in another terminal

The conversation lives in a session (Redis, the broker's own server, unless
``AGENTKIT_SESSIONS`` names another store); the task only names the session. What happens:

- The client appends the prompt to the session, sends the task, and follows the run's events
  live through a Redis stream, from any process (``RunChannel``); it can steer or abort the run.
- SUCCESS for a run that ended normally, with its answer. FAILURE (``AgentRunFailedError``) for a run
  that ended in an error or was aborted: a half-written answer is never a success.
- A pool process killed mid-run (SIGKILL, out of memory): the task goes back to the queue
  (``acks_late`` + ``reject_on_worker_lost``), another worker resumes it from the session, and
  ``read_report``, marked idempotent, runs again; a tool not so marked would get an
  "interrupted; not re-run" error result instead. Every message is in the session once.
- The whole worker killed: its task stays unacknowledged until Redis's visibility timeout
  (``AGENTKIT_CELERY_VISIBILITY_TIMEOUT``, 1 hour by default) passes; then another worker
  resumes it the same way.
- A soft time limit aborts the run (``prompt()`` aborts it when the limit's exception arrives).
- A client's abort is recorded before it takes effect: a worker killed inside the abort grace
  leaves a redelivered task that ends aborted too.
- A second message while a run goes (``submit()`` again): the running run takes it after its
  tool batch, like a steer; the second task waits for the session (one run per session at a
  time) and finds it answered.
"""

from __future__ import annotations

import os
import sys
import uuid
from typing import Any

from _support import last_text, model_spec, real_model, rule_model, scripted_delay
from celery import Celery

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.integrations.celery import RunChannel, agent_task, submit
from agentkit.sessions import Session
from agentkit.testing import SCRIPTED_MODEL, Reply, reply, tool_call

BROKER = os.environ.get("AGENTKIT_CELERY_BROKER", "redis://127.0.0.1:6379/0")
SESSIONS = os.environ.get("AGENTKIT_SESSIONS") or BROKER
READ_SECONDS = float(os.environ.get("AGENTKIT_SAMPLE_READ_SECONDS", "1.0"))
"""How long read_report's (simulated) slow I/O takes."""
VISIBILITY_TIMEOUT = float(os.environ.get("AGENTKIT_CELERY_VISIBILITY_TIMEOUT", "3600"))
"""Seconds after which Redis gives a dead worker's unacknowledged task to another worker; keep
it above your longest run, or a run still going is started a second time (one of the two then
fails on the session's version check; nothing is duplicated)."""

app = Celery("agentkit_samples", broker=BROKER, backend=BROKER)
app.conf.update(
    task_track_started=True,  # STARTED while the agent runs
    worker_prefetch_multiplier=1,  # agent runs are long: take one at a time
    result_extended=True,
    broker_connection_retry_on_startup=True,
    broker_transport_options={
        "visibility_timeout": VISIBILITY_TIMEOUT,
        "unacked_restore_interval": min(10.0, VISIBILITY_TIMEOUT / 4),  # sweep for lost tasks
        "unacked_restore_throttle": 1,
    },
)


@tool(idempotent=True)  # reading twice does no harm: a resumed run may read again
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


def build_agent(session: Session) -> Agent:
    """An agent on ``session``, on the demo model or the real model ``AGENTKIT_MODEL`` names."""
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
        session=session,
    )


run_agent = agent_task(
    app,
    build_agent,
    store=SESSIONS,
    name="agentkit_samples.run_agent",
    soft_time_limit=300,
    time_limit=330,
)


def ask(prompt: str, session_name: str | None = None) -> str:
    """Send ``prompt`` to a worker, print the run's progress as it happens, return the answer."""
    session = Session(session_name or f"sample-{uuid.uuid4().hex[:8]}", SESSIONS)
    result = submit(run_agent, session, prompt)
    print(f"session {session.name}, task {result.id}: waiting...")
    channel = RunChannel(BROKER, result.id)
    try:
        for _id, event in channel.follow():
            if event is not None and event["type"] == "tool_execution_start":
                print(f"  running {event['tool_name']}...")
    finally:
        channel.close()
    return str(result.get(timeout=120)["answer"])


if __name__ == "__main__":
    print(ask(" ".join(sys.argv[1:]) or "Summarise the incident report"))
