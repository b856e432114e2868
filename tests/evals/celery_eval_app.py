"""A Celery app whose task runs an evaluation: a regression suite on a worker. The broker (and
result backend) is ``$AGENTKIT_TEST_BROKER``."""

from __future__ import annotations

import os
import threading
from typing import Any

from celery import Celery

from agentkit.evals import Dataset
from tests.evals.desk_app import make_agent

BROKER = os.environ["AGENTKIT_TEST_BROKER"]

app = Celery("eval_test", broker=BROKER, backend=BROKER)
app.conf.update(worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True)


@app.task(name="eval_test.run_suite")
def run_suite(path: str, concurrency: int) -> dict[str, Any]:
    """Replay the dataset at ``path``; return the report and the worker's thread count around
    the run (the evaluation's threads must be gone after it)."""
    before = threading.active_count()
    report = Dataset.from_file(path).run(make_agent, mode="replay", concurrency=concurrency)
    return {"report": report.to_dict(), "threads_before": before,
            "threads_after": threading.active_count()}  # fmt: skip
