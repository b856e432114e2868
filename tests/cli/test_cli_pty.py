"""Ctrl-C typed on a real terminal (a pty) in each phase of ``agentkit run``: generation, the
approval question and a running tool. The command exits with status 130, prints no traceback
and leaves nothing running. (Model start and prompt reading are in test_main_job.py, with the
embedded model.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.terminal import Terminal

TESTS = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty"),
]


@pytest.mark.parametrize(
    ("phase", "marker"),
    [
        ("generation", b"thinking about it"),
        ("approval", b"[y/N]"),
        ("tool", b"-> run_command"),
    ],
)
def test_ctrl_c_on_a_terminal_exits_130_without_a_traceback(
    tmp_path: Path, phase: str, marker: bytes
) -> None:
    term = Terminal([str(TESTS / "cli_pty_child.py"), phase, str(tmp_path)], tmp_path)
    term.read_until(marker)
    term.ctrl_c()
    code = term.wait()
    assert code == 130, term.output
    assert b"Traceback" not in term.output
    assert b"interrupted" in term.output
    assert not (tmp_path / "a.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # nothing half-written
