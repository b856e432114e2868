"""How to install an optional extra, said so that the command works where this agentkit is.

From a source checkout (an editable install, or the tree on ``PYTHONPATH``) it is ``pip install
-e`` of that checkout; from an installed wheel it is the extra's own requirements, read from the
installed metadata (agentkit is not on PyPI, so ``pip install 'agentkit[ui]'`` would find
nothing). Either way it names this interpreter's pip (``python -m pip``), so the extra lands
where agentkit runs, not in whichever Python ``pip`` on ``PATH`` belongs to.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from pathlib import Path


def checkout_root() -> Path | None:
    """The source checkout this agentkit is imported from (the folder with its ``setup.cfg``),
    or ``None`` for an installed package."""
    root = Path(__file__).resolve().parents[1]
    try:
        setup = (root / "setup.cfg").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(r"^name\s*=\s*agentkit\s*$", setup, re.M) else None


def extra_requirements(extra: str) -> list[str]:
    """The requirements the installed agentkit's metadata lists for ``extra`` (none when its
    metadata cannot be found)."""
    try:
        lines = importlib.metadata.requires("agentkit") or []
    except importlib.metadata.PackageNotFoundError:
        return []
    wanted = re.sub(r"[-_.]+", "-", extra).lower()
    found = []
    for line in lines:
        requirement, _, marker = line.partition(";")
        named = re.search(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if named and re.sub(r"[-_.]+", "-", named.group(1)).lower() == wanted:
            found.append(requirement.strip())
    return found


def install_command(extra: str) -> str:
    """The shell command that installs ``extra`` for this agentkit (see the module's text)."""
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    root = checkout_root()
    if root is not None:
        return f"{pip} -e {shlex.quote(f'{root}[{extra}]')}"
    requirements = extra_requirements(extra)
    if requirements:
        return f"{pip} {' '.join(shlex.quote(r) for r in requirements)}"
    return f"{pip} {shlex.quote(f'agentkit[{extra}]')}"


def needs_extra(what: str, extra: str) -> str:
    """A sentence for an error: ``what`` needs ``extra``, and the command that installs it."""
    return f"{what} needs the {extra} extra: {install_command(extra)}"
