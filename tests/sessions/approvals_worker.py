"""A Celery app for the deferred-approval tests: an agent whose ``refund`` tool needs approval,
nobody blocks for it (``Approvals(defer=True)``), and every refund that really runs appends a
line to a ledger file, so the test counts executions across processes.

Started by tests/sessions/test_approvals.py as ``celery -A approvals_worker worker`` with
``AGENTKIT_TEST_BROKER`` (a Redis URL: broker, result backend and session store) and
``AGENTKIT_TEST_LEDGER`` set."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from agentkit import Agent, Approvals, tool
from agentkit.integrations.celery import agent_task
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel, reply, tool_call

BROKER = os.environ["AGENTKIT_TEST_BROKER"]
LEDGER = os.environ["AGENTKIT_TEST_LEDGER"]

app = Celery("approvals_worker", broker=BROKER, backend=BROKER)
app.conf.update(worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True,
                result_extended=True)  # fmt: skip


@tool(requires_approval=True)
def refund(order: str, amount: int) -> str:
    """Refund an order.

    Args:
        order: The order's id.
        amount: How much to refund.
    """
    with open(LEDGER, "a", encoding="utf-8") as ledger:
        ledger.write(f"{order} {amount}\n")
    return f"refunded {amount} on {order}"


def support_model(context: Any, options: Any) -> Any:
    """Refund the order; then say what happened."""
    last = context.messages[-1]
    if last.role == "tool_result":
        return reply(f"Done: {last.content[0].text}")
    return reply(tool_call("refund", {"order": "A-7", "amount": 30}))


def build_agent(session: Session) -> Agent:
    model = ScriptedModel([support_model] * 10)
    return Agent(model=model.model, stream_fn=model, tools=[refund], session=session,
                 approvals=Approvals(defer=True))  # fmt: skip


run_agent = agent_task(app, build_agent, store=BROKER)
