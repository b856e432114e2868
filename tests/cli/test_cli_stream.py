"""What ``agentkit run`` shows on a real terminal (a pty) while the model writes a tool call:
the call's name at once, its arguments as they grow, then its outcome, each call once; and a
spinner while the model writes something not shown yet. The model is a local replay server
that stalls its reply where the test says, so each test sees the screen mid-reply."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.providers.replay_server import ReplayServer, Reply, chat_sse
from tests.terminal import Terminal, screen_lines

HERE = Path(__file__).resolve().parent

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pty"),
]


@pytest.fixture
def model_server() -> Iterator[ReplayServer]:
    server = ReplayServer()
    server.stall_seconds = 60.0  # a stall lasts until the test releases it
    server.start()
    yield server
    server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("Shopping list: milk, eggs\n")
    return tmp_path


def stalled(*deltas: dict[str, Any], stall_after_delta: int, finish: str) -> Reply:
    """A Chat Completions stream of ``deltas`` that stops after the first ``stall_after_delta``
    of them until the server's ``release`` is set, then sends the rest."""
    body = chat_sse(*deltas, finish=finish)
    head = chat_sse(*deltas[:stall_after_delta], finish=finish)
    cut = head.index(b"data: " + json.dumps(
        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    ).encode())  # fmt: skip
    return Reply(body=body, stall_after=cut, resume=True)


def run_on_terminal(server: ReplayServer, workspace: Path, size: str) -> Terminal:
    child = HERE / "cli_stream_child.py"
    return Terminal([str(child), f"{server.url}/v1", str(workspace), size], workspace)


def call_lines(output: bytes) -> list[str]:
    return [line for line in screen_lines(output) if "-> read_file" in line]


def finish(term: Terminal, server: ReplayServer) -> str:
    server.release.set()
    term.read_until(b"<- read_file ok")
    term.read_until(b"It says milk and eggs.")
    assert term.wait() == 0, term.output
    lines = call_lines(term.output)
    assert lines == ['-> read_file {"path": "notes.txt"}'], term.output  # shown once, whole
    return term.output.decode("utf-8", "replace")


ANSWER = Reply(body=chat_sse({"content": "It says milk and eggs."}))


def test_a_call_streamed_as_a_call_shows_its_name_at_once_and_its_arguments_growing(
    model_server: ReplayServer, workspace: Path
) -> None:
    start = {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": ""}}  # fmt: skip
    model_server.enqueue(
        stalled(
            {"tool_calls": [start]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "no'}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": 'tes.txt"}'}}]},
            stall_after_delta=2,
            finish="tool_calls",
        ),
        ANSWER,
    )
    term = run_on_terminal(model_server, workspace, "large")
    term.read_until(b'-> read_file {"path": "no', drawn=True)  # a spinner frame may come between
    assert b"tes.txt" not in term.output  # shown while the model is still writing it
    # While the model is quiet, a spinner's frame turns at the end of the line (a backspace
    # keeps the cursor where the arguments go on); it is gone once they do.
    shown = term.output.index(b'{"path": "no')
    term.read_until(b"\\\x08", after=shown)  # the fourth frame: it turns
    finish(term, model_server)


def test_a_call_written_as_text_shows_as_a_call_while_it_streams(
    model_server: ReplayServer, workspace: Path
) -> None:
    model_server.enqueue(
        stalled(
            {"content": '{"name": "read_file", '},
            {"content": '"arguments": {"path": "no'},
            {"content": 'tes.txt"}}'},
            stall_after_delta=2,
            finish="stop",
        ),
        ANSWER,
    )
    term = run_on_terminal(model_server, workspace, "small")
    term.read_until(b'-> read_file {"path": "no', drawn=True)  # a spinner frame may come between
    assert b"tes.txt" not in term.output
    output = finish(term, model_server)
    assert '"name"' not in output  # the call's own JSON is never shown as text


def test_the_spinner_goes_on_while_the_model_writes_what_is_not_shown_yet(
    model_server: ReplayServer, workspace: Path
) -> None:
    model_server.enqueue(
        stalled(
            {"content": '{"na'},
            {"content": 'me": "read_file", "arguments": {"path": "notes.txt"}}'},
            stall_after_delta=1,
            finish="stop",
        ),
        ANSWER,
    )
    term = run_on_terminal(model_server, workspace, "small")
    assert model_server.wait_for_requests(1, timeout=60)
    # The first delta came at once; the spinner still counts the seconds of the stall.
    term.read_until(b"working... 3 s")
    assert b"-> read_file" not in term.output
    finish(term, model_server)
