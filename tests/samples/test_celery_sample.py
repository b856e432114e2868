"""The Celery sample with a real Redis server and a real (prefork) worker process."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from celery.exceptions import TimeoutError as CeleryTimeoutError
from sample_helpers import SAMPLES, wait_until

REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS_SERVER is None,
    reason="redis-server is not installed (scripts/test installs Debian's redis-server)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway Redis server on 127.0.0.1 (no persistence)."""
    import redis

    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(
        [str(REDIS_SERVER), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
         "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(host="127.0.0.1", port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        assert wait_until(answers, timeout=10), "redis-server did not start"
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        server.terminate()
        server.wait(10)


class Worker:
    """A ``celery worker`` subprocess and the log lines it wrote."""

    def __init__(self, broker: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_")}
        env["AGENTKIT_CELERY_BROKER"] = broker
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_worker", "worker",
             "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "--without-heartbeat",
             "--without-gossip", "--without-mingle", f"--hostname=test-{os.getpid()}@%h"],
            cwd=SAMPLES, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, name="worker-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    def ready(self) -> bool:
        return any(" ready." in line for line in self.lines)

    def pool_children(self) -> list[int]:
        """The pids of the worker's pool processes."""
        pid = self.process.pid
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return [int(child) for child in text.split()]

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)  # a warm shutdown
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._reader.join(5)


@pytest.fixture(scope="module")
def sample(redis_url: str) -> ModuleType:
    """The sample module, its app pointed at the test broker."""
    os.environ["AGENTKIT_CELERY_BROKER"] = redis_url
    try:
        import celery_worker
    finally:
        del os.environ["AGENTKIT_CELERY_BROKER"]
    celery_worker.app.conf.update(broker_url=redis_url, result_backend=redis_url)
    return celery_worker


@pytest.fixture(scope="module")
def worker(sample: ModuleType, redis_url: str) -> Iterator[Worker]:
    """A real worker (prefork, one pool process) consuming from the test broker."""
    started = Worker(redis_url)
    try:
        if not wait_until(started.ready, timeout=30, step=0.1):
            raise AssertionError("the worker did not start:\n" + "".join(started.lines))
        yield started
    finally:
        started.stop()


def test_task_runs_an_agent(sample: ModuleType, worker: Worker) -> None:
    result = sample.run_agent.delay("Summarise the incident report")
    value = result.get(timeout=20)
    assert result.state == "SUCCESS"
    assert value["answer"].startswith("Summary: the database ran out of disk")
    roles = [m["role"] for m in value["messages"]]
    assert roles == ["user", "assistant", "tool_result", "assistant"]


def test_task_reports_progress_while_the_agent_runs(sample: ModuleType, worker: Worker) -> None:
    result = sample.run_agent.delay("Summarise the incident report")
    assert wait_until(lambda: result.state == "PROGRESS", timeout=10)
    assert result.info == {"tool": "read_report"}
    result.get(timeout=20)


def test_failed_run_is_a_failed_task(sample: ModuleType, worker: Worker) -> None:
    """A run that ends in a provider error is FAILURE, never SUCCESS with half an answer."""
    result = sample.run_agent.delay("This one will fail")
    with pytest.raises(Exception, match="the model provider is overloaded"):
        result.get(timeout=20)
    assert result.state == "FAILURE"
    assert type(result.result).__name__ == "AgentRunFailed"


def test_soft_time_limit_aborts_the_run(sample: ModuleType, worker: Worker) -> None:
    result = sample.run_agent.apply_async(("Summarise the incident report",), soft_time_limit=0.3)
    with pytest.raises(Exception) as raised:
        result.get(timeout=20)
    assert type(raised.value).__name__ == "SoftTimeLimitExceeded"
    assert result.state == "FAILURE"
    # The worker's process is fine: the next task runs to the end.
    assert sample.run_agent.delay("Summarise it again").get(timeout=20)["answer"]


def test_command_line_client(redis_url: str, worker: Worker) -> None:
    """``python celery_worker.py PROMPT`` sends the task to the worker and prints the answer."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKIT_")}
    env["AGENTKIT_CELERY_BROKER"] = redis_url
    done = subprocess.run(
        [sys.executable, str(SAMPLES / "celery_worker.py"), "Summarise the incident report"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "Summary: the database ran out of disk" in done.stdout


def test_worker_killed_mid_run_fails_the_task(sample: ModuleType, worker: Worker) -> None:
    """SIGKILL the pool process while the agent's tool runs: the task must not look done."""
    result = sample.run_agent.delay("Summarise the incident report")
    assert wait_until(lambda: result.state == "PROGRESS", timeout=10)
    (child,) = worker.pool_children()
    os.kill(child, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        result.get(timeout=20)
    assert type(raised.value).__name__ == "WorkerLostError"
    assert result.state == "FAILURE"
    assert time.monotonic() - started < 20
    # Nothing was re-run behind our back: the state stays FAILURE.
    time.sleep(0.5)
    assert result.state == "FAILURE"


def test_whole_worker_killed_mid_run_never_reports_success(
    sample: ModuleType, worker: Worker
) -> None:
    """Kill the worker and its pool at once: nobody is left to record a failure, so the task
    must simply never look done; a client waiting with a timeout sees the timeout."""
    result = sample.run_agent.delay("Summarise the incident report")
    assert wait_until(lambda: result.state == "PROGRESS", timeout=10)
    for pid in [worker.process.pid, *worker.pool_children()]:
        os.kill(pid, signal.SIGKILL)
    worker.process.wait(5)
    try:
        with pytest.raises(CeleryTimeoutError):
            result.get(timeout=1.5)
        assert result.state == "PROGRESS"  # never SUCCESS: the answer was never written
    finally:
        result.backend.remove_pending_result(result)  # stop listening while Redis is up
