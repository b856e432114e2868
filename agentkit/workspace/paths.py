"""Path confinement for the workspace tools: every path a tool is given is walked one component
at a time, each opened relative to the folder before it without following symlinks
(``openat`` with ``O_NOFOLLOW``), so a path outside the workspace, or a link swapped in
mid-call, is refused. Writes go to a temporary file renamed into place.

:class:`Workspace` is the folder and its walk; :func:`open_regular` and :func:`read_link` are
the single steps the search reuses.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from ..errors import MissingPathError, WorkspaceError

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_NOFOLLOW | _O_CLOEXEC
_MAX_LINKS = 40
"""Symlinks one path may pass through before it is refused (a loop, say)."""


class Workspace:
    """The folder the tools work in, and the walk that keeps every path inside it.

    Paths are opened one component at a time, each relative to the descriptor of the folder
    before it and without following symlinks (``O_NOFOLLOW``). A symlink is read and its target
    walked the same way, so a link that leads out is refused, and a link swapped in after a
    check cannot be followed: the check and the use are one step.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        resolved = Path(root).resolve()
        if not resolved.is_dir():
            raise WorkspaceError(f"The workspace {root} is not a folder")
        self.root = resolved
        self._aliases = {str(resolved), os.path.abspath(root)}

    def resolve(self, path: str) -> Path:
        """The real path of ``path`` (relative to the root, or absolute), symlinks followed.

        Raises :class:`WorkspaceError` when it lies outside the workspace. Informational only:
        the tools open paths with :meth:`open_file`, :meth:`open_folder` and :meth:`locate`.
        """
        parent, name, shown = self.locate(path)
        os.close(parent)
        return self.root if shown == "." else self.root / shown

    def _outside(self, path: str) -> WorkspaceError:
        return WorkspaceError(
            f"{path} is outside the workspace {self.root}; only paths inside it are allowed"
        )

    def _relative_parts(self, path: str, original: str) -> list[str]:
        """The components of ``path`` relative to the root; an absolute path must lie inside."""
        if not os.path.isabs(path):
            return path.split("/")
        normal = os.path.normpath(path)
        for alias in self._aliases:
            if normal == alias:
                return []
            if normal.startswith(alias.rstrip("/") + "/"):
                return normal[len(alias.rstrip("/")) + 1 :].split("/")
        try:  # the root reached through another name (/tmp -> /private/tmp, say)
            real = os.path.realpath(os.path.dirname(normal))
        except (OSError, ValueError):
            raise self._outside(original) from None
        for alias in self._aliases:
            if real == alias or real.startswith(alias.rstrip("/") + "/"):
                rest = real[len(alias.rstrip("/")) :].strip("/")
                return [*rest.split("/"), os.path.basename(normal)]
        raise self._outside(original)

    def locate(self, path: str, *, make_folders: bool = False) -> tuple[int, str, str]:
        """Walk ``path`` safely: (descriptor of its folder, its name there, its shown path).

        Symlinks on the way and at the end are followed only while they stay inside. The name
        is ``""`` when the path is the root itself. The caller closes the descriptor and opens
        the name with ``O_NOFOLLOW`` relative to it. ``make_folders`` creates missing folders.
        """
        if not isinstance(path, str) or not path or "\0" in path:
            raise WorkspaceError("A path must be a non-empty string without NUL characters")
        pending = self._relative_parts(path, path)
        fds = [os.open(self.root, _O_DIR)]
        names: list[str] = []
        links = 0
        try:
            while pending:
                part = pending.pop(0)
                if part in ("", "."):
                    continue
                if part == "..":
                    if not names:
                        raise self._outside(path)
                    os.close(fds.pop())
                    names.pop()
                    continue
                target = read_link(part, fds[-1])
                if target is not None:
                    links += 1
                    if links > _MAX_LINKS:
                        raise WorkspaceError(f"Cannot resolve {path}: too many symbolic links")
                    if os.path.isabs(target):
                        while len(fds) > 1:
                            os.close(fds.pop())
                        names.clear()
                        pending = self._relative_parts(target, path) + pending
                    else:
                        pending = target.split("/") + pending
                    continue
                if not pending:
                    shown = "/".join([*names, part])
                    return os.dup(fds[-1]), part, shown
                fds.append(self._open_step(part, fds[-1], "/".join([*names, part]), make_folders))
                names.append(part)
            return os.dup(fds[-1]), "", "/".join(names) or "."
        finally:
            for fd in fds:
                os.close(fd)

    @staticmethod
    def _open_step(part: str, parent: int, shown: str, make_folders: bool) -> int:
        try:
            return os.open(part, _O_DIR, dir_fd=parent)
        except FileNotFoundError:
            if not make_folders:
                raise MissingPathError(shown, folder=True) from None
        except NotADirectoryError:
            raise WorkspaceError(f"{shown} is not a folder") from None
        except OSError as exc:  # ELOOP: a symlink swapped in after the check
            raise WorkspaceError(f"Cannot open {shown}: {exc.strerror}") from None
        with contextlib.suppress(FileExistsError):
            os.mkdir(part, dir_fd=parent)
        return os.open(part, _O_DIR, dir_fd=parent)

    def open_folder(self, path: str) -> tuple[int, str]:
        """A descriptor of the folder ``path`` (the caller closes it) and its shown path."""
        parent, name, shown = self.locate(path)
        try:
            if not name:
                return os.dup(parent), shown
            try:
                return os.open(name, _O_DIR, dir_fd=parent), shown
            except FileNotFoundError:
                raise WorkspaceError(f"{path} does not exist") from None
            except OSError:
                raise WorkspaceError(f"{path} is not a folder") from None
        finally:
            os.close(parent)

    def open_file(self, path: str) -> tuple[int, str]:
        """A read-only descriptor of the regular file ``path`` and its shown path."""
        parent, name, shown = self.locate(path)
        try:
            if not name:
                raise WorkspaceError(f"{shown} is a folder; use list_folder")
            return open_regular(name, parent, shown), shown
        finally:
            os.close(parent)

    def write_bytes(self, path: str, data: bytes) -> tuple[str, bool]:
        """Replace or create the file ``path`` atomically (a temporary file renamed over it,
        keeping the old file's mode); return its shown path and whether it existed."""
        parent, name, shown = self.locate(path, make_folders=True)
        try:
            if not name:
                raise WorkspaceError(f"{path} is a folder, not a file")
            return shown, _replace_file(parent, name, shown, data)
        finally:
            os.close(parent)


