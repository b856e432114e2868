"""A run followed through a WSGI server with several worker processes (gunicorn, three workers),
on SQLite, Redis and PostgreSQL: a run started by one request runs on that worker's thread; a
client that drops its event stream after every few events and reconnects, sending
``Last-Event-ID``, to another worker process gets every event exactly once, in order; an abort
sent to another worker stops the run.

``AGENTKIT_GUNICORN_RUNS`` sets how many runs each store is tried with (60 by default; 200
for a longer trial)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from agentkit import runlog
from agentkit.sessions import SessionStore
from tests.servers import free_port, worker_env
from tests.sessions.runlog_support import connect, elsewhere, every_worker_up, frames

pytestmark = pytest.mark.processes

pytest.importorskip("gunicorn", reason="the test extra installs gunicorn")

ROOT = str(Path(__file__).resolve().parents[2])
WAIT = 60.0
RUNS = int(os.environ.get("AGENTKIT_GUNICORN_RUNS", "60"))
EVERY = 3  # the client drops its stream after this many events
CLIENTS = 6  # runs followed at once


@pytest.fixture
def site(store_url: str) -> Iterator[str]:
    """The app of ``runlog_wsgi.py`` under gunicorn with three worker processes; its URL."""
    port = free_port()
    env = worker_env(PYTHONPATH=ROOT, AGENTKIT_TEST_STORE=store_url)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "--workers", "3", "--worker-class", "gthread",
         "--threads", "24", "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "2",
         "--log-level", "warning", "tests.sessions.runlog_wsgi:app"],
        env=env, cwd=ROOT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    every_worker_up(f"{base}/runs/none/events", 3)
    yield base
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(WAIT)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(WAIT)


def follow_in_pieces(base: str, run_id: str) -> tuple[list[int], list[dict[str, Any]], int, int]:
    """Follow a run, dropping the stream after every :data:`EVERY` events; return the ids and
    data received, how many streams it took, and how many of them another worker served."""
    ids: list[int] = []
    data: list[dict[str, Any]] = []
    worker: str | None = None
    streams = moved = 0
    while True:
        response = connect(f"{base}/runs/{run_id}/events", ids[-1] if ids else 0, worker)
        assert response.status_code == 200, (response.status_code, run_id)
        streams += 1
        moved += worker is not None and response.headers["X-Worker"] != worker
        worker = response.headers["X-Worker"]
        count = 0
        with response:
            for event_id, name, payload in frames(response):
                if name == "done":
                    return ids, data, streams, moved
                assert event_id is not None, name
                ids.append(int(event_id))
                data.append(json.loads(payload))
                count += 1
                if count == EVERY:
                    break


def test_every_event_once_in_order_across_worker_processes(
    site: str, store: SessionStore, name: str
) -> None:
    def one(index: int) -> tuple[int, int]:
        started = requests.post(f"{site}/runs", params={"session": f"{name}-{index}"},
                                headers={"Connection": "close"}, timeout=WAIT).json()  # fmt: skip
        ids, data, streams, moved = follow_in_pieces(site, started["run_id"])
        info = runlog.run_info(store, started["run_id"])
        assert ids == list(range(1, info.last_seq + 1)), ids
        logged = runlog.logged(store, started["run_id"])
        assert [d["seq"] for d in data] == [e.seq for e in logged]
        assert data[-1]["type"] == "run_end" and data[-1]["stop_reason"] == "stop"
        text = "".join(d["delta"] for d in data if d.get("kind") == "text_delta")
        assert text == "Looking." + "y" * 30
        return streams, moved

    began = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(one, range(RUNS)))
    streams = sum(s for s, _ in results)
    moved = sum(m for _, m in results)
    assert moved > streams // 2 - RUNS  # most reconnections reached another worker process
    print(f"\n{store.display_url.split(':')[0]}: {RUNS} runs, {streams} streams, {moved} "
          f"reconnections to another worker, in {time.monotonic() - began:.1f} s")  # fmt: skip


def test_an_abort_sent_to_another_worker_stops_the_run(
    site: str, store: SessionStore, name: str
) -> None:
    started = requests.post(f"{site}/runs", params={"session": name, "chunks": "20000"},
                            headers={"Connection": "close"}, timeout=WAIT).json()  # fmt: skip
    run_id = started["run_id"]
    seen: list[str] = []

    def watch() -> None:
        with connect(f"{site}/runs/{run_id}/events", 0, None) as response:
            for _id, event, _data in frames(response):
                seen.append(event)
                if event == "done":
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    while "message_update" not in seen:
        time.sleep(0.01)
    client = elsewhere(f"{site}/runs/none/events", str(started["pid"]))  # a connection to another worker process
    response = client.post(f"{site}/runs/{run_id}/abort", timeout=WAIT)
    assert response.headers["X-Worker"] != str(started["pid"])
    assert response.json() == {"aborted": True}
    client.close()
    watcher.join(WAIT)
    assert seen[-2:] == ["run_end", "done"]
    assert runlog.run_info(store, run_id).stop_reason == "aborted"
