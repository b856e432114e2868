"""The CLI's workspace tools (``agentkit.workspace``), called the way the loop calls them:
``tool.execute(tool_call_id, params, signal, on_update)``."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit.abort import AbortController
from agentkit.errors import AbortError
from agentkit.tools import AgentTool, AgentToolResult
from agentkit.workspace import (
    MUTATING_TOOLS,
    WorkspaceError,
    compact_tools,
    is_sandboxed,
    sandbox_available,
    workspace_tools,
)
from agentkit.workspace import sandbox as workspace_sandbox


@pytest.fixture()
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    print('hello')\n\nmain()\n")
    (root / "notes.txt").write_text("".join(f"line {i}\n" for i in range(1, 51)))
    (tmp_path / "secret.txt").write_text("top secret\n")
    return root


def tools(root: Path) -> dict[str, AgentTool]:
    return {t.name: t for t in workspace_tools(root)}


def call(
    root: Path, name: str, signal: Any = None, on_update: Any = None, **params: Any
) -> AgentToolResult:
    sig = signal if signal is not None else AbortController().signal
    return tools(root)[name].execute("call-1", params, sig, on_update or (lambda _: None))


def test_the_tool_set_and_which_need_approval(ws: Path) -> None:
    names = [t.name for t in workspace_tools(ws)]
    assert names == [
        "read_file",
        "write_file",
        "edit_file",
        "list_folder",
        "search_text",
        "run_command",
    ]
    assert MUTATING_TOOLS == {"write_file", "edit_file", "run_command"}
    by_name = tools(ws)
    assert all(by_name[n].execution_mode == "sequential" for n in MUTATING_TOOLS)
    for t in by_name.values():
        props = t.parameters["properties"]
        assert not {"signal", "on_update", "tool_call_id"} & set(props)
        assert t.description


def test_a_workspace_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match="not a folder"):
        workspace_tools(tmp_path / "missing")


# --- confinement ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("read_file", {"path": "../secret.txt"}),
        ("read_file", {"path": "src/../../secret.txt"}),
        ("write_file", {"path": "../evil.txt", "content": "x"}),
        ("edit_file", {"path": "../secret.txt", "old_text": "top", "new_text": "no"}),
        ("list_folder", {"path": ".."}),
        ("search_text", {"pattern": "secret", "path": ".."}),
    ],
)
def test_parent_paths_are_refused(ws: Path, name: str, params: dict[str, Any]) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, name, **params)
    assert not (ws.parent / "evil.txt").exists()
    assert (ws.parent / "secret.txt").read_text() == "top secret\n"


def test_absolute_paths_outside_are_refused_inside_are_allowed(ws: Path) -> None:
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "read_file", path=str(ws.parent / "secret.txt"))
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "write_file", path="/tmp/agentkit-should-not-exist.txt", content="x")
    assert not Path("/tmp/agentkit-should-not-exist.txt").exists()
    assert "hello" in call(ws, "read_file", path=str(ws / "src" / "app.py")).text


def test_symlinks_pointing_out_are_refused(ws: Path) -> None:
    (ws / "link.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "outdir").symlink_to(ws.parent)
    (ws / "dangling").symlink_to(ws.parent / "new-file.txt")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "read_file", path="link.txt")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "read_file", path="outdir/secret.txt")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "edit_file", path="link.txt", old_text="top", new_text="no")
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(ws, "write_file", path="dangling", content="x")
    assert not (ws.parent / "new-file.txt").exists()
    # A search walks past links that lead out, without following them.
    found = call(ws, "search_text", pattern="secret")
    assert "No matches" in found.text


def test_symlinks_inside_the_workspace_work(ws: Path) -> None:
    (ws / "alias.py").symlink_to(ws / "src" / "app.py")
    assert "hello" in call(ws, "read_file", path="alias.py").text
    assert "alias.py@" in call(ws, "list_folder").text


def test_a_workspace_reached_through_a_symlink(tmp_path: Path, ws: Path) -> None:
    link = tmp_path / "ws-link"
    link.symlink_to(ws)
    assert "hello" in call(link, "read_file", path="src/app.py").text
    with pytest.raises(WorkspaceError, match="outside the workspace"):
        call(link, "read_file", path="../secret.txt")


# --- read, write, list ------------------------------------------------------------------------


def test_read_with_offset_and_limit(ws: Path) -> None:
    whole = call(ws, "read_file", path="notes.txt")
    assert whole.text.startswith("line 1\n") and whole.text.endswith("line 50\n")
    part = call(ws, "read_file", path="notes.txt", offset=10, limit=3)
    assert part.text.startswith("line 10\nline 11\nline 12\n")
    assert "showing lines 10-12 of 50" in part.text and "offset=13" in part.text
    assert part.details["total_lines"] == 50
    with pytest.raises(WorkspaceError, match="past its end"):
        call(ws, "read_file", path="notes.txt", offset=51)
    with pytest.raises(WorkspaceError, match="offset must be at least 1"):
        call(ws, "read_file", path="notes.txt", offset=0)
    with pytest.raises(WorkspaceError, match="limit must be between 1 and 2000"):
        call(ws, "read_file", path="notes.txt", limit=0)


def test_read_bounds_the_text_it_returns(ws: Path) -> None:
    (ws / "wide.txt").write_text(("x" * 25_000 + "\n") * 4)
    first = call(ws, "read_file", path="wide.txt")
    assert first.details["lines"] == 2 and "offset=3" in first.text
    assert len(first.text) < 52_000
    rest = call(ws, "read_file", path="wide.txt", offset=3)
    assert rest.details["lines"] == 2 and "showing" not in rest.text


def test_read_refuses_missing_folders_and_binary(ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"\x00\x01\x02")
    with pytest.raises(WorkspaceError, match="does not exist"):
        call(ws, "read_file", path="nope.txt")
    with pytest.raises(WorkspaceError, match="is a folder"):
        call(ws, "read_file", path="src")
    with pytest.raises(WorkspaceError, match="binary"):
        call(ws, "read_file", path="blob.bin")
    os.mkfifo(ws / "pipe")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        call(ws, "read_file", path="pipe")


def test_write_creates_folders_and_overwrites(ws: Path) -> None:
    made = call(ws, "write_file", path="a/b/new.txt", content="héllo\n")
    assert (ws / "a" / "b" / "new.txt").read_text(encoding="utf-8") == "héllo\n"
    assert made.details == {"path": "a/b/new.txt", "bytes": 7, "created": True}
    again = call(ws, "write_file", path="a/b/new.txt", content="bye")
    assert again.details["created"] is False
    assert (ws / "a" / "b" / "new.txt").read_text() == "bye"
    with pytest.raises(WorkspaceError, match="is a folder"):
        call(ws, "write_file", path="src", content="x")


def test_list_folder(ws: Path) -> None:
    listing = call(ws, "list_folder")
    assert listing.text.splitlines() == ["notes.txt", "src/"]
    assert call(ws, "list_folder", path="src").text == "app.py"
    with pytest.raises(WorkspaceError, match="not a folder"):
        call(ws, "list_folder", path="notes.txt")


# --- edit -------------------------------------------------------------------------------------


def test_edit_replaces_one_exact_occurrence(ws: Path) -> None:
    result = call(
        ws, "edit_file", path="src/app.py", old_text="print('hello')", new_text="print('bye')"
    )
    assert (ws / "src" / "app.py").read_text() == "def main():\n    print('bye')\n\nmain()\n"
    assert result.details == {
        "path": "src/app.py",
        "replacements": 1,
        "first_line": 2,
        "whitespace_differed": False,
    }


def test_edit_errors_when_not_found(ws: Path) -> None:
    before = (ws / "src" / "app.py").read_text()
    with pytest.raises(WorkspaceError, match="not found"):
        call(ws, "edit_file", path="src/app.py", old_text="print('HELLO')", new_text="x")
    with pytest.raises(WorkspaceError, match="must not be empty"):
        call(ws, "edit_file", path="src/app.py", old_text="", new_text="x")
    with pytest.raises(WorkspaceError, match="does not exist"):
        call(ws, "edit_file", path="src/none.py", old_text="a", new_text="b")
    assert (ws / "src" / "app.py").read_text() == before


def test_edit_matches_text_whose_spaces_or_line_breaks_differ_once(ws: Path) -> None:
    """The model's old_text lost its indentation: it matches the one place whose words are the
    same, the file's indentation is kept, and the result says so."""
    result = call(
        ws,
        "edit_file",
        path="src/app.py",
        old_text="def main():\nprint('hello')\n",
        new_text="def run():\nprint('bye')\n",
    )
    assert (ws / "src" / "app.py").read_text() == "def run():\n    print('bye')\n\nmain()\n"
    assert "matched the file only with other spaces or line breaks" in result.text
    assert result.details["whitespace_differed"] is True
    exact = call(ws, "edit_file", path="src/app.py", old_text="run", new_text="go")
    assert exact.details["whitespace_differed"] is False
    assert "other spaces" not in exact.text


