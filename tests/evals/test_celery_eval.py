"""An evaluation as a Celery task, on a real prefork worker with a real Redis broker."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from agentkit.evals import Dataset, EqualsExpected, SameToolCalls
from agentkit.sessions import open_store
from tests.evals.support import record_sessions
from tests.servers import RedisServer, celery_worker, worker_env

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
WAIT = 60.0


@pytest.fixture
def eval_app(redis_server: RedisServer) -> Iterator[ModuleType]:
    """The app, and one prefork worker consuming its queue."""
    env = worker_env(AGENTKIT_TEST_BROKER=redis_server.url, PYTHONPATH=str(ROOT))
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        from tests.evals import celery_eval_app
    finally:
        os.environ.clear()
        os.environ.update(saved)
    with celery_worker("tests.evals.celery_eval_app", ROOT, env, "eval", WAIT):
        yield celery_eval_app


def test_a_replayed_suite_runs_in_a_celery_task(eval_app: ModuleType, tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    record_sessions(store, 3)
    path = Dataset.from_sessions(store, evaluators=[EqualsExpected(), SameToolCalls()]).to_file(
        tmp_path / "cases.json"
    )
    store.close()
    outcome = eval_app.run_suite.delay(str(path), 4).get(timeout=WAIT)
    report = outcome["report"]
    assert report["counts"]["passed"] == 6 and report["pass_rate"] == 1.0
    assert report["mode"] == "replay" and not report["interrupted"]
    assert outcome["threads_after"] == outcome["threads_before"]
