"""Run logs across real processes, on SQLite, Redis and PostgreSQL: a run's process killed with
SIGKILL ends as ``interrupted`` for its followers, and an attempt delivered again goes on under
the same id and log; an abort sent from another process reaches the running tool; a hundred
followers of one run; a log of 100,000 deltas."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agentkit import runlog
from agentkit.sessions import SessionStore, open_store
from tests.servers import worker_env
from tests.sessions.runlog_support import collect, text_of

pytestmark = pytest.mark.processes

CHILD = str(Path(__file__).with_name("runlog_child.py"))
ROOT = str(Path(__file__).resolve().parents[2])
WAIT = 60.0  # generous: every wait here takes well under it
LEASE = 1.0


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``spawn(store_url, session, run_id, mode)``: the child, its stdout a pipe; killed after."""
    children: list[subprocess.Popen[str]] = []

    def start(store_url: str, session: str, run_id: str, mode: str) -> subprocess.Popen[str]:
        env = worker_env(PYTHONPATH=ROOT)
        child = subprocess.Popen([sys.executable, CHILD, store_url, session, run_id, str(LEASE),
                                  mode], stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(WAIT)
        if child.stdout is not None:
            child.stdout.close()


def line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    return child.stdout.readline().strip()


def test_a_killed_run_ends_interrupted_and_its_next_attempt_goes_on_in_the_same_log(
    store_url: str, store: SessionStore, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    store.run_log().lease = LEASE
    run_id = f"killed-{uuid.uuid4().hex}"
    child = spawn(store_url, name, run_id, "wait")
    assert line(child) == "started"
    seen: list[runlog.RunEvent] = []
    follower = threading.Thread(target=lambda: seen.extend(runlog.attach(store, run_id)))
    follower.start()
    child.kill()
    child.wait(WAIT)
    killed = time.monotonic()
    follower.join(WAIT)
    ended_in = time.monotonic() - killed
    assert not follower.is_alive(), "a follower of a killed run must not hang"
    assert seen[-1].type == "run_end" and seen[-1].data["stop_reason"] == "interrupted"
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    print(f"\n{store_url.split(':')[0]}: a SIGKILLed run ended as interrupted {ended_in:.2f} s "
          f"after the kill (lease {LEASE} s)")  # fmt: skip
    # The task is delivered again (Celery's acks_late): same id, same log, going on after it.
    again = spawn(store_url, name, run_id, "resume")
    assert line(again) == "ended stop"
    later = collect(store, run_id, after=seen[-1].seq)
    assert later[0].type == "run_start" and later[0].data["resumed"] is True
    assert later[0].seq == seen[-1].seq + 1 and later[-1].data["stop_reason"] == "stop"
    assert "Resumed and done." in text_of(later)
    assert runlog.run_info(store, run_id).stop_reason == "stop"


def test_an_abort_from_another_process_reaches_the_running_tool(
    store_url: str, store: SessionStore, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    latencies = []
    for attempt in range(3):
        run_id = f"abort-{attempt}-{uuid.uuid4().hex}"
        child = spawn(store_url, f"{name}-{attempt}", run_id, "wait")
        assert line(child) == "started"
        sent = time.time()
        assert runlog.abort(store, run_id)
        reached = line(child).split()
        assert reached[0] == "aborted"
        latencies.append((float(reached[1]) - sent) * 1000)
        assert line(child) == "ended aborted"
        assert runlog.run_info(store, run_id).stop_reason == "aborted"
    # Reported, not asserted (a busy machine may be slow): benchmarks/bench_runlog.py measures.
    print(f"\n{store_url.split(':')[0]}: abort reached the tool in "
          f"{', '.join(f'{ms:.0f}' for ms in latencies)} ms")  # fmt: skip


def test_a_hundred_followers_of_one_run_each_get_every_event_once(
    store_url: str, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    run_id = f"crowd-{uuid.uuid4().hex}"
    stores = [open_store(store_url) for _ in range(4)]
    child = spawn(store_url, name, run_id, "deltas:400:0.004")
    assert line(child) == "started"
    while True:  # the run is registered once its first event is out
        try:
            runlog.run_info(stores[0], run_id)
            break
        except runlog.RunNotFoundError:
            time.sleep(0.01)
    results: list[list[int]] = [[] for _ in range(100)]
    texts = [""] * 100

    def follow(index: int) -> None:
        events = list(runlog.attach(stores[index % 4], run_id))
        results[index] = [e.seq for e in events]
        texts[index] = text_of(events)

    followers = [threading.Thread(target=follow, args=(i,)) for i in range(100)]
    for follower in followers:
        follower.start()
    for follower in followers:
        follower.join(WAIT)
    assert line(child) == "ended stop"
    last = runlog.run_info(stores[0], run_id).last_seq
    assert all(seqs == list(range(1, last + 1)) for seqs in results)
    assert all(text == "x" * 400 for text in texts)
    for opened in stores:
        opened.close()


def test_a_log_of_100000_deltas(store: SessionStore, name: str) -> None:
    log = store.run_log()
    run_id = f"deltas-{uuid.uuid4().hex}"
    log.start(run_id, name)
    seq = 0
    began = time.monotonic()
    for _ in range(100):
        batch = []
        for _ in range(1000):
            seq += 1
            batch.append((seq, json.dumps({"type": "message_update", "t": seq, "update": {
                "type": "text_delta", "content_index": 0, "delta": chr(97 + seq % 26)}})))
        assert log.append(run_id, batch)
    log.end(run_id, json.dumps({"type": "run_end", "stop_reason": "stop", "t": seq}))
    written = time.monotonic() - began
    expected = "".join(chr(97 + n % 26) for n in range(1, 100_001))
    began = time.monotonic()
    events = collect(store, run_id)
    read = time.monotonic() - began
    assert len(events) == 100_001 and text_of(events) == expected
    assert text_of(collect(store, run_id, after=73_210)) == expected[73_210:]
    began = time.monotonic()
    assert runlog.compact(store, run_id) == 99_999
    compacted = time.monotonic() - began
    assert [e.type for e in collect(store, run_id)] == ["message_update", "run_end"]
    assert text_of(collect(store, run_id, after=73_210)) == expected[73_210:]
    assert text_of(collect(store, run_id)) == expected
    print(f"\n{type(store).__name__}: 100,000 deltas written in {written:.1f} s, read back in "
          f"{read:.1f} s, coalesced in {compacted:.1f} s")  # fmt: skip


def test_a_run_of_100000_deltas_is_followed_whole(
    store_url: str, store: SessionStore, name: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("one store is enough for the run itself; the log is tested on every store")
    run_id = f"long-{uuid.uuid4().hex}"
    child = spawn(store_url, name, run_id, "deltas:100000:0")
    assert line(child) == "started"
    assert line(child) == "ended stop"
    events = collect(store, run_id)
    assert text_of(events) == "x" * 100_000
    assert len(events) < 100_000  # deltas that piled up were written as one
