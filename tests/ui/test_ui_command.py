"""``agentkit ui`` as a user starts it: it prints a URL with the secret, serves it, and stops on
Ctrl-C (SIGINT) with status 0, leaving no run behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from agentkit.sessions import Session, SqliteStore
from tests.support import foreground_sigint

from ..support import WAIT

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_serves_the_page_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    main = "from agentkit.cli import console_main; console_main()"
    command = [sys.executable, "-c", main, "ui", "--store", str(store),
               "--agent", "tests.ui.factory:build"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=foreground_sigint,  # Ctrl-C reaches it even under `pytest &`
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        url = next(word for line in lines for word in line.split() if word.startswith("http://"))
        assert url.startswith("http://127.0.0.1:") and "?token=" in url
        client = requests.Session()
        assert client.get(url, timeout=WAIT).status_code == 200
        base = url.split("?")[0].rstrip("/")
        page = client.get(base + "/", timeout=WAIT).text
        csrf = page.split('data-csrf="')[1].split('"')[0]
        started = client.post(
            base + "/new",
            data={"session": "from-cli", "text": "hi", "csrf": csrf},
            headers={"Origin": base, "Accept": "application/json"},
            timeout=WAIT,
        )
        assert started.status_code == 200, started.text
        events = client.get(base + "/s/from-cli/events", timeout=WAIT).text
        assert "event: agent_end" in events and json.dumps("Hello from the page.")[1:-1] in events
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=WAIT * 4)
    assert process.returncode == 0, err
    assert "stopped" in err
    assert "token=" not in err  # the access log shows paths without the secret
    assert '"GET /s/from-cli/events" 200' in err  # requests are still logged
    messages = Session("from-cli", SqliteStore(store)).load()
    assert messages[-1].content[0].text == "Hello from the page."