def read_link(name: str, parent: int) -> str | None:
    """The target of the symlink ``name`` in ``parent``, or None when it is not a symlink."""
    try:
        return os.readlink(name, dir_fd=parent)
    except OSError:  # EINVAL (not a link) or ENOENT (missing): the next open says which
        return None


def open_regular(name: str, parent: int, shown: str) -> int:
    """Open ``name`` read-only without following a symlink or blocking on a FIFO."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=parent)
    except FileNotFoundError:
        raise MissingPathError(shown) from None
    except IsADirectoryError:
        raise WorkspaceError(f"{shown} is a folder; use list_folder") from None
    except OSError as exc:
        raise WorkspaceError(f"Cannot open {shown}: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise WorkspaceError(f"{shown} is a folder; use list_folder")
        raise WorkspaceError(f"{shown} is not a regular file")
    os.set_blocking(fd, True)
    return fd


def _replace_file(parent: int, name: str, shown: str, data: bytes) -> bool:
    """Write ``data`` to a temporary file beside ``name`` and rename it over ``name``; an
    interrupted write leaves the old file whole. Returns whether the file existed."""
    try:
        old = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and stat.S_ISDIR(old.st_mode):
        raise WorkspaceError(f"{shown} is a folder, not a file")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise WorkspaceError(f"{shown} is not a regular file")
    temp = f".{name[:200]}.{secrets.token_hex(4)}.agentkit-tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
    fd = os.open(temp, flags, 0o666, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            if old is not None:
                os.fchmod(out.fileno(), stat.S_IMODE(old.st_mode))
            os.fsync(out.fileno())
        os.rename(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    return old is not None


def printable_name(name: str) -> str:
    """A file name as text that always encodes: undecodable bytes shown as ``\\xNN``."""
    return os.fsencode(name).decode("utf-8", errors="backslashreplace")

