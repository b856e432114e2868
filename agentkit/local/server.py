"""The embedded llama.cpp server, run inside this process, and the :class:`Model` objects that
reach it.

:func:`start_local_model` loads the verified weights (:mod:`.weights`) with the shipped chat
template into ``xllamacpp``'s server and returns a :class:`LocalModel` once ``/health``
answers. The server speaks OpenAI Chat Completions, OpenAI Responses and Anthropic Messages on
``127.0.0.1``, so the ordinary providers talk to it::

    with start_local_model() as local:
        agent = Agent(model=local.model)        # api "openai-completions", provider "local"

    model = get_local_model()                   # one shared server, started on first use

Servers stop on :meth:`LocalModel.stop`, at the end of a ``with`` block, or at interpreter exit.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib
import os
import re
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from ..abort import AbortSignal
from ..types import Model
from .constants import (
    CONTEXT_WINDOW,
    DEFAULT_WEIGHTS,
    LOCAL_APIS,
    MAX_TOKENS,
    MODEL_ID,
    PROVIDER,
    XLLAMACPP_VERSION,
    EmbeddedWeights,
    LocalApi,
    install_hint,
    weights_named_by,
)
from .template import chat_template
from .weights import LocalModelError, LocalModelNotInstalledError, cache_dir, prepare_weights

_KEY = re.compile(r"^[0-9a-f]{16,64}(\.\d+\.tmp)?$")
"""A prefix key (:meth:`LocalModel.prefix_key`), or a temporary name made from one."""


def embedded_model(
    url: str,
    api: LocalApi = "openai-completions",
    *,
    context_window: int = CONTEXT_WINDOW,
    max_tokens: int = MAX_TOKENS,
    api_key: str | None = None,
    weights: EmbeddedWeights = DEFAULT_WEIGHTS,
) -> Model:
    """The :class:`Model` for an embedded server at ``url`` (``http://127.0.0.1:PORT``) serving
    ``weights`` (its id and name are the model's).

    ``openai-completions`` and ``openai-responses`` get ``url + "/v1"``, ``anthropic-messages``
    the host root. Costs are zero; the llama.cpp server quirks come from the providers' preset
    (:func:`agentkit.providers.local_model` with ``server="llamacpp"``).
    ``api_key`` is the server's own key (a kept server has one), sent as a bearer token.
    """
    from ..providers.catalog import local_model as local_server_model

    if api not in LOCAL_APIS:
        raise ValueError(f"the local server does not speak {api!r}; use one of {LOCAL_APIS}")
    root = url.rstrip("/")
    model = local_server_model(
        root if api == "anthropic-messages" else root + "/v1",
        weights.model_id,
        server="llamacpp",
        name=weights.model_name,
        api=api,
        context_window=context_window,
        max_tokens=min(max_tokens, context_window),
        provider=PROVIDER,
    )
    if api_key is None:
        return model
    return model.model_copy(update={"headers": {**(model.headers or {}), **_auth(api_key)}})


def _auth(api_key: str | None) -> dict[str, str]:
    """The header that llama.cpp's server checks its key in (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _loopback_session(api_key: str | None = None) -> requests.Session:
    """A session for calls to a server on this machine: no proxy from the environment, and the
    server's key when it has one."""
    session = requests.Session()
    session.trust_env = False  # a proxy from the environment must not see loopback calls
    session.headers.update(_auth(api_key))
    return session


class LocalModel:
    """A running embedded llama.cpp server and the :class:`Model` objects that reach it.

    Made by :func:`start_local_model`. It keeps serving until :meth:`stop` (idempotent), the end
    of a ``with`` block, or interpreter exit. A server kept across processes
    (:func:`agentkit.local.kept.kept_server`) is one too: there :meth:`stop` only lets go of
    it, and the server process ends by itself once idle.
    """

    kept = False
    """Whether the server outlives this process (a kept server: :meth:`stop` only lets go)."""

    def __init__(
        self,
        server: Any,
        url: str,
        model_path: Path,
        n_ctx: int,
        slot_dir: Path | None = None,
        *,
        api_key: str | None = None,
        pid: int | None = None,
    ) -> None:
        # Guards _server: stop() may race with itself (atexit, another thread).
        self._lock = threading.Lock()
        self._server: Any = server
        self.url = url.rstrip("/")
        """The server's root URL, ``http://127.0.0.1:PORT``."""
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.slot_dir = slot_dir
        """Where saved KV caches live (None: prefix caching is off)."""
        self.api_key = api_key
        """The key the server requires (None: it requires none); never shown in its repr."""
        self.pid = pid if pid is not None else os.getpid()
        """The process the server runs in (this one, unless it is a kept server)."""
        self.reused = False
        """Whether a kept server was found running rather than started for this caller."""
        host_port = self.url.split("://", 1)[-1]
        host, _, port = host_port.rpartition(":")
        self.host = host
        self.port = int(port)

    @property
    def running(self) -> bool:
        """Whether the server serves: :meth:`stop` has not been called yet (and, for a kept
        server, its process is alive)."""
        return self._server is not None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://127.0.0.1:PORT/v1``."""
        return self.url + "/v1"

    @property
    def model(self) -> Model:
        """The server as an ``openai-completions`` model (the one the CLI uses)."""
        return self.model_for("openai-completions")

    def model_for(self, api: LocalApi = "openai-completions") -> Model:
        """The server as a model speaking ``api``."""
        return embedded_model(
            self.url,
            api,
            context_window=self.n_ctx,
            api_key=self.api_key,
            weights=weights_named_by(self.model_path),
        )

    def openai_responses_model(self) -> Model:
        """The server as an ``openai-responses`` model (base URL ``.../v1``)."""
        return self.model_for("openai-responses")

    def anthropic_messages_model(self) -> Model:
        """The server as an ``anthropic-messages`` model (base URL is the host root)."""
        return self.model_for("anthropic-messages")

    def _slot_action(self, action: str, key: str, timeout: float) -> bool:
        if not self.running or self.slot_dir is None or not _KEY.match(key):
            return False
        with _loopback_session(self.api_key) as session:
            try:
                response = session.post(
                    f"{self.url}/slots/0?action={action}",
                    json={"filename": f"{key}.kv"},
                    timeout=timeout,
                )
            except requests.RequestException:
                return False
        return response.status_code == 200

    def has_saved_prefix(self, key: str) -> bool:
        """Whether the KV cache saved under ``key`` exists (see :meth:`save_prefix`)."""
        return (
            self.slot_dir is not None
            and _KEY.match(key) is not None
            and (self.slot_dir / f"{key}.kv").is_file()
        )

    def restore_prefix(self, key: str, timeout: float = 30.0) -> bool:
        """Load the KV cache saved under ``key`` into the server's slot, so a request that
        starts with the same tokens (system prompt and tool declarations) skips reading them
        again. False when there is none or the server refused it (nothing changes then)."""
        return self.has_saved_prefix(key) and self._slot_action("restore", key, timeout)

    def save_prefix(self, key: str, timeout: float = 30.0) -> bool:
        """Save the slot's KV cache under ``key`` (call it when the server is idle, after a
        request whose prompt began with the prefix ``key`` stands for). The file is written
        to a temporary name and renamed, so a concurrent reader never sees half of it."""
        if self.slot_dir is None or not _KEY.match(key):
            return False
        temp = f"{key}.{os.getpid()}.tmp"
        if not self._slot_action("save", temp, timeout):
            return False
        try:
            os.replace(self.slot_dir / f"{temp}.kv", self.slot_dir / f"{key}.kv")
        except OSError:
            return False
        return True

    def prefix_key(self, *texts: str) -> str:
        """A cache key for a prompt prefix: the model file, the template, the context size and
        ``texts`` (the system prompt and the tool declarations, say)."""
        digest = hashlib.sha256()
        st = self.model_path.stat()
        for part in (
            str(self.model_path.resolve()),
            str(st.st_size),
            str(st.st_mtime_ns),
            chat_template(),
            str(self.n_ctx),
            XLLAMACPP_VERSION,
            *texts,
        ):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return digest.hexdigest()[:40]

    def health(self, timeout: float = 2.0) -> bool:
        """Whether the server answers ``/health`` with 200 right now."""
        if not self.running:
            return False
        return _probe_health(self.url, timeout, self.api_key) is None

    def stop(self) -> None:
        """Stop the server and free its port and threads; calling it again does nothing."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return
        with _registry_lock:
            _running.discard(self)
        # Dropping the last reference shuts llama.cpp's server down and joins its threads.
        del server

    def __enter__(self) -> LocalModel:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"LocalModel(url={self.url!r}, {state})"


_registry_lock = threading.Lock()
"""Guards _running and _shared."""
_running: set[LocalModel] = set()
"""Servers started and not yet stopped; atexit stops them."""
_shared: LocalModel | None = None
"""The server behind get_local_model()."""
_shared_spec: tuple[int, Path | None] = (CONTEXT_WINDOW, None)
"""The context size and model file (None: the verified default) _shared was started with."""
_shared_start_lock = threading.Lock()
"""Held while the shared server starts, so concurrent callers start only one."""


def _import_runtime() -> Any:
    try:
        return importlib.import_module("xllamacpp")
    except ImportError as exc:
        raise LocalModelNotInstalledError(
            f"The embedded llama.cpp runtime (xllamacpp) is not installed; {install_hint()}"
        ) from exc


THREADS_ENV = "AGENTKIT_LOCAL_THREADS"
"""The environment variable that sets the embedded server's thread count (a whole number from
1 up), instead of :func:`_default_threads`'s guess from the load."""


def _default_threads() -> int:
    """One thread per core this process may use, less one per process already running there
    (the 1-minute load average), and at least one; ``$AGENTKIT_LOCAL_THREADS`` when it is set
    to a whole number from 1 to 1024 (anything else is ignored). llama.cpp's threads wait for
    each other at every step of a request, so on a busy machine two threads that the scheduler
    keeps apart run slower than one: on two cores under a load of 6 to 12, a request generated
    1 to 14 tokens/s with two threads and a steady 11 to 13 with one."""
    wanted = os.environ.get(THREADS_ENV, "").strip()
    if wanted.isdigit() and 1 <= int(wanted) <= 1024:
        return int(wanted)
    if hasattr(os, "sched_getaffinity"):
        cores = max(1, len(os.sched_getaffinity(0)))
    else:
        cores = max(1, os.cpu_count() or 1)
    try:
        busy = int(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this system
        busy = 0
    return max(1, cores - busy)


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _probe_health(url: str, timeout: float, api_key: str | None = None) -> str | None:
    """``None`` when ``/health`` says 200 (with a key: when ``/v1/models`` accepts it), else a
    short description of what it said."""
    with _loopback_session(api_key) as session:
        try:
            path = "/v1/models" if api_key else "/health"
            response = session.get(url + path, timeout=timeout)
        except requests.RequestException as exc:
            return f"{type(exc).__name__}: {exc}"
    if response.status_code == 200:
        return None
    return f"HTTP {response.status_code}: {response.text[:200]}"


def _wait_healthy(
    url: str, timeout: float, signal: AbortSignal | None, api_key: str | None = None
) -> None:
    """Poll ``/health`` until it answers 200; raise on timeout, or on abort."""
    deadline = time.monotonic() + timeout
    while True:
        if signal is not None:
            signal.throw_if_aborted()
        remaining = deadline - time.monotonic()
        problem = _probe_health(url, max(0.1, min(2.0, remaining)), api_key)
        if problem is None:
            return
        if time.monotonic() >= deadline:
            raise LocalModelError(
                f"The local model server at {url} did not become healthy within {timeout:g} s "
                f"(last answer: {problem}); retry with a longer startup_timeout, or check memory "
                "(it needs about 700 MB)"
            )
        if signal is not None:
            signal.wait(0.05)
        else:
            time.sleep(0.05)


def start_local_model(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    n_ctx: int = CONTEXT_WINDOW,
    n_threads: int | None = None,
    model_path: str | os.PathLike[str] | None = None,
    parts: Sequence[str | os.PathLike[str]] | None = None,
    cache_directory: str | os.PathLike[str] | None = None,
    startup_timeout: float = 60.0,
    signal: AbortSignal | None = None,
    prefix_cache: bool = True,
    api_key: str | None = None,
    metrics: bool = False,
    n_batch: int = 512,
) -> LocalModel:
    """Start the embedded server in this process and return it once ``/health`` answers.

    ``port=0`` picks a free port. ``model_path`` loads that GGUF file as is (no hash check);
    otherwise the verified weights come from :func:`prepare_weights` (``parts`` and
    ``cache_directory`` pass through). ``startup_timeout`` bounds the health wait and ``signal``
    aborts it (and the first-time join). ``prefix_cache`` enables :meth:`LocalModel.save_prefix`
    and :meth:`LocalModel.restore_prefix` (files under ``cache_dir()/kv``). With ``api_key``
    every request but ``/health`` must carry it (``Authorization: Bearer ...``; the models of
    the returned server do); ``metrics`` turns on llama.cpp's ``/metrics``. ``n_batch`` is the
    number of prompt tokens read per step: the server notices a request whose client left only
    between steps. Raises
    :class:`LocalModelError` (or a subclass) with
    what to do when the extra is missing, the weights are wrong, the port is taken, or the
    server does not start.
    """
    runtime = _import_runtime()
    if port and _port_in_use(host, port):
        raise LocalModelError(
            f"Port {port} on {host} is already in use; stop whatever listens there or pass "
            "port=0 to let the system pick a free port"
        )
    if model_path is not None:
        path = Path(model_path)
        if not path.is_file():
            raise LocalModelError(f"Model file {path} does not exist")
    else:
        path = prepare_weights(parts, directory=cache_directory, signal=signal)
    if signal is not None:
        signal.throw_if_aborted()

    params = runtime.CommonParams()
    params.model.path = str(path)
    params.model_alias = {MODEL_ID}
    params.chat_template = chat_template()
    params.hostnames = [host]
    params.port = port
    params.n_ctx = n_ctx
    params.n_parallel = 1
    params.n_predict = MAX_TOKENS
    params.use_jinja = True
    params.offline = True
    params.ui = False
    threads = n_threads or _default_threads()
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.sampling.temp = 0.0
    params.verbosity = 0
    # The server notices a cancelled request between batches: a smaller batch bounds the CPU a
    # request keeps using after its client left (Ctrl-C in chat) to about one batch.
    params.n_batch = n_batch
    params.warmup = False  # an empty warm-up decode costs start-up time and buys nothing here
    # Fitting probes device memory to offload layers to a GPU; on this CPU-only runtime it only
    # loads the model twice (about 1.3 s of a 3 s start on two cores).
    params.fit_params = False
    if api_key:
        params.api_keys = [api_key]
    params.endpoint_metrics = metrics
    slot_dir: Path | None = None
    if prefix_cache:
        slot_dir = Path(cache_directory) if cache_directory is not None else cache_dir()
        slot_dir = slot_dir / "kv"
        try:
            slot_dir.mkdir(parents=True, exist_ok=True)
            params.slot_save_path = str(slot_dir) + os.sep  # llama.cpp appends the name
        except OSError:
            slot_dir = None  # caching is an optimisation: run without it
    try:
        server = runtime.Server(params)  # loads the model and listens (1 to 2 s, holds the GIL)
    except RuntimeError as exc:
        if port and _port_in_use(host, port):
            raise LocalModelError(
                f"Port {port} on {host} was taken while the local model started; pass port=0 "
                "to let the system pick a free port"
            ) from exc
        where = "your model_path" if model_path is not None else f"the cache folder {path.parent}"
        raise LocalModelError(
            f"The embedded llama.cpp server failed to start with {path} ({exc}); check that the "
            f"file is a GGUF model (delete {where} to rebuild it) and that about 700 MB of "
            "memory is free"
        ) from exc
    local = LocalModel(
        server, str(server.listening_address), path, n_ctx, slot_dir, api_key=api_key
    )
    with _registry_lock:
        _running.add(local)
    try:
        _wait_healthy(local.url, startup_timeout, signal, api_key)
    except BaseException:
        local.stop()
        raise
    return local


def get_local_server(
    *, n_ctx: int | None = None, model_path: str | os.PathLike[str] | None = None
) -> LocalModel:
    """The process's shared embedded server, started on first use (thread-safe).

    ``n_ctx`` and ``model_path`` (another GGUF file, loaded without a hash check) choose the
    server; asking for different ones stops the shared server and starts a matching one.
    """
    global _shared, _shared_spec
    wanted = (n_ctx or CONTEXT_WINDOW, Path(model_path).resolve() if model_path else None)
    with _shared_start_lock:
        with _registry_lock:
            shared, spec = _shared, _shared_spec
        if shared is not None and shared.running:
            if spec == wanted:
                return shared
            shared.stop()
        shared = start_local_model(n_ctx=wanted[0], model_path=wanted[1])
        with _registry_lock:
            _shared, _shared_spec = shared, wanted
        return shared


def get_local_model(
    api: LocalApi = "openai-completions",
    *,
    n_ctx: int | None = None,
    model_path: str | os.PathLike[str] | None = None,
) -> Model:
    """A :class:`Model` for the shared embedded server (started lazily): the CLI's default.
    ``n_ctx`` and ``model_path`` pass to :func:`get_local_server`."""
    return get_local_server(n_ctx=n_ctx, model_path=model_path).model_for(api)


def stop_local_servers() -> None:
    """Stop every embedded server this process started (run at interpreter exit too)."""
    with _registry_lock:
        servers = list(_running)
    for server in servers:
        server.stop()


atexit.register(stop_local_servers)
