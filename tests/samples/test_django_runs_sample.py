"""The Django-under-gunicorn sample (``samples/django_runs``) as it is run: gunicorn with its
three worker processes, a run started by one request, its events followed by requests that
reconnect to the other workers, and its abort sent through another worker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.servers import free_port, worker_env
from tests.sessions.runlog_support import WAIT, connect, elsewhere, every_worker_up, frames

pytestmark = pytest.mark.processes

pytest.importorskip("gunicorn", reason="the test extra installs gunicorn")

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
ROOT = str(SAMPLES.parent)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[float], str]]:
    """``serve(research_seconds)``: the sample under gunicorn, as its docstring says; its URL."""
    servers: list[subprocess.Popen[bytes]] = []

    def start(research: float) -> str:
        port = free_port()
        env = worker_env(PYTHONPATH=f"{ROOT}:{SAMPLES}", AGENTKIT_BIND=f"127.0.0.1:{port}",
                         AGENTKIT_SESSIONS=f"sqlite:///{tmp_path / 'runs.db'}",
                         AGENTKIT_RESEARCH_SECONDS=str(research))  # fmt: skip
        env.pop("AGENTKIT_MODEL", None)
        servers.append(subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "django_runs/gunicorn.conf.py",
             "--log-level", "warning"], cwd=SAMPLES, env=env,
        ))  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        every_worker_up(f"{base}/", 3)
        return base

    yield start
    for server in servers:
        server.send_signal(signal.SIGTERM)
        server.wait(WAIT)


def start_run(base: str) -> dict[str, str]:
    response = requests.post(f"{base}/runs", data=json.dumps({"session": "s1",
                                                               "prompt": "solar panels"}),
                             headers={"Connection": "close"}, timeout=WAIT)  # fmt: skip
    assert response.status_code == 200, response.text
    started: dict[str, str] = response.json()
    return started


def test_a_run_is_followed_from_every_worker_event_by_event(serve: Callable[[float], str]) -> None:
    base = serve(0.3)
    started = start_run(base)
    ids: list[int] = []
    names: list[str] = []
    workers: set[str] = {str(started["worker"])}
    worker: str | None = str(started["worker"])
    while not names or names[-1] != "done":
        with connect(f"{base}/runs/{started['run_id']}/events", ids[-1] if ids else 0,
                     worker) as response:  # one event per connection, each to another worker
            worker = response.headers["X-Worker"]
            workers.add(worker)
            for event_id, name, _data in frames(response):
                names.append(name)
                if event_id is not None:
                    ids.append(int(event_id))
                    break
    assert ids == list(range(1, len(ids) + 1))
    assert names[-2:] == ["run_end", "done"]
    assert len(workers) == 3  # all three worker processes served a part of it
    shown = requests.get(f"{base}/runs/{started['run_id']}", timeout=WAIT).json()
    assert shown["stop_reason"] == "stop" and shown["events"] == ids[-1]


def test_a_run_is_aborted_through_another_worker(serve: Callable[[float], str]) -> None:
    base = serve(60)
    started = start_run(base)
    with connect(f"{base}/runs/{started['run_id']}/events", 0, None) as response:
        names = []
        for _id, name, _data in frames(response):
            names.append(name)
            if name == "tool_execution_start":  # the research is under way on the first worker
                client = elsewhere(f"{base}/", str(started["worker"]))
                aborted = client.post(f"{base}/runs/{started['run_id']}/abort", timeout=WAIT)
                assert aborted.headers["X-Worker"] != str(started["worker"])
                assert aborted.json() == {"aborted": True}
                client.close()
            if name == "done":
                break
    assert "run_end" in names
    shown = requests.get(f"{base}/runs/{started['run_id']}", timeout=WAIT).json()
    assert shown["stop_reason"] == "aborted" and not shown["live"]