def test_a_loose_match_in_more_than_one_place_is_not_made(ws: Path) -> None:
    (ws / "dup.txt").write_text("x =  1\ny = 2\nx =\t1\n")
    with pytest.raises(WorkspaceError, match="not found"):
        call(ws, "edit_file", path="dup.txt", old_text="x = 1", new_text="x = 3")
    assert (ws / "dup.txt").read_text() == "x =  1\ny = 2\nx =\t1\n"


def test_text_not_found_quotes_the_nearest_lines(ws: Path) -> None:
    with pytest.raises(WorkspaceError) as missing:
        call(ws, "edit_file", path="src/app.py", old_text="print('HELLO')", new_text="x")
    assert "The nearest lines:\n1: def main():\n2:     print('hello')\n3: " in str(missing.value)
    with pytest.raises(WorkspaceError) as unlike:
        call(ws, "edit_file", path="src/app.py", old_text="zzzz qqqq", new_text="x")
    assert "no line is like 'zzzz qqqq'" in str(unlike.value)


def test_edit_errors_when_ambiguous_unless_replace_all(ws: Path) -> None:
    (ws / "dup.txt").write_text("x = 1\ny = 2\nx = 1\n")
    with pytest.raises(WorkspaceError, match="occurs 2 times"):
        call(ws, "edit_file", path="dup.txt", old_text="x = 1", new_text="x = 3")
    assert (ws / "dup.txt").read_text() == "x = 1\ny = 2\nx = 1\n"
    # More context makes it unique.
    call(ws, "edit_file", path="dup.txt", old_text="y = 2\nx = 1", new_text="y = 2\nx = 9")
    assert (ws / "dup.txt").read_text() == "x = 1\ny = 2\nx = 9\n"
    done = call(ws, "edit_file", path="dup.txt", old_text="x", new_text="z", replace_all=True)
    assert done.details["replacements"] == 2
    assert (ws / "dup.txt").read_text() == "z = 1\ny = 2\nz = 9\n"


