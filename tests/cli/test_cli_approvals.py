"""The approval question of the real ``agentkit`` command when nobody can answer it: the end of
input in ``chat`` answers "no", and ``run`` without a terminal stops at the first refusal with a
non-zero status and says how to approve. Each runs the command as a child process."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.terminal import Terminal

pytestmark = pytest.mark.processes

HERE = Path(__file__).resolve().parent
WAIT = 120  # seconds: generous, the child needs about one


def agentkit(command: str, workspace: Path, *args: str, stdin: str | None = None
             ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run the command; ``stdin`` is piped in and closed (``None``: /dev/null)."""
    child = [sys.executable, str(HERE / "cli_approval_child.py"), command, str(workspace), *args]
    try:
        return subprocess.run(
            child,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=WAIT,
            env={**os.environ, "AGENTKIT_KEEP_SERVER": "0"},
        )
    except subprocess.TimeoutExpired as exc:  # the old fault: stuck at the question
        pytest.fail(f"agentkit {command} did not end within {WAIT} s: {exc.stderr!r}")


def requests_of(result: subprocess.CompletedProcess[str]) -> int:
    return requests_of_text(result.stderr)


def requests_of_text(stderr: str) -> int:
    line = [x for x in stderr.splitlines() if x.startswith("model requests: ")][-1]
    return int(line.rsplit(" ", 1)[1])


def test_chat_ends_when_its_input_ends_at_the_approval_question(tmp_path: Path) -> None:
    """The input closes while the question waits: that answers "no", and the model's next
    call, which nobody can answer any more, ends the run."""
    child = [sys.executable, str(HERE / "cli_approval_child.py"), "chat", str(tmp_path)]
    process = subprocess.Popen(child, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    asked, shown = threading.Event(), io.StringIO()

    def read() -> None:
        assert process.stdout is not None
        while char := process.stdout.read(1):
            shown.write(char)
            if "[y/N] " in shown.getvalue():
                asked.set()
        asked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert process.stdin is not None
        process.stdin.write("Create hi.txt\n")
        process.stdin.flush()
        assert asked.wait(WAIT) and "Allow write_file" in shown.getvalue()
        process.stdin.close()  # Ctrl-D, or the end of a pipe, at the question
        code = process.wait(WAIT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"agentkit chat did not end within {WAIT} s of its input's end")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        reader.join(WAIT)
    stderr = process.stderr.read() if process.stderr is not None else ""
    assert code == 0, stderr
    assert not (tmp_path / "hi.txt").exists()
    assert "did not approve write_file" in shown.getvalue()  # the question's answer: no
    assert requests_of_text(stderr) == 2  # asked again once, then the run ended
    assert "the input has ended" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("json_mode", [False, True])
def test_run_without_a_terminal_stops_at_the_first_refusal(tmp_path: Path, json_mode: bool
                                                           ) -> None:  # fmt: skip
    result = agentkit("run", tmp_path, *(["--json"] if json_mode else []))
    assert result.returncode == 1, result.stderr
    assert not (tmp_path / "hi.txt").exists()
    assert requests_of(result) == 1  # the model was not asked again
    assert "write_file" in result.stderr and "--yes" in result.stderr
    assert "--allow write_file" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_with_the_task_on_standard_input_stops_too(tmp_path: Path) -> None:
    child = [sys.executable, str(HERE / "cli_approval_child.py"), "run", str(tmp_path)]
    result = subprocess.run([*child[:2], "run-stdin", str(tmp_path)], input="Create hi.txt",
                            capture_output=True, text=True, timeout=WAIT)  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert requests_of(result) == 1 and not (tmp_path / "hi.txt").exists()


def test_an_approval_rule_lets_the_run_write_without_a_terminal(tmp_path: Path) -> None:
    result = agentkit("run", tmp_path, "--allow", "write_file", "--max-turns", "2")
    assert (tmp_path / "hi.txt").read_text() == "hello"
    assert "Allow write_file" not in result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty")
def test_ctrl_d_at_the_question_on_a_terminal_answers_no_and_ends_the_asking(tmp_path: Path
                                                                             ) -> None:  # fmt: skip
    term = Terminal([str(HERE / "cli_approval_child.py"), "run", str(tmp_path)], tmp_path)
    term.read_until(b"[y/N]")
    os.write(term.fd, b"\x04")  # Ctrl-D: the end of input, at the start of a line
    code = term.wait(WAIT)  # the old command asked again, and waited on the terminal for good
    assert code == 1, term.output
    assert b"did not approve write_file" in term.output and b"the input has ended" in term.output
    assert b"model requests: 2" in term.output
    assert not (tmp_path / "hi.txt").exists()
