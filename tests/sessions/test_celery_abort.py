"""A client's abort, applied by a real Celery prefork worker whose pool process is then
SIGKILLed inside the abort grace: the redelivered task ends aborted, it does not carry on."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

from agentkit import runlog
from agentkit.integrations.celery import RunChannel, submit
from agentkit.sessions import Session, open_store
from tests.servers import RedisServer, celery_worker, worker_env
from tests.sessions.invariants import assert_well_formed

pytestmark = pytest.mark.processes

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
WAIT = 60.0


@pytest.fixture
def abort_app(redis_server: RedisServer) -> Iterator[ModuleType]:
    """The test app, and one prefork worker consuming its queue."""
    env = worker_env(AGENTKIT_TEST_BROKER=redis_server.url,
                     PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))  # fmt: skip
    saved = dict(os.environ)
    os.environ.update(env)
    sys.path.insert(0, str(HERE))
    try:
        import celery_abort_app
    finally:
        sys.path.remove(str(HERE))
        os.environ.clear()
        os.environ.update(saved)
    with celery_worker("celery_abort_app", HERE, env, "abort", WAIT):
        yield celery_abort_app


def test_an_abort_is_durable_across_a_pool_process_killed_in_the_grace(
    abort_app: ModuleType, redis_server: RedisServer, name: str
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.delete(abort_app.IN_TOOL, abort_app.IGNORED, abort_app.CALLS)
    try:
        result = submit(abort_app.run_export, Session(name, redis_server.url), "Export it")
        popped = client.blpop([abort_app.IN_TOOL], timeout=int(WAIT))
        assert popped is not None, "the tool never started"
        with open_store(redis_server.url) as store:  # the run is in its store's run log
            assert runlog.run_info(store, result.id).live
            assert result.id in [r.id for r in runlog.live_runs(store)]
        channel = RunChannel(redis_server.url, result.id)
        channel.abort()
        channel.close()
        popped = client.blpop([abort_app.IGNORED], timeout=int(WAIT))
        assert popped is not None, "the abort never reached the tool"
        os.kill(int(popped[1]), signal.SIGKILL)  # inside the 120 s abort grace
        with pytest.raises(Exception, match="aborted") as raised:
            result.get(timeout=WAIT)
        assert type(raised.value).__name__ == "AgentRunFailedError"
        assert result.state == "FAILURE"
        assert client.get(abort_app.CALLS) == b"1"  # not re-run on the redelivery
    finally:
        client.close()
    stored = Session(name, redis_server.url).load()
    assert [m.role for m in stored] == ["user", "assistant", "tool_result"]  # no new request
    assert stored[-1].is_error and stored[-1].content[0].text == "Operation aborted"
    assert_well_formed(stored)
    with open_store(redis_server.url) as store:  # one log for both attempts, ended as aborted
        events = list(runlog.attach(store, result.id))
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].data["stop_reason"] == "aborted"
