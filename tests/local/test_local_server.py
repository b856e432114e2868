"""The kept local server (``agentkit.local.kept``), with real processes: the ``agentkit``
command, the detached server it starts, its state file, lock and key, and Ctrl-C typed on a real
terminal while a run uses it. Each test keeps its server in a folder of its own and stops it
at the end; no server process may outlive a test."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests

from agentkit.local import CODER_0_5B
from agentkit.local import kept as K
from tests.support import NEEDS_EMBEDDED_MODEL, NEEDS_SMALL_MODEL

pytestmark = [
    *NEEDS_EMBEDDED_MODEL,
    pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="looks for processes in /proc"),
    NEEDS_SMALL_MODEL,
]

ROOT = Path(__file__).resolve().parents[2]
AGENTKIT = shutil.which("agentkit", path=str(Path(sys.executable).parent)) or "agentkit"
SMALL = CODER_0_5B.name
"""The model of most tests here: what they test (the kept server's lifecycle, its lock, key and
state) is the same for both models, and the smaller one loads and answers about three times
faster. The tests of a request's work stopped by Ctrl-C, and of two models at once, run the
default model."""
QUICK_DEFAULT = ["--tools", "none", "--max-turns", "1", "--system", "Answer in at most five words."]
"""A run of the default model that costs it little: no tool declarations, a short system prompt
(and, with no model named, the command says it falls back to the embedded model)."""
QUICK_RUN = [*QUICK_DEFAULT, "--model", f"local:{SMALL}"]
"""The same on :data:`SMALL`."""
START = ("server", "start", "--model", SMALL)
"""Start the kept server of :data:`SMALL`."""


def servers_in(directory: Path) -> list[int]:
    """The pids of the kept server processes whose files are in ``directory``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        inside = any(arg.startswith(str(directory).encode()) for arg in argv)
        if b"agentkit.local.kept" in argv and inside:
            if K._pid_alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def model_file(name: str) -> Path:
    """Where the weights of the embedded model ``name`` are (joined on first use)."""
    from agentkit.cli.model_choice import local_model_file

    return Path(local_model_file(name, join=False))


def model_dir_of(name: str, n_ctx: int = 4096) -> Path:
    """The kept server folder of the embedded model ``name`` (under ``AGENTKIT_SERVER_DIR``)."""
    return K.model_dir(model_file(name), n_ctx)


@pytest.fixture
def server_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder of the test's own for the kept servers. Every server is stopped afterwards."""
    root = tmp_path / "server"
    monkeypatch.setenv(K.DIR_ENV, str(root))
    for name in (K.IDLE_ENV, K.KEEP_ENV):
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.endswith("_API_KEY")]:
        monkeypatch.delenv(name)
    yield root
    K.stop_kept_servers()
    assert servers_in(root) == []


@pytest.fixture
def server_dir(server_root: Path) -> Path:
    """The server folder of :data:`SMALL` in the test's own folder."""
    return model_dir_of(SMALL)


@pytest.fixture
def default_server_dir(server_root: Path) -> Path:
    """The server folder of the default embedded model in the test's own folder."""
    from agentkit.local import DEFAULT_WEIGHTS

    return model_dir_of(DEFAULT_WEIGHTS.name)


