"""A client's abort, applied by a real Celery prefork worker whose pool process is then
SIGKILLed inside the abort grace: the redelivered task ends aborted, it does not carry on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

from agentkit.integrations.celery import RunChannel, submit
from agentkit.sessions import Session
from tests.servers import RedisServer, worker_env
from tests.sessions.invariants import assert_well_formed

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
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_abort_app", "worker", "--pool=prefork",
         "--concurrency=1", "--loglevel=INFO", "--without-heartbeat", "--without-gossip",
         "--without-mingle", f"--hostname=abort-{os.getpid()}@test"],
        cwd=HERE, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    ready = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            lines.append(line)
            if " ready." in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(WAIT), "the worker did not start:\n" + "".join(lines)
        yield celery_abort_app
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(5)
        reader.join(5)


def test_an_abort_is_durable_across_a_pool_process_killed_in_the_grace(
    abort_app: ModuleType, redis_server: RedisServer, name: str
) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.delete(abort_app.IN_TOOL, abort_app.IGNORED, abort_app.CALLS)
    try:
        result = submit(abort_app.run_export, Session(name, redis_server.url), "Export it")
        popped = client.blpop([abort_app.IN_TOOL], timeout=int(WAIT))
        assert popped is not None, "the tool never started"
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