def test_edit_keeps_line_endings(ws: Path) -> None:
    (ws / "crlf.txt").write_bytes(b"one\r\ntwo\r\n")
    call(ws, "edit_file", path="crlf.txt", old_text="two", new_text="2")
    assert (ws / "crlf.txt").read_bytes() == b"one\r\n2\r\n"


def test_unknown_arguments_are_refused(ws: Path) -> None:
    with pytest.raises(Exception, match="Validation failed"):
        call(ws, "edit_file", path="src/app.py", old="a", new="b")


# --- search -----------------------------------------------------------------------------------


@pytest.mark.processes
def test_search_finds_lines_and_respects_bounds(ws: Path) -> None:
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("line 7 in git\n")
    (ws / "blob.bin").write_bytes(b"line 7\x00")
    found = call(ws, "search_text", pattern=r"line [7-9]$")
    assert found.text.splitlines() == [
        "notes.txt:7: line 7",
        "notes.txt:8: line 8",
        "notes.txt:9: line 9",
    ]
    limited = call(ws, "search_text", pattern="line", max_results=5)
    assert len([ln for ln in limited.text.splitlines() if ln.startswith("notes.txt:")]) == 5
    assert limited.details["truncated"] is True and "stopped at 5" in limited.text
    py = call(ws, "search_text", pattern="HELLO", glob="*.py", ignore_case=True)
    assert py.text == "src/app.py:2:     print('hello')"
    assert "No matches" in call(ws, "search_text", pattern="line", glob="*.py").text
    with pytest.raises(WorkspaceError, match="Invalid regular expression"):
        call(ws, "search_text", pattern="(")


