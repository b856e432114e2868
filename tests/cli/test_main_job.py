"""The README's main job, run as a user would: the installed ``agentkit`` command on the embedded
model. Protocol facts only: the right tool with the right argument, its result, an answer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import NEEDS_EMBEDDED_MODEL

ROOT = Path(__file__).resolve().parents[2]

pytestmark = NEEDS_EMBEDDED_MODEL


def readme_main_job() -> list[str]:
    """The ``agentkit run ...`` part of the README's first command, as arguments."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"\.venv/bin/agentkit (run [^\n]+)", text)
    assert match, "the README's main job command was not found"
    import shlex

    return shlex.split(match.group(1))


def test_the_readme_main_job_runs_a_real_agent() -> None:
    command = shutil.which("agentkit", path=str(Path(sys.executable).parent)) or "agentkit"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [command, *readme_main_job()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "using the embedded local model" in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith('-> read_file {"path": "notes.txt"')
    assert lines[1].startswith("<- read_file ok") and "milk" in lines[1]
    answer = " ".join(lines[2:])
    assert answer.strip(), "the model gave no answer after the tool result"


def _terminal_run(workspace: Path, *extra: str) -> object:
    from tests.terminal import Terminal

    command = shutil.which("agentkit", path=str(Path(sys.executable).parent))
    assert command, "the agentkit command is not installed in this environment"
    task = "Read the file notes.txt and tell me what it says."
    return Terminal([command, "run", "--workspace", str(workspace), task, *extra], ROOT)


@pytest.mark.parametrize(
    ("phase", "marker", "extra"),
    [
        # The model starting in the command's own process (test_local_server.py interrupts
        # the start of a kept server).
        ("model start", b"starting the local model", ("--no-keep-server",)),
        ("prompt reading", b"working...", ()),
    ],
)
def test_ctrl_c_on_a_terminal_while_the_model_starts_or_reads(
    tmp_path: Path, phase: str, marker: bytes, extra: tuple[str, ...]
) -> None:
    (tmp_path / "notes.txt").write_text("milk\n")
    term = _terminal_run(tmp_path, *extra)
    term.read_until(marker, timeout=240)  # type: ignore[attr-defined]
    term.ctrl_c()  # type: ignore[attr-defined]
    code = term.wait(timeout=60)  # type: ignore[attr-defined]
    output = term.output  # type: ignore[attr-defined]
    assert code == 130, output
    assert b"Traceback" not in output and b"interrupted" in output