def agentkit(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTKIT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def quick_run(workspace: Path, *extra: str, python: list[str] | None = None) -> (
    subprocess.CompletedProcess[str]
):
    command = python or [AGENTKIT]
    return subprocess.run(
        [*command, "run", "Say hello.", "--workspace", str(workspace), *QUICK_RUN, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def wait_until(condition: Callable[[], bool], timeout: float, every: float = 0.1) -> bool:
    """Whether ``condition`` became true within ``timeout`` (checked ``every`` seconds)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(every)
    return True


def slot_busy(state: K.ServerState) -> bool:
    headers = {"Authorization": f"Bearer {state.api_key}"}
    with requests.Session() as session:
        session.trust_env = False
        slots = session.get(state.url + "/slots", headers=headers, timeout=10).json()
    return any(slot.get("is_processing") for slot in slots)


# --- reuse, the lock, stale states ------------------------------------------------------------


def test_a_second_run_reuses_the_server_without_loading_llama_cpp(
    server_dir: Path, tmp_path: Path
) -> None:
    first = quick_run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert "starting the local model" in first.stderr
    started = K.read_state(server_dir)
    assert started is not None and servers_in(server_dir) == [started.pid]

    second = quick_run(
        tmp_path, "--json", python=[sys.executable, "-X", "importtime", "-m", "agentkit"]
    )
    assert second.returncode == 0, second.stderr
    assert started.api_key not in second.stdout + second.stderr  # never in events or errors
    assert "starting the local model" not in second.stderr
    assert f"kept from an earlier run (pid {started.pid})" in second.stderr
    imported = [line for line in second.stderr.splitlines() if line.startswith("import time:")]
    assert any("agentkit.local.kept" in line for line in imported)
    assert not [line for line in imported if "xllamacpp" in line]
    assert K.read_state(server_dir) == started
    assert servers_in(server_dir) == [started.pid]


def test_two_starts_at_once_make_one_server(server_dir: Path) -> None:
    starts = [
        subprocess.Popen(
            [AGENTKIT, *START], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outputs = [process.communicate(timeout=300) for process in starts]
    assert [process.returncode for process in starts] == [0, 0], outputs
    assert sum("starting the server" in err for _, err in outputs) == 1
    state = K.read_state(server_dir)
    assert state is not None
    assert all(f"pid {state.pid}" in out for out, _ in outputs)
    assert servers_in(server_dir) == [state.pid]


def test_a_stale_state_is_replaced_never_trusted(server_dir: Path) -> None:
    # A state whose process is gone and whose port answers nothing.
    gone = subprocess.Popen(["true"])
    gone.wait()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    server_dir.mkdir(mode=0o700, parents=True)
    dead = K.ServerState(gone.pid, free_port, "key", {}, 600.0, time.time())
    K._write_state(server_dir, dead)
    assert K.stale_reason(dead) == f"its process {gone.pid} is gone"
    done = agentkit(*START)
    assert done.returncode == 0 and "starting the server" in done.stderr, done.stderr
    first = K.read_state(server_dir)
    assert first is not None and first.pid != gone.pid

    # A state whose key the server refuses (the port is someone else's now, say).
    K._write_state(server_dir, replace(first, api_key="not-the-key"))
    assert K.stale_reason(K.read_state(server_dir)) == "its port answers but refuses its key"  # type: ignore[arg-type]
    done = agentkit(*START)
    assert done.returncode == 0 and "starting the server" in done.stderr, done.stderr
    second = K.read_state(server_dir)
    assert second is not None and second.pid != first.pid
    # The old kept server was stopped, not left behind. (Asked of the server folder, not of the
    # pid: under a busy test run the kernel may give the pid to a new process within seconds.)
    assert servers_in(server_dir) == [second.pid]

    # A state started for another model file (an upgrade re-joined it, say) is replaced too.
    K._write_state(server_dir, replace(second, spec={**second.spec, "mtime_ns": 1}))
    done = agentkit(*START)
    assert done.returncode == 0 and "starting the server" in done.stderr, done.stderr
    third = K.read_state(server_dir)
    assert third is not None and third.pid != second.pid
    assert servers_in(server_dir) == [third.pid]


# --- the key, status and stop -----------------------------------------------------------------


def test_the_server_needs_its_key_and_server_stop_ends_it(server_dir: Path) -> None:
    assert agentkit("server", "status").returncode == 1
    done = agentkit(*START)
    assert done.returncode == 0, done.stderr
    state = K.read_state(server_dir)
    assert state is not None
    assert stat.S_IMODE((server_dir / K.STATE_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(server_dir.stat().st_mode) == 0o700
    assert state.api_key not in repr(state)
    data = json.loads((server_dir / K.STATE_FILE).read_text())
    assert data["spec"]["n_ctx"] == 4096 and data["idle_s"] == K.DEFAULT_IDLE

    with requests.Session() as session:
        session.trust_env = False
        assert session.get(state.url + "/v1/models", timeout=10).status_code == 401
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        refused = session.post(state.url + "/v1/chat/completions", json=chat, timeout=10)
        assert refused.status_code == 401
        key = {"Authorization": f"Bearer {state.api_key}"}
        assert session.get(state.url + "/v1/models", headers=key, timeout=10).status_code == 200

    status = agentkit("server", "status")
    assert status.returncode == 0 and f"running, pid {state.pid}" in status.stdout
    assert state.api_key not in status.stdout + status.stderr

    stopped = agentkit("server", "stop")
    assert stopped.returncode == 0 and f"stopped (pid {state.pid}, qwen2.5" in stopped.stdout
    assert servers_in(server_dir) == [] and K.read_state(server_dir) is None
    status = agentkit("server", "status")
    assert status.returncode == 1 and "not running" in status.stdout
    assert "not running" in agentkit("server", "stop").stdout


def test_an_idle_server_ends_itself_but_not_under_a_connected_run(
    server_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(K.IDLE_ENV, "0.5")
    server = K.kept_server(model_path=model_file(SMALL))
    assert not server.reused and server.running
    assert not K._wait_exit(server.pid, 3.0)  # six idle times: it stays while a run holds it
    server.stop()  # the run lets go of it
    assert K._wait_exit(server.pid, 30.0)
    assert K.read_state(server_dir) is None
    assert "idle for 0.5 s: exiting" in (server_dir / K.LOG_FILE).read_text()


def test_a_server_killed_under_a_connected_run_is_not_running(server_dir: Path) -> None:
    import signal

    server = K.kept_server(model_path=model_file(SMALL))
    try:
        assert server.running and server.health()
        os.kill(server.pid, signal.SIGKILL)  # llama.cpp crashing takes its process with it
        assert K._wait_exit(server.pid, 30.0)
        assert not server.running and not server.health()
        assert repr(server).endswith(", gone)")  # not "released": this process holds it
    finally:
        server.stop()


def test_a_bad_idle_time_is_refused_before_anything_starts(
    server_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(K.IDLE_ENV, "soon")
    done = quick_run(tmp_path)
    assert done.returncode == 2 and "AGENTKIT_SERVER_IDLE must be a number" in done.stderr
    assert servers_in(server_dir) == []


@pytest.mark.parametrize("how", ["--no-keep-server", "AGENTKIT_KEEP_SERVER=0"])
def test_opting_out_runs_a_server_for_this_run_only(
    server_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, how: str
) -> None:
    extra = [how] if how.startswith("--") else []
    if not extra:
        monkeypatch.setenv(K.KEEP_ENV, "0")
    done = quick_run(tmp_path, *extra)
    assert done.returncode == 0, done.stderr
    assert "starting the local model" in done.stderr
    assert K.read_state(server_dir) is None and servers_in(server_dir) == []


# --- Ctrl-C on a terminal, with the kept server ------------------------------------------------


def terminal(args: list[str], cwd: Path) -> object:
    from tests.terminal import Terminal

    return Terminal([AGENTKIT, *args], cwd)


def ctrl_c_exits_130(term: object) -> bytes:
    term.ctrl_c()  # type: ignore[attr-defined]
    code = term.wait(timeout=10)  # type: ignore[attr-defined]
    output: bytes = term.output  # type: ignore[attr-defined]
    assert code == 130, output
    assert b"Traceback" not in output and b"interrupted" in output
    return output


def test_ctrl_c_while_this_run_starts_the_server_leaves_none_behind(
    default_server_dir: Path, tmp_path: Path
) -> None:
    # The default model: the smaller one may be up before the Ctrl-C lands.
    term = terminal(["run", "Say hello.", "--workspace", str(tmp_path), *QUICK_DEFAULT], ROOT)
    term.read_until(b"starting the local model", timeout=120)  # type: ignore[attr-defined]
    ctrl_c_exits_130(term)
    assert servers_in(default_server_dir) == [] and K.read_state(default_server_dir) is None


def test_ctrl_c_while_another_run_starts_the_server_leaves_it_alone(
    default_server_dir: Path, tmp_path: Path
) -> None:
    # The default model: a run that names no model says so before it looks for the server.
    server_dir = default_server_dir
    assert agentkit("server", "start").returncode == 0
    state = K.read_state(server_dir)
    assert state is not None
    fd = os.open(server_dir / K.LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another run is checking or starting the server
        term = terminal(["run", "Say hello.", "--workspace", str(tmp_path), *QUICK_DEFAULT], ROOT)
        term.read_until(b"using the embedded local model", timeout=120)  # type: ignore[attr-defined]
        ctrl_c_exits_130(term)
    finally:
        os.close(fd)
    assert K.read_state(server_dir) == state and K.stale_reason(state) is None


def server_counters(state: K.ServerState) -> dict[str, float]:
    """llama.cpp's own counters of the tokens it read and wrote."""
    headers = {"Authorization": f"Bearer {state.api_key}"}
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(state.url + "/metrics", headers=headers, timeout=10).text
    pairs = (line.split() for line in text.splitlines() if line.startswith("llamacpp:"))
    return {name.split(":", 1)[1]: float(value) for name, value in pairs}


@pytest.mark.parametrize("phase", ["prompt reading", "generation"])
def test_ctrl_c_during_a_request_stops_the_kept_servers_work(
    default_server_dir: Path, tmp_path: Path, phase: str
) -> None:
    server_dir = default_server_dir
    assert agentkit("server", "start").returncode == 0
    state = K.read_state(server_dir)
    assert state is not None
    if phase == "prompt reading":  # a long prompt: Ctrl-C lands while the model reads it
        task = tmp_path / "task.txt"
        task.write_text("Count the words: " + " ".join(["apple"] * 1500))
        args, marker = ["run", f"@{task}"], b"working..."
    else:  # a long answer: Ctrl-C lands while the model writes it
        args = ["run", "Write a story of 1000 words about a cat.", "--json"]
        marker = b'"text_delta"'
    before = server_counters(state)
    term = terminal([*args, "--workspace", str(tmp_path), "--tools", "none"], ROOT)
    term.read_until(marker, timeout=120)  # type: ignore[attr-defined]
    assert wait_until(lambda: slot_busy(state), timeout=60)
    ctrl_c_exits_130(term)
    # The server notices that its client left between two steps (a prompt step is up to
    # PROMPT_STEP tokens, so on a slow machine that may take a while) and stops computing: it
    # neither reads the whole prompt nor writes the whole story. Ask it seldom: llama.cpp checks
    # the connection when no result came for a second, and answers to /slots count as results.
    assert wait_until(lambda: not slot_busy(state), timeout=240, every=2.0)
    after = server_counters(state)
    if phase == "prompt reading":
        assert after["prompt_tokens_total"] - before["prompt_tokens_total"] < 1500
        assert after["tokens_predicted_total"] == before["tokens_predicted_total"]
    else:
        assert after["tokens_predicted_total"] - before["tokens_predicted_total"] < 150
    assert K.stale_reason(state) is None and servers_in(server_dir) == [state.pid]


# --- one server per model ------------------------------------------------------------------------


def test_runs_on_two_models_at_once_keep_a_server_each(
    default_server_dir: Path, tmp_path: Path
) -> None:
    """A chat on the default model writes a long story while a run on the other model starts
    its own server; the story goes on streaming from the server it started with."""
    from tests.terminal import Terminal

    server_dir = default_server_dir

    story = ["--tools", "none", "--max-turns", "1", "--system", "You write long stories."]
    chat = Terminal([AGENTKIT, "chat", "--workspace", str(tmp_path), *story], ROOT)
    chat.read_until(b"/exit quits.", timeout=300)
    first = K.read_state(server_dir)
    assert first is not None
    os.write(chat.fd, b"Write a story of 1000 words about a cat.\n")
    chat.read_until(b"about a cat.\r\n")  # the terminal's echo
    assert wait_until(lambda: slot_busy(first), timeout=120)  # the model works on the story
    other = subprocess.Popen(
        [AGENTKIT, "run", "Say hello.", "--workspace", str(tmp_path), *QUICK_RUN],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    while other.poll() is None:  # the chat's screen is read meanwhile, as a terminal would
        if select.select([chat.fd], [], [], 0.2)[0]:
            _drained(chat, 0, ())
    _, err = other.communicate(timeout=60)
    assert other.returncode == 0, err
    assert "starting the local model" in err
    states = {state.pid: state for _, state in K.kept_states()}
    assert first.pid in states and len(states) == 2  # the first server was left alone
    second = next(s for s in states.values() if s.pid != first.pid)
    assert Path(second.spec["model"]).name.startswith("qwen2.5-coder-0.5b")

    since = len(chat.output)
    assert wait_until(lambda: _drained(chat, since, (b"\r\n", b"> ")), timeout=300)
    if b"> " not in chat.output[since:]:  # the story goes on (else it has ended, whole)
        chat.ctrl_c()
        chat.read_until(b"run aborted", timeout=60)
    os.write(chat.fd, b"/exit\n")
    assert chat.wait(timeout=60) == 0, chat.output
    said = chat.output.decode("utf-8", "replace")
    assert "agentkit: error" not in said and "interrupted" not in said, said
    assert K.stale_reason(first) is None and K.stale_reason(second) is None

    status = agentkit("server", "status")
    assert status.returncode == 0
    assert f"running, pid {first.pid}" in status.stdout
    assert f"running, pid {second.pid}" in status.stdout
    stopped = agentkit("server", "stop", "--model", SMALL)
    assert f"stopped (pid {second.pid}" in stopped.stdout
    assert servers_in(server_dir.parent) == [first.pid]  # the other model's only


def _drained(term: object, since: int, markers: tuple[bytes, ...]) -> bool:
    """Read what the terminal has; whether one of ``markers`` came after byte ``since``."""
    fd: int = term.fd  # type: ignore[attr-defined]
    while select.select([fd], [], [], 0)[0]:
        before = len(term.output)  # type: ignore[attr-defined]
        term._drain_once()  # type: ignore[attr-defined]
        if len(term.output) == before:  # type: ignore[attr-defined]
            break  # the end of the terminal: nothing more will come
    output: bytes = term.output  # type: ignore[attr-defined]
    return any(marker in output[since:] for marker in markers)