# --- run_command ------------------------------------------------------------------------------


@pytest.mark.processes
def test_run_command_reports_exit_code_and_output(ws: Path) -> None:
    ok = call(ws, "run_command", command="ls src && echo done")
    assert ok.text == "Exit code 0\napp.py\ndone"
    assert not ok.is_error and ok.details["exit_code"] == 0
    failed = call(ws, "run_command", command="echo oops >&2; exit 3")
    assert failed.is_error and failed.details["exit_code"] == 3 and "oops" in failed.text
    assert call(ws, "run_command", command="pwd").text.endswith(str(ws.resolve()))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def wait_gone(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.processes
def test_run_command_timeout_kills_the_process_and_its_children(ws: Path) -> None:
    started = time.monotonic()
    with pytest.raises(WorkspaceError, match="timed out after 0.5 s") as info:
        call(
            ws,
            "run_command",
            command="echo $$ > pid; sleep 30 & echo $! > child; wait",
            timeout=0.5,
        )
    assert time.monotonic() - started < 5
    assert "killed" in str(info.value)
    assert wait_gone(int((ws / "pid").read_text()))
    assert wait_gone(int((ws / "child").read_text()))


@pytest.mark.processes
def test_run_command_abort_kills_the_process(ws: Path) -> None:
    controller = AbortController()

    def abort_once_started(update: AgentToolResult) -> None:
        # The shell has written its pid once "started" is in the streamed output.
        if "started" in "".join(getattr(c, "text", "") for c in update.content):
            controller.abort()

    started = time.monotonic()
    with pytest.raises(AbortError, match="aborted"):
        call(
            ws,
            "run_command",
            signal=controller.signal,
            on_update=abort_once_started,
            command="echo $$ > pid; echo started; sleep 30",
        )
    assert time.monotonic() - started < 25  # the sleep is 30 s: the abort ended it
    assert wait_gone(int((ws / "pid").read_text()))


class CountingSelector(selectors.DefaultSelector):
    """The selector ``run_command`` waits in, counting its wake-ups; ``waiting`` is set once
    the wait has blocked for the first time."""

    selects = 0
    waiting = threading.Event()

    def select(self, timeout: float | None = None) -> Any:
        type(self).selects += 1
        type(self).waiting.set()
        return super().select(timeout)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> type[CountingSelector]:
    CountingSelector.selects = 0
    CountingSelector.waiting = threading.Event()
    monkeypatch.setattr(selectors, "DefaultSelector", CountingSelector)
    return CountingSelector


@pytest.mark.processes
def test_a_silent_command_is_waited_for_without_polling(
    ws: Path, counting: type[CountingSelector]
) -> None:
    result = call(ws, "run_command", command="sleep 1; echo done")
    assert result.text == "Exit code 0\ndone"
    # Woken by the output, the end of output and the exit: a 50 ms poll would make about 20.
    assert counting.selects <= 5


@pytest.mark.processes
def test_an_abort_from_another_thread_ends_a_silent_command(
    ws: Path, counting: type[CountingSelector]
) -> None:
    controller = AbortController()

    def abort_once_waiting() -> None:
        if counting.waiting.wait(20):
            controller.abort()

    aborter = threading.Thread(target=abort_once_waiting)
    aborter.start()
    started = time.monotonic()
    with pytest.raises(AbortError, match="aborted"):
        call(ws, "run_command", signal=controller.signal, command="sleep 30")
    aborter.join()
    assert time.monotonic() - started < 20  # the sleep is 30 s: the abort ended it
    assert counting.selects <= 3  # woken by the abort itself, not found by a poll


@pytest.mark.processes
def test_run_command_output_is_bounded_and_streamed(ws: Path) -> None:
    updates: list[Any] = []
    result = call(
        ws,
        "run_command",
        on_update=updates.append,
        command="python3 -c \"import sys; sys.stdout.write('a' * 100000 + 'END')\"; sleep 0.7",
    )
    assert len(result.text) < 40_000
    assert "characters of output omitted" in result.text
    assert result.text.endswith("END") and result.text.startswith("Exit code 0\naaaa")
    assert updates and isinstance(updates[0], AgentToolResult)


@pytest.mark.processes
def test_the_bounds_can_be_lowered_for_a_small_context(ws: Path) -> None:
    small = {t.name: t for t in workspace_tools(ws, max_read_chars=20, max_output_chars=30)}
    signal = AbortController().signal
    read = small["read_file"].execute("c", {"path": "notes.txt"}, signal, lambda _: None)
    assert read.details["lines"] == 2 and "offset=3" in read.text  # "line 1\n" is 7 chars
    ran = small["run_command"].execute("c", {"command": "seq 1 1000"}, signal, lambda _: None)
    assert ran.text.startswith("Exit code 0\n1\n2\n") and ran.text.endswith("999\n1000")
    assert len(ran.text) < 100
    with pytest.raises(ValueError):
        workspace_tools(ws, max_read_chars=0)


@pytest.mark.processes
def test_run_command_does_not_wait_for_background_children(ws: Path) -> None:
    started = time.monotonic()
    result = call(ws, "run_command", command="sleep 30 & echo $! > child; echo bye")
    assert time.monotonic() - started < 5
    assert "bye" in result.text
    assert wait_gone(int((ws / "child").read_text()))


def test_run_command_validates_its_arguments(ws: Path) -> None:
    with pytest.raises(WorkspaceError, match="timeout must be"):
        call(ws, "run_command", command="true", timeout=0)
    with pytest.raises(WorkspaceError, match="empty"):
        call(ws, "run_command", command="   ")
    controller = AbortController()
    controller.abort()
    with pytest.raises(AbortError):
        call(ws, "run_command", command="touch ran", signal=controller.signal)
    assert not (ws / "ran").exists()


# --- hostile input ----------------------------------------------------------------------------


@pytest.mark.processes
def test_a_symlink_swapped_in_during_calls_never_escapes(ws: Path) -> None:
    """A folder swapped for a link that leads out while the tools run: every read returns the
    inside text or an error, and no write lands outside."""
    (ws / "real").mkdir()
    (ws / "real" / "secret.txt").write_text("inside\n")
    (ws / "link").symlink_to(ws.parent)
    flipper = (
        "import os, sys\n"
        "os.chdir(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    for name in ('real', 'link'):\n"
        "        os.rename(name, 'sub')\n"
        "        os.rename('sub', name)\n"
    )
    # Another process flips the link, so swaps land at any instant of a call.
    child = subprocess.Popen([sys.executable, "-c", flipper, str(ws)], stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    by_name = tools(ws)
    signal = AbortController().signal
    try:
        texts = []
        for _ in range(500):
            try:
                read = by_name["read_file"].execute("r", {"path": "sub/secret.txt"}, signal, print)
                texts.append(read.text)
            except WorkspaceError:
                pass
            try:
                by_name["write_file"].execute(
                    "w", {"path": "sub/made.txt", "content": "x"}, signal, print
                )
            except (WorkspaceError, OSError):
                pass
    finally:
        child.kill()
        child.wait()
    assert all("secret" not in t for t in texts)
    assert not (ws.parent / "made.txt").exists()
    assert (ws.parent / "secret.txt").read_text() == "top secret\n"


def test_writes_replace_the_file_atomically_and_keep_its_mode(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o750)
    before = script.stat().st_ino
    call(ws, "edit_file", path="run.sh", old_text="one", new_text="two")
    assert script.read_text() == "echo two\n"
    assert script.stat().st_ino != before  # a new file renamed over the old one
    assert script.stat().st_mode & 0o777 == 0o750
    call(ws, "write_file", path="run.sh", content="echo three\n")
    assert script.stat().st_mode & 0o777 == 0o750
    assert sorted(p.name for p in ws.iterdir()) == ["notes.txt", "run.sh", "src"]


def test_an_interrupted_write_leaves_the_old_file_whole(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        call(ws, "write_file", path="notes.txt", content="half")
    assert (ws / "notes.txt").read_text().startswith("line 1\n")
    assert sorted(p.name for p in ws.iterdir()) == ["notes.txt", "src"]  # no temp file left


def test_read_file_bounds_memory_on_a_file_without_newlines(ws: Path) -> None:
    import tracemalloc

    with (ws / "min.js").open("wb") as f:
        for _ in range(40):
            f.write(b"x" * 1_000_000)
    tracemalloc.start()
    try:
        result = call(ws, "read_file", path="min.js")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.details["total_lines"] == 1
    assert "[line cut: too long]" in result.text and len(result.text) < 61_000
    assert peak < 5_000_000, peak  # the whole line would be 40 MB


@pytest.mark.processes
def test_a_catastrophic_regex_is_abortable(ws: Path) -> None:
    (ws / "evil.txt").write_text("a" * 40 + "b\n")
    controller = AbortController()
    outcome: list[BaseException] = []

    def search() -> None:
        try:
            call(ws, "search_text", signal=controller.signal, pattern="(a+)+$")
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=search)
    thread.start()
    threading.Timer(0.5, controller.abort).start()
    thread.join(30)
    assert not thread.is_alive(), "the search ignored the abort"
    assert outcome and isinstance(outcome[0], AbortError)


@pytest.mark.processes
def test_plain_text_search_needs_no_regex_syntax(ws: Path) -> None:
    (ws / "calc.txt").write_text("total = price * (1 + tax)\n")
    found = call(ws, "search_text", pattern="PRICE", ignore_case=True)
    assert found.text == "calc.txt:1: total = price * (1 + tax)"
    assert call(ws, "search_text", pattern=r"price \* \(1").text == found.text


def test_undecodable_file_names_are_listed_as_encodable_text(ws: Path) -> None:
    import json

    os.close(os.open(os.fsencode(ws) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY))
    listing = call(ws, "list_folder").text
    assert "caf\\xe9.txt" in listing
    listing.encode("utf-8")  # no lone surrogate
    json.dumps(listing, ensure_ascii=False).encode("utf-8")


# --- run_command: sandboxed when bubblewrap can, honest when it cannot ---------------------------

needs_sandbox = pytest.mark.skipif(
    not sandbox_available(), reason="bubblewrap (bwrap) is not available here"
)


@pytest.mark.processes
@needs_sandbox
def test_a_sandboxed_command_writes_only_the_workspace_and_has_no_network(ws: Path) -> None:
    import socket

    (run_command,) = [t for t in workspace_tools(ws, sandbox=True) if t.name == "run_command"]
    assert is_sandboxed(run_command) and "no network" in run_command.description
    signal = AbortController().signal
    wrote = run_command.execute(
        "c", {"command": "echo hi > inside.txt; touch ../outside.txt; touch $HOME/x"}, signal, print
    )
    assert (ws / "inside.txt").read_text() == "hi\n"
    assert not (ws.parent / "outside.txt").exists()
    assert not (Path.home() / "x").exists()
    assert wrote.details["exit_code"] == 0  # /tmp and home are throwaway folders inside
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
        reached = run_command.execute("c", {"command": f"bash -c '{probe}'"}, signal, print)
    assert reached.is_error and "connected" not in reached.text


@pytest.mark.processes
def test_without_a_sandbox_run_command_says_it_is_not_confined(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workspace_sandbox, "_sandbox_probe", [False])
    by_name = {t.name: t for t in workspace_tools(ws)}
    assert "Not sandboxed" in by_name["run_command"].description
    assert not is_sandboxed(by_name["run_command"])
    compact = {t.name: t for t in compact_tools(list(by_name.values()))}
    assert "Not sandboxed" in compact["run_command"].description
    assert call(ws, "run_command", command="echo $((6 * 7))").text == "Exit code 0\n42"
    with pytest.raises(WorkspaceError, match="install bubblewrap"):
        workspace_tools(ws, sandbox=True)


# --- write over a file never read (read_before_overwrite) -------------------------------------


def guarded(root: Path) -> dict[str, AgentTool]:
    return {t.name: t for t in workspace_tools(root, read_before_overwrite=True)}


def run_tool(tool_set: dict[str, AgentTool], name: str, **params: Any) -> AgentToolResult:
    return tool_set[name].execute("call-1", params, AbortController().signal, lambda _: None)


def test_a_file_never_read_is_not_replaced_until_the_same_write_is_sent_again(ws: Path) -> None:
    before = (ws / "src" / "app.py").read_text()
    tool_set = guarded(ws)
    with pytest.raises(WorkspaceError, match="already exists and was not read") as refused:
        run_tool(tool_set, "write_file", path="./src/app.py", content="x = 1\n")
    assert "read it with read_file and then use edit_file" in str(refused.value)
    assert (ws / "src" / "app.py").read_text() == before
    with pytest.raises(WorkspaceError):  # other content: refused too, once
        run_tool(tool_set, "write_file", path="src/app.py", content="x = 2\n")
    run_tool(tool_set, "write_file", path="src/app.py", content="x = 1\n")  # the same again
    assert (ws / "src" / "app.py").read_text() == "x = 1\n"


def test_files_read_edited_written_or_new_are_written_at_once(ws: Path) -> None:
    tool_set = guarded(ws)
    run_tool(tool_set, "write_file", path="new.txt", content="a")  # a new file
    run_tool(tool_set, "write_file", path="new.txt", content="b")  # one it wrote
    run_tool(tool_set, "read_file", path="notes.txt", limit=1)
    run_tool(tool_set, "write_file", path="notes.txt", content="c")  # one it read
    run_tool(tool_set, "edit_file", path="src/app.py", old_text="hello", new_text="bye")
    run_tool(tool_set, "write_file", path="src/app.py", content="d")  # one it edited
    assert [(ws / p).read_text() for p in ("new.txt", "notes.txt", "src/app.py")] == ["b", "c", "d"]
    with pytest.raises(WorkspaceError, match="is a folder"):  # not a file: as before
        run_tool(tool_set, "write_file", path="src", content="x")


def test_without_the_guard_existing_files_are_replaced_at_once(ws: Path) -> None:
    run_tool(tools(ws), "write_file", path="notes.txt", content="new")
    assert (ws / "notes.txt").read_text() == "new"


def test_a_missing_file_s_error_says_how_to_create_it(ws: Path) -> None:
    with pytest.raises(WorkspaceError) as missing:
        call(ws, "read_file", path="add.py")
    assert str(missing.value) == "add.py does not exist; to create it, use write_file"
    with pytest.raises(WorkspaceError) as no_folder:
        call(ws, "read_file", path="docs/intro.md")
    assert str(no_folder.value) == (
        "docs does not exist; to create docs/intro.md (it makes the folders), use write_file"
    )
    with pytest.raises(WorkspaceError, match="; to create it, use write_file"):
        call(ws, "edit_file", path="src/none.py", old_text="a", new_text="b")
    with pytest.raises(WorkspaceError) as folder:
        call(ws, "list_folder", path="nope")
    assert str(folder.value) == "nope does not exist"  # only where writing a file is the fix
