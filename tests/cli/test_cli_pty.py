"""Ctrl-C typed on a real terminal (a pty) in each phase of ``agentkit run``: generation, the
approval question and a running tool. The command exits with status 130, prints no traceback
and leaves nothing running. (Model start and prompt reading are in test_main_job.py, with the
embedded model.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.terminal import Terminal, screen_lines

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


def chat_on_terminal(phase: str, workspace: Path) -> Terminal:
    term = Terminal([str(TESTS / "cli_pty_child.py"), phase, str(workspace)], workspace)
    term.read_until(b"/exit quits.")
    return term


def test_a_ctrl_c_just_after_a_fast_run_does_not_end_the_chat(tmp_path: Path) -> None:
    term = chat_on_terminal("chat-fast", tmp_path)
    os.write(term.fd, b"go\n")
    term.read_until(b"done at once")
    term.read_until(b"> ", after=term.output.index(b"done at once"))  # the run has ended
    term.ctrl_c()  # meant for the run, which had already ended
    term.read_until(b"press Ctrl-C again or type /exit")
    os.write(term.fd, b"go on\n")
    term.read_until(b"done again")  # the chat goes on
    term.read_until(b"> ", after=term.output.index(b"done again"))
    term.ctrl_c()
    term.read_until(b"press Ctrl-C again", after=term.output.index(b"done again"))
    term.ctrl_c()  # twice in a row: it leaves
    assert term.wait(timeout=60) == 130, term.output
    assert b"Traceback" not in term.output


def test_a_steering_line_is_never_drawn_over_the_spinner(tmp_path: Path) -> None:
    term = chat_on_terminal("chat-steer", tmp_path)
    os.write(term.fd, b"go\n")
    term.read_until(b"working... 1 s")
    os.write(term.fd, b"go left\n")
    term.read_until(b"steering: go left")
    term.read_until(b"working...", after=term.output.index(b"steering: go left"))
    term.ctrl_c()
    term.read_until(b"run aborted")
    os.write(term.fd, b"/exit\n")
    assert term.wait(timeout=60) == 0, term.output
    lines = screen_lines(term.output)
    assert "agentkit: steering: go left" in lines, lines
    assert "agentkit: run aborted" in lines, lines

