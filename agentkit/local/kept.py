"""The kept local servers: one embedded-model server per user and model, shared by successive
runs.

Starting llama.cpp and loading the model costs about 2 s of every ``agentkit run``. The first run
on an embedded model therefore starts its server as a process of its own (detached: a new
session, so a Ctrl-C typed in the terminal never reaches it), bound to 127.0.0.1 on a free port
and protected by a random API key. Its address and key are in a state file (mode 0600) in the
model's own folder (:func:`model_dir`, under :func:`server_dir`); later runs on that model (and
context size) find it there, check it, and talk to it over HTTP without loading llama.cpp at
all. Runs on another model, or with another context size, have a server of their own, so a run
never loses its server to a run that wants another one. A server ends itself after
:data:`DEFAULT_IDLE` seconds without a request and without a connected run
(``AGENTKIT_SERVER_IDLE``), or on :func:`stop_kept_servers` (``agentkit server stop``)::

    server = kept_server()                 # found running, or started and kept
    agent = Agent(model=server.model)      # requests carry the server's key
    server.stop()                          # lets go of it; the process stays for the next run

A lock file per folder serialises "read the state, start a server, write the state", so two
runs starting at once end up with one server; a state whose process is gone, whose port does not
answer, whose key is refused or that was started for another model file or chat template (an
upgrade, a re-joined file) is replaced, never trusted.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .constants import CONTEXT_WINDOW
from .server import LocalModel, _probe_health, start_local_model
from .template import chat_template
from .weights import LocalModelError, cache_dir, prepare_weights

KEEP_ENV = "AGENTKIT_KEEP_SERVER"
"""Set to ``0`` to give each run a server of its own that ends with it (no kept server)."""
IDLE_ENV = "AGENTKIT_SERVER_IDLE"
"""Seconds a kept server waits without a request (and without a connected run) before it ends."""
DIR_ENV = "AGENTKIT_SERVER_DIR"
"""Where the kept servers' folders (state, lock and log files) live (default:
``cache_dir()/server``)."""
DEFAULT_IDLE = 600.0
"""Ten minutes, as a warm server for a session of work; ``AGENTKIT_SERVER_IDLE`` changes it."""
LAYOUT = 1
"""Part of the server's spec: raise it when the settings a kept server starts with change."""

STATE_FILE = "server.json"
LOCK_FILE = "server.lock"
BUSY_FILE = "server.busy"
LOG_FILE = "server.log"
SERVER_MODULE = "agentkit.local.kept"
"""The module a kept server runs as (``python -m``): its command line is how it is recognised."""
SERVER_MARKERS = (SERVER_MODULE.encode(), b"agentkit.local_server")
"""Command-line words that mark a kept server; the second is the previous release's module, so a
server it started is still found and stopped."""

_READY_TIMEOUT = 120.0
_PROBE_TIMEOUT = 10.0
"""How long a kept server may take to answer the check (it answers while it computes, but a
loaded machine is slow): a busy server must not be taken for a dead one."""


def keep_server_default() -> bool:
    """Whether runs keep the server (``AGENTKIT_KEEP_SERVER`` is not ``0``/``no``/``false``)."""
    value = os.environ.get(KEEP_ENV, "").strip().lower()
    return value not in ("0", "no", "false", "off")


def idle_seconds() -> float:
    """The idle time from ``AGENTKIT_SERVER_IDLE`` (seconds), else :data:`DEFAULT_IDLE`."""
    text = os.environ.get(IDLE_ENV, "").strip()
    if not text:
        return DEFAULT_IDLE
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise LocalModelError(
            f"{IDLE_ENV} must be a number of seconds above 0, got {text!r} (unset it for the "
            f"default of {DEFAULT_IDLE:g} s)"
        )
    return value


def server_dir() -> Path:
    """The folder of the kept servers' folders: ``$AGENTKIT_SERVER_DIR``, else
    ``cache_dir()/server``. (A server of an earlier release kept its files here directly.)"""
    override = os.environ.get(DIR_ENV)
    return Path(override).expanduser() if override else cache_dir() / "server"


