"""A Celery app for the abort test: one agent task whose tool ignores an abort, as a blocking
call does. The broker (and session store) is ``$AGENTKIT_TEST_BROKER``. The tool says in Redis
when it started and when the abort reached it; only its first call blocks (a wrongly resumed
run would call it again and finish)."""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from celery import Celery

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.integrations.celery import agent_task
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel, reply, tool_call

BROKER = os.environ["AGENTKIT_TEST_BROKER"]
IN_TOOL, IGNORED, CALLS = "abort-test:in-tool", "abort-test:ignored", "abort-test:calls"

app = Celery("abort_test", broker=BROKER, backend=BROKER)
app.conf.update(task_track_started=True, worker_prefetch_multiplier=1,
                broker_connection_retry_on_startup=True)  # fmt: skip


@tool(idempotent=True)
def export(signal: AbortSignal) -> str:
    """Export the report (a long call that does not stop when aborted)."""
    client = redis.Redis.from_url(BROKER)
    if client.incr(CALLS) == 1:
        client.rpush(IN_TOOL, os.getpid())
        signal.wait()
        client.rpush(IGNORED, os.getpid())  # the abort arrived; the call goes on regardless
        threading.Event().wait()  # until the pool process is killed
    return "exported"


def answer(context: Any, options: Any) -> Any:
    if context.messages[-1].role == "tool_result":
        return "Exported."
    return reply("Exporting.", tool_call("export"))


def build_agent(session: Session) -> Agent:
    model = ScriptedModel([answer] * 5)
    return Agent(model=model.model, stream_fn=model, tools=[export], system_prompt="s",
                 tool_abort_grace=120.0, session=session)  # fmt: skip


run_export = agent_task(app, build_agent, store=BROKER, name="abort_test.run")
