"""The documentation site, built strictly once for the whole test run and shared by the xdist
workers (the first to ask builds it under a lock; the others wait and read its outcome)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def built_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The folder of the site built by ``mkdocs build --strict`` from this tree, with the
    build's exit code and what it printed to standard error."""
    base = tmp_path_factory.getbasetemp()
    # Under pytest-xdist each worker has a folder of its own inside the run's: the run's is
    # shared by the workers and by this run alone.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, outcome = shared / "docs-site", shared / "docs-site.json"
    with open(shared / "docs-site.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not outcome.exists():
            done = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                 "--site-dir", str(folder)],
                cwd=ROOT, capture_output=True, text=True, timeout=300,
                env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            outcome.write_text(json.dumps([done.returncode, done.stderr]))
        code, stderr = json.loads(outcome.read_text())
    return folder, code, stderr