def model_dir(model_path: Path, n_ctx: int) -> Path:
    """The folder of the kept server for this model file and context size: named for both, plus
    a digest of the file's path (two files of one name are two models)."""
    resolved = str(Path(model_path).resolve())
    digest = hashlib.sha256(resolved.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in Path(resolved).stem)[:60]
    return server_dir() / f"{stem}-{n_ctx}-{digest}"


def server_spec(model_path: Path, n_ctx: int) -> dict[str, Any]:
    """What a kept server must have been started with to serve a run: the model file (path,
    size, mtime), the context size, the chat template and the layout of its settings."""
    from .. import __version__

    st = model_path.stat()
    template = hashlib.sha256(chat_template().encode("utf-8")).hexdigest()[:16]
    return {
        "model": str(model_path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "n_ctx": n_ctx,
        "template": template,
        "layout": LAYOUT,
        "agentkit": __version__,
    }


@dataclass(frozen=True)
class ServerState:
    """A kept server as its state file describes it."""

    pid: int
    port: int
    api_key: str = field(repr=False)
    spec: dict[str, Any]
    idle_s: float
    started_at: float
    slot_dir: str | None = None

    @property
    def url(self) -> str:
        """The server's root URL, ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def to_json(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str) -> ServerState | None:
        """The state in ``text``; ``None`` when it is not a state this version wrote."""
        try:
            data = json.loads(text)
            state = cls(**data)
        except (ValueError, TypeError):
            return None
        ok = (
            isinstance(state.pid, int)
            and isinstance(state.port, int)
            and isinstance(state.api_key, str)
            and isinstance(state.spec, dict)
        )
        return state if ok else None


def read_state(directory: Path | None = None) -> ServerState | None:
    """The state file's server, or ``None`` when there is none (or it cannot be read)."""
    try:
        text = ((directory or server_dir()) / STATE_FILE).read_text(encoding="utf-8")
    except OSError:
        return None
    return ServerState.from_json(text)


def kept_states() -> list[tuple[Path, ServerState]]:
    """Every kept server's folder and state, by folder name (an earlier release's first)."""
    root = server_dir()
    found = []
    folders = sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
    for directory in [root, *folders]:
        state = read_state(directory)
        if state is not None:
            found.append((directory, state))
    return found


def _write_state(directory: Path, state: ServerState) -> None:
    """Write the state atomically, readable by this user only (it holds the key)."""
    target = directory / STATE_FILE
    temp = directory / f"{STATE_FILE}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(state.to_json())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _remove_state(directory: Path, pid: int) -> None:
    """Remove the state file if it still names the server ``pid`` (call with the lock held)."""
    state = read_state(directory)
    if state is not None and state.pid == pid:
        with contextlib.suppress(OSError):
            (directory / STATE_FILE).unlink()


def _prepare_dir(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise LocalModelError(
            f"Cannot create the local server's folder {directory}: {exc}; set {DIR_ENV} to a "
            "writable folder"
        ) from exc
    return directory


@contextlib.contextmanager
def _flock(path: Path, how: int) -> Iterator[bool]:
    """Hold ``flock(how)`` on ``path`` for the block; yields False when a non-blocking lock
    was refused. A blocking wait ends with KeyboardInterrupt on Ctrl-C."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing releases the lock


# --- processes --------------------------------------------------------------------------------


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _is_kept_server_process(pid: int) -> bool:
    """Whether ``pid`` runs a kept server (its command line says so): the only processes
    :func:`stop_kept_servers` ever signals."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        done = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, check=False
        )
        argv = done.stdout.split()
    return any(marker in argv for marker in SERVER_MARKERS) and b"--serve" in argv


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` exits (a pidfd where the system has them); whether it did."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    deadline = time.monotonic() + timeout
    try:
        while _pid_alive(pid):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if pidfd is not None:
                select.select([pidfd], [], [], min(left, 0.5))  # a zombie child stays "ready"
            else:
                time.sleep(min(left, 0.05))
        return True
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _terminate(pid: int, timeout: float = 5.0) -> None:
    """End the kept server ``pid``: SIGTERM, then SIGKILL after ``timeout``."""
    if not _pid_alive(pid) or not _is_kept_server_process(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not _wait_exit(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_exit(pid, timeout)


_children: list[subprocess.Popen[bytes]] = []
"""Servers this process started, polled so that one that ended is not left a zombie."""
_children_lock = threading.Lock()
"""Guards _children."""


def _reap() -> None:
    with _children_lock:
        _children[:] = [p for p in _children if p.poll() is None]


# --- the client side --------------------------------------------------------------------------


class KeptServer(LocalModel):
    """A kept server this process uses: its :class:`~agentkit.local.LocalModel` interface, plus
    a shared lock on the server's busy file that tells the server a run is connected (so it
    does not end under a quiet chat). :meth:`stop` releases that lock, not the server."""

    kept = True

    def __init__(
        self, state: ServerState, lease: int, *, reused: bool, directory: Path | None = None
    ) -> None:
        slot_dir = Path(state.slot_dir) if state.slot_dir else None
        model_path = Path(state.spec["model"])
        n_ctx = int(state.spec["n_ctx"])
        super().__init__(
            lease, state.url, model_path, n_ctx, slot_dir, api_key=state.api_key, pid=state.pid
        )
        self.state = state
        self.reused = reused
        self.directory = directory
        """The server's folder (its state and lock files), where it is known."""

    @property
    def running(self) -> bool:
        """Whether this process still holds the server and the server's process lives: one
        that crashed or was killed is not running, though nothing here let go of it."""
        return (
            super().running and _pid_alive(self.pid) and _is_kept_server_process(self.pid)
        )

    def stop(self) -> None:
        """Let go of the server (it keeps running for later runs until it is idle)."""
        with self._lock:
            lease, self._server = self._server, None
        if lease is not None:
            os.close(lease)

    def __repr__(self) -> str:
        state = "released" if self._server is None else "connected" if self.running else "gone"
        return f"KeptServer(url={self.url!r}, pid={self.pid}, {state})"


def _take_lease(directory: Path) -> int:
    """A shared lock on the busy file, held while this process uses the server."""
    fd = os.open(directory / BUSY_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def stale_reason(state: ServerState, wanted: dict[str, Any] | None = None) -> str | None:
    """Why ``state`` cannot serve a run (``None``: it can): its process is gone, its port does
    not answer, its key is refused, or it was started for another spec than ``wanted``."""
    if wanted is not None and state.spec != wanted:
        changed = sorted(k for k in {*state.spec, *wanted} if state.spec.get(k) != wanted.get(k))
        return f"it was started with another {', '.join(changed)}"
    if not _pid_alive(state.pid):
        return f"its process {state.pid} is gone"
    problem = _probe_health(state.url, _PROBE_TIMEOUT, state.api_key)
    if problem is None:
        return None
    if "401" in problem:
        return "its port answers but refuses its key"
    return f"it does not answer ({problem})"


def kept_server(
    *,
    n_ctx: int | None = None,
    model_path: str | os.PathLike[str] | None = None,
    on_start: Callable[[], None] | None = None,
    startup_timeout: float = _READY_TIMEOUT,
) -> KeptServer:
    """The user's kept server for this model and context size: found running, or started (in
    the folder :func:`model_dir` names, so servers of other models are left alone).

    ``model_path`` serves another GGUF file (loaded without a hash check); by default the
    verified weights (:func:`agentkit.local.prepare_weights`, joined on first use). A stale or
    mismatching server is stopped and replaced. ``on_start`` is called before a server is
    started (to tell the user). A Ctrl-C (KeyboardInterrupt) while this process starts a server
    kills that server; one while waiting for another process's start leaves it alone. Raises
    :class:`~agentkit.local.LocalModelError` when the server cannot start.
    """
    idle_s = idle_seconds()  # a bad setting is refused before anything starts
    path = Path(model_path).resolve() if model_path is not None else prepare_weights()
    if not path.is_file():
        raise LocalModelError(f"Model file {path} does not exist")
    wanted = server_spec(path, n_ctx or CONTEXT_WINDOW)
    _prepare_dir(server_dir())
    directory = _prepare_dir(model_dir(path, wanted["n_ctx"]))
    _reap()
    with _flock(directory / LOCK_FILE, fcntl.LOCK_EX):
        state = read_state(directory)
        if state is not None:
            if stale_reason(state, wanted) is None:
                return KeptServer(state, _take_lease(directory), reused=True, directory=directory)
            _terminate(state.pid)
            _remove_state(directory, state.pid)
        if on_start is not None:
            on_start()
        process = _spawn(directory, path, wanted["n_ctx"], idle_s)
        try:
            _await_ready(process, directory, startup_timeout)
            state = read_state(directory)
            if state is None or state.pid != process.pid:
                raise LocalModelError(
                    f"The local model server started but wrote no state in {directory}"
                )
            return KeptServer(state, _take_lease(directory), reused=False, directory=directory)
        except BaseException:
            _kill(process)
            _remove_state(directory, process.pid)
            raise


def _spawn(directory: Path, path: Path, n_ctx: int, idle_s: float) -> subprocess.Popen[bytes]:
    """Start ``python -m agentkit.local.kept --serve ...`` detached, in a session of its own."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    argv = [
        sys.executable,
        "-m",
        SERVER_MODULE,
        "--serve",
        "--model-path",
        str(path),
        "--n-ctx",
        str(n_ctx),
        "--idle",
        repr(idle_s),
        "--dir",
        str(directory),
    ]
    with open(directory / LOG_FILE, "wb") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            cwd="/",
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal must not reach it
            close_fds=True,
        )
    with _children_lock:
        _children.append(process)
    return process


def _await_ready(process: subprocess.Popen[bytes], directory: Path, timeout: float) -> None:
    """Wait for the server's ready line (a blocking wait; Ctrl-C ends it); raise with the
    server's own words when it exits or does not get ready within ``timeout``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    line = b""
    with process.stdout:
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, left))
            if not ready:
                raise LocalModelError(
                    f"The local model server did not get ready within {timeout:g} s; see "
                    f"{directory / LOG_FILE}"
                )
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            line += chunk
    try:
        report = json.loads(line) if line else {}
    except ValueError:
        report = {}
    if report.get("ready"):
        return
    error = report.get("error") or _log_tail(directory) or "no reason given"
    raise LocalModelError(f"The local model server did not start: {error}")


def _log_tail(directory: Path, lines: int = 5) -> str:
    try:
        text = (directory / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " / ".join(line.strip() for line in text.splitlines()[-lines:] if line.strip())


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a server this process started and has not handed over, and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    while True:
        try:
            process.wait()
            return
        except KeyboardInterrupt:  # a second Ctrl-C: still reap it
            continue


def stop_kept_servers(model_path: str | os.PathLike[str] | None = None) -> list[ServerState]:
    """Stop the user's kept servers (those serving ``model_path`` only, when given); the states
    of those that were running."""
    wanted = str(Path(model_path).resolve()) if model_path is not None else None
    stopped = []
    for directory, found in kept_states():
        if wanted is not None and found.spec.get("model") != wanted:
            continue
        with _flock(directory / LOCK_FILE, fcntl.LOCK_EX):
            state = read_state(directory)
            if state is None:
                continue
            running = _pid_alive(state.pid)
            _terminate(state.pid)
            _remove_state(directory, state.pid)
        if running:
            stopped.append(state)
    _reap()
    return stopped


# --- the server side --------------------------------------------------------------------------


class _Activity:
    """Tells whether the server served anything since the last look, from llama.cpp's own
    counters (decode calls and requests in progress)."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.last: tuple[float, ...] | None = None

    def changed(self) -> bool:
        try:
            text = str(self.server.handle_metrics())
        except Exception:  # noqa: BLE001 - a server that cannot say counts as busy
            return True
        numbers: dict[str, float] = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name.startswith("llamacpp:"):
                with contextlib.suppress(ValueError):
                    numbers[name] = float(value)
        busy = numbers.get("llamacpp:requests_processing", 0.0) > 0
        current = (
            numbers.get("llamacpp:n_decode_total", -1.0),
            numbers.get("llamacpp:prompt_tokens_total", -1.0),
            numbers.get("llamacpp:prompt_tokens_cached_total", -1.0),
        )
        changed = busy or current != self.last
        self.last = current
        return changed


def _log(text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"{stamp} agentkit server {os.getpid()}: {text}\n")
    sys.stderr.flush()


PROMPT_STEP = 128
"""Prompt tokens the kept server reads per step. It notices a client that left (a Ctrl-C) only
between steps, and it outlives that client, so a small step bounds the CPU a cancelled request
still takes: 128 tokens is about 3 s on two busy cores, where llama.cpp's default of 512 was
about 12 s, for about a tenth less prompt-reading speed (the fixed prefix is read once per
server anyway)."""


def serve(model_path: Path, n_ctx: int, idle_s: float, directory: Path) -> int:
    """The kept server's process: start the model, write the state, report ready on stdout,
    then serve until idle for ``idle_s`` seconds or until SIGTERM."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    api_key = secrets.token_urlsafe(32)
    try:
        local = start_local_model(
            n_ctx=n_ctx, model_path=model_path, api_key=api_key, metrics=True, n_batch=PROMPT_STEP
        )
    except LocalModelError as exc:
        _report({"error": str(exc)})
        return 1
    try:
        state = ServerState(
            pid=os.getpid(),
            port=local.port,
            api_key=api_key,
            spec=server_spec(model_path, n_ctx),
            idle_s=idle_s,
            started_at=time.time(),
            slot_dir=str(local.slot_dir) if local.slot_dir else None,
        )
        _write_state(directory, state)
        _log(f"serving {model_path.name} on {local.url}; ends after {idle_s:g} s idle")
        _report({"ready": True, "pid": state.pid, "port": state.port})
        reason = _serve_until_idle(local, idle_s, directory, stop)
        _log(reason)
    finally:
        local.stop()
    return 0


def _report(data: dict[str, Any]) -> None:
    """Tell the starting process how the start went, then let go of its pipe."""
    with contextlib.suppress(OSError):
        sys.stdout.write(json.dumps(data) + "\n")
        sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _serve_until_idle(
    local: LocalModel, idle_s: float, directory: Path, stop: threading.Event
) -> str:
    """Wait (blocking, with a timeout) until SIGTERM, or until no request came and no run was
    connected for ``idle_s`` seconds; then remove the state (under the lock) and return why."""
    activity = _Activity(local._server)
    activity.changed()
    last_active = time.monotonic()
    interval = max(0.05, min(idle_s / 4, 30.0))
    while not stop.wait(interval):
        now = time.monotonic()
        if activity.changed():
            last_active = now
            continue
        if now - last_active < idle_s:
            continue
        # Idle: end unless a run holds the busy file or is looking up the state right now.
        with _flock(directory / LOCK_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB) as locked:
            if not locked:
                continue
            with _flock(directory / BUSY_FILE, fcntl.LOCK_EX | fcntl.LOCK_NB) as alone:
                if not alone:
                    last_active = now  # a connected run counts as use
                    continue
                _remove_state(directory, os.getpid())
                return f"idle for {idle_s:g} s: exiting"
    return "stopped"


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m agentkit.local.kept")
    parser.add_argument("--serve", action="store_true", required=True)
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--n-ctx", type=int, default=CONTEXT_WINDOW)
    parser.add_argument("--idle", type=float, default=DEFAULT_IDLE)
    parser.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    return serve(Path(args.model_path), args.n_ctx, args.idle, Path(args.dir))


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
