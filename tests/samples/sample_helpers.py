"""Helpers for the sample tests: ``samples/`` on the import path, scripted models only."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
if str(SAMPLES) not in sys.path:
    sys.path.insert(0, str(SAMPLES))


PYTHONS = {"python", "python3", f"python3.{sys.version_info[1]}"}


@pytest.fixture(scope="module")
def kernel_name() -> str:
    """``python3``, made to launch this interpreter (installed into the venv if need be)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        argv = KernelSpecManager().get_kernel_spec("python3").argv
    except NoSuchKernel:
        argv = []
    if not argv or (argv[0] not in PYTHONS and Path(argv[0]) != Path(sys.executable)):
        subprocess.run(
            [sys.executable, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"],
            check=True,
            capture_output=True,
        )
    return "python3"


def client_for(nb: Any, kernel_name: str) -> Any:
    """An nbclient runner of the notebook ``nb`` on the kernel, in the samples' folder."""
    from nbclient import NotebookClient

    return NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=60,
        resources={"metadata": {"path": str(SAMPLES)}},  # the notebook's folder, as in Jupyter
    )


def text_of(cell: Any) -> str:
    """What a notebook cell printed."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


@pytest.fixture(autouse=True)
def scripted_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never let a developer's ``AGENTKIT_MODEL`` send a test to a real model."""
    monkeypatch.delenv("AGENTKIT_MODEL", raising=False)
    monkeypatch.delenv("AGENTKIT_SCRIPTED_DELAY", raising=False)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


@pytest.fixture
def thread_baseline() -> Iterator[Callable[[], None]]:
    """A check that the process's thread count is back to where it was (within 5 s)."""
    before = threading.active_count()

    def check() -> None:
        ok = wait_until(lambda: threading.active_count() <= before, timeout=5.0)
        names = [t.name for t in threading.enumerate()]
        assert ok, f"threads left behind: {before} before, now {names}"

    yield check


def sse_events(response: Any) -> Iterator[tuple[str, Any]]:
    """Parse a server-sent event stream (a streaming ``requests`` response) as it arrives:
    ``(event, data)`` pairs.

    Each read takes what has arrived (``read1``): Django's development server ends a stream by
    closing the connection, where ``iter_content`` would wait for that close. And leaving this
    generator early leaves the connection open (urllib3's own stream generators close it when
    they are dropped), so a caller decides when the client goes away.
    """
    buffer = b""
    while True:
        data = response.raw.read1(65536)
        if not data:
            return
        buffer += data
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            name, payload = "message", None
            for line in block.decode().splitlines():
                if line.startswith("event: "):
                    name = line[len("event: ") :]
                elif line.startswith("data: "):
                    payload = json.loads(line[len("data: ") :])
            if payload is not None:
                yield name, payload


def stream_demo_run(base: str, timeout: float) -> dict[str, Any]:
    """Stream one run of a web sample's offline demo model (a tool call, then an answer) from
    ``POST /runs/stream`` at ``base`` and check its events; return the run as ``GET /runs/<id>``
    then shows it (finished)."""
    with requests.post(
        f"{base}/runs/stream", json={"prompt": "What time is it?"}, stream=True, timeout=timeout
    ) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = list(sse_events(r))
    names = [name for name, _ in events]
    assert names[:3] == ["run", "agent_start", "turn_start"]
    assert names[-2:] == ["agent_end", "done"]
    assert "tool_execution_end" in names
    text = "".join(
        d["delta"] for n, d in events if n == "message_update" and d["kind"] == "text_delta"
    )
    assert "Let me look at the clock." in text and "It is " in text
    run_id = events[0][1]["id"]
    assert events[-1][1] == {"id": run_id, "stop_reason": "stop"}
    shown: dict[str, Any] = requests.get(f"{base}/runs/{run_id}", timeout=timeout).json()
    assert shown["status"] == "done"
    return shown


def stream_until(
    base: str, prompt: str, until: Callable[[str, Any], bool], client: Any = requests
) -> tuple[requests.Response, str]:
    """Start a streamed run (``POST /runs/stream`` at ``base``, through ``client``: ``requests``
    or a session) and read it up to the first event ``until(name, data)`` accepts; return the
    still open response and the run's id."""
    response = client.post(f"{base}/runs/stream", json={"prompt": prompt}, stream=True)
    events = sse_events(response)
    run_id = next(events)[1]["id"]
    seen: list[tuple[str, Any]] = []
    for name, data in events:
        if until(name, data):
            return response, str(run_id)
        seen.append((name, data))
    response.close()
    raise AssertionError(f"the stream ended before the awaited event; it sent {seen!r}")


def tool_started(name: str, data: Any) -> bool:
    """For :func:`stream_until`: a tool began."""
    return name == "tool_execution_start"


def text_streaming(name: str, data: Any) -> bool:
    """For :func:`stream_until`: the answer's text is streaming."""
    return name == "message_update" and data["kind"] == "text_delta"


@pytest.fixture
def serve_flask() -> Iterator[Callable[[Any], str]]:
    """Start an app on a real threaded werkzeug server (port 0); return its base URL."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(app: Any) -> str:
        from werkzeug.serving import make_server

        server = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-server"
        )
        thread.start()
        started.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server, thread in started:
        server.shutdown()
        server.server_close()
        thread.join(5)
