"""The ``agentkit`` command with the scripted model: output, --json, approval, workspace
confinement, --max-turns and Ctrl-C in chat."""

from __future__ import annotations

import io
import json
import os
import signal as signals
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentkit import cli
from agentkit.cli import agent_setup
from agentkit.cli.console import Console
from agentkit.cli.model_choice import choose_model
from agentkit.cli.render import readable_error
from agentkit.cli.run import CALL_FORMAT_NOTE, PARSE_RETRIES
from agentkit.errors import CliError
from agentkit.providers.table import PROVIDERS
from agentkit.testing import SCRIPTED_MODEL, ScriptedModel, reply, tool_call
from tests.support import Watched

HOSTED_KEYS = [env for info in PROVIDERS.values() if info.default_model for env in info.env_keys]
"""The variables whose key makes a hosted provider the CLI's default."""


class Terminal(io.StringIO):
    """Standard input that says it is a terminal (for approval prompts)."""

    def isatty(self) -> bool:
        return True


def run_cli(
    args: list[str], replies: list[Any], stdin: Any = None, on: Any = None
) -> tuple[int, str, str, ScriptedModel]:
    model = ScriptedModel(replies, model=on)
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        args,
        stream_fn=model,
        model=model.model,
        stdin=stdin or io.StringIO(""),
        stdout=out,
        stderr=err,
    )
    return code, out.getvalue(), err.getvalue(), model


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("remember the milk\n")
    (tmp_path / "secret.txt").write_text("top secret\n")
    return root


def last_tool_result(model: ScriptedModel) -> Any:
    return [m for m in model.requests[-1].messages if m.role == "tool_result"][-1]


def test_run_streams_the_answer_and_shows_tool_calls(workspace: Path) -> None:
    code, out, err, model = run_cli(
        ["run", "What is in notes.txt?", "--workspace", str(workspace)],
        [reply(tool_call("read_file", {"path": "notes.txt"})), "It says: remember the milk."],
    )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == '-> read_file {"path": "notes.txt"}'
    assert lines[1].startswith("<- read_file ok ") and " ms: " in lines[1]
    assert "remember the milk" in lines[1]
    assert lines[-1] == "It says: remember the milk."
    assert "remember the milk" in last_tool_result(model).content[0].text


def test_json_prints_one_event_per_line(workspace: Path) -> None:
    code, out, _, _ = run_cli(
        ["run", "hi", "--json", "--workspace", str(workspace)], ["Hello there"]
    )
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    deltas = [e["delta"] for e in events if e["type"] == "message_update" and "delta" in e]
    assert "".join(deltas) == "Hello there"
    end = [e for e in events if e["type"] == "message_end"][-1]
    assert end["message"]["role"] == "assistant"


def test_writes_need_approval_and_stop_the_run_without_a_terminal(workspace: Path) -> None:
    code, out, err, model = run_cli(
        ["run", "write it", "--workspace", str(workspace)],
        [reply(tool_call("write_file", {"path": "new.txt", "content": "x"})), "I could not."],
    )
    assert not (workspace / "new.txt").exists()
    assert len(model.requests) == 1  # nobody could answer: the run ends, the model is not asked
    assert "pass --yes" in err and "--allow write_file" in err
    assert code == 1


def test_an_end_of_input_at_the_question_answers_no(workspace: Path) -> None:
    code, out, err, model = run_cli(
        ["run", "write it", "--workspace", str(workspace)],
        [reply(tool_call("write_file", {"path": "new.txt", "content": "x"})), "I could not."],
        stdin=Terminal(""),  # a terminal whose input ends (Ctrl-D) at the question
    )
    assert not (workspace / "new.txt").exists()
    result = last_tool_result(model)
    assert result.is_error and "did not approve write_file" in result.content[0].text
    assert code == 0

    write = reply(tool_call("write_file", {"path": "new.txt", "content": "x"}))
    code, out, err, model = run_cli(["run", "write it", "--workspace", str(workspace)],
                                    [write] * 50, stdin=Terminal(""))  # fmt: skip
    assert len(model.requests) == 2  # asked again after the "no": nobody is left to answer
    assert code == 1 and "the input has ended" in err and not (workspace / "new.txt").exists()


def test_an_unknown_tool_in_an_approval_rule_is_refused(workspace: Path) -> None:
    code, _, err, _ = run_cli(["run", "x", "--allow", "write_fiel", "--workspace", str(workspace)],
                              ["never"])  # fmt: skip
    assert code == 2 and "--allow: unknown tool(s) write_fiel" in err


def test_an_approval_answered_yes_on_the_terminal(workspace: Path) -> None:
    code, out, _, _ = run_cli(
        ["run", "write it", "--workspace", str(workspace)],
        [reply(tool_call("write_file", {"path": "new.txt", "content": "x"})), "Done."],
        stdin=Terminal("y\n"),
    )
    assert (workspace / "new.txt").read_text() == "x"
    assert 'Allow write_file {"path": "new.txt", "content": "x"}? [y/N]' in out


def test_yes_approves_without_asking(workspace: Path) -> None:
    code, out, _, _ = run_cli(
        ["run", "write it", "--yes", "--workspace", str(workspace)],
        [reply(tool_call("write_file", {"path": "new.txt", "content": "x"})), "Done."],
    )
    assert (workspace / "new.txt").read_text() == "x"
    assert "Allow" not in out


@pytest.mark.parametrize("path", ["../secret.txt", "ABSOLUTE", "link/secret.txt"])
def test_paths_outside_the_workspace_are_refused(workspace: Path, path: str) -> None:
    (workspace / "link").symlink_to(workspace.parent)
    if path == "ABSOLUTE":
        path = str(workspace.parent / "secret.txt")
    _, out, _, model = run_cli(
        ["run", "read it", "--workspace", str(workspace)],
        [reply(tool_call("read_file", {"path": path})), "Refused."],
    )
    result = last_tool_result(model)
    assert result.is_error and "outside the workspace" in result.content[0].text
    assert "top secret" not in out


def test_tools_can_be_limited(workspace: Path) -> None:
    _, _, _, model = run_cli(
        ["run", "x", "--tools", "read_file,list_folder", "--workspace", str(workspace)],
        [reply(tool_call("write_file", {"path": "a", "content": "b"})), "ok"],
    )
    assert last_tool_result(model).content[0].text == "Tool write_file not found"
    code, _, err, _ = run_cli(["run", "x", "--tools", "nope", "--workspace", str(workspace)], [])
    assert code == 2 and "unknown tool(s) nope" in err


def test_a_call_that_keeps_failing_the_same_way_stops_the_run(workspace: Path) -> None:
    missing = reply(tool_call("read_file", {"path": "string required"}))
    code, out, err, model = run_cli(
        ["run", "read it", "--workspace", str(workspace)],
        [missing, missing, missing, missing, "never reached"],
    )
    assert len(model.requests) == 3  # the third identical failure ends the run
    result = last_tool_result(model)
    assert result.is_error and "string required does not exist" in result.content[0].text
    assert out.rstrip().endswith("failed the same way each time.")  # said in the transcript
    assert "read_file 3 times in a row with the same arguments" in err
    assert code == 1


def test_max_turns_stops_the_loop(workspace: Path) -> None:
    code, _, err, model = run_cli(
        ["run", "loop", "--max-turns", "1", "--workspace", str(workspace)],
        [reply(tool_call("list_folder")), "never reached"],
    )
    assert len(model.requests) == 1
    assert "stopped after --max-turns 1" in err


def test_a_failed_run_exits_non_zero(workspace: Path) -> None:
    code, _, err, _ = run_cli(
        ["run", "x", "--workspace", str(workspace)], [reply("partial", error="server said no")]
    )
    assert code == 1 and "server said no" in err


def test_default_model_is_the_embedded_one_without_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentkit import Model, local

    for env in HOSTED_KEYS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("AGENTKIT_KEEP_SERVER", "0")  # the in-process server, replaced below
    fake = Model(id="qwen", api="openai-completions", provider="local", base_url="http://x/v1")
    monkeypatch.setattr(local, "get_local_server", lambda **kw: type("S", (), {"model": fake})())
    err = io.StringIO()
    chosen = choose_model(None, None, Console(io.StringIO(), io.StringIO(), err))
    assert chosen is fake
    assert "using the embedded local model" in err.getvalue()


def test_base_url_makes_an_openai_compatible_model() -> None:
    quiet = Console(io.StringIO(), io.StringIO(), io.StringIO())
    model = choose_model("ollama:llama3.2", "http://127.0.0.1:11434/v1/", quiet)
    assert model.api == "openai-completions" and model.id == "llama3.2"
    assert model.base_url == "http://127.0.0.1:11434/v1"


def run_chat(
    workspace: Path,
    drive: Any,
    stream_fn: Any,
    model: ScriptedModel,
    stdin: Any,
    out: Any,
    err: Any,
) -> int:
    """``agentkit chat`` with ``drive`` typing into its stdin from another thread."""
    driver = threading.Thread(target=drive)
    driver.start()
    try:
        return cli.main(
            ["chat", "--workspace", str(workspace)],
            stream_fn=stream_fn,
            model=model.model,
            stdin=stdin,
            stdout=out,
            stderr=err,
        )
    finally:
        driver.join(5)


@pytest.mark.parametrize("target", ["main thread", "another thread"])
@pytest.mark.usefixtures("ctrl_c")
def test_chat_ctrl_c_aborts_the_run_not_the_session(workspace: Path, target: str) -> None:
    # The OS may deliver the SIGINT to any thread; the chat's main thread must notice it anyway.
    read_fd, write_fd = os.pipe()
    stdin = os.fdopen(read_fd, "r")
    writer = os.fdopen(write_fd, "w")
    model = ScriptedModel([reply("working on it", hang=True), "second answer"])
    out, err = io.StringIO(), Watched("run aborted")
    main_thread = threading.main_thread().ident
    assert main_thread is not None
    hanging = threading.Event()
    original = model.stream_fn

    def watched(*args: Any) -> Any:
        stream = original(*args)
        if len(model.requests) == 1:
            hanging.set()
        return stream

    def drive() -> None:
        try:
            writer.write("first task\n")
            writer.flush()
            assert hanging.wait(60)
            hit = main_thread if target == "main thread" else threading.get_ident()
            signals.pthread_kill(hit, signals.SIGINT)
            assert err.seen.wait(60)  # the chat reported the abort and is back at its prompt
            writer.write("second task\n")
        finally:
            writer.close()  # end of input: the chat finishes the task, then leaves

    code = run_chat(workspace, drive, watched, model, stdin, out, err)
    assert code == 0
    assert "second answer" in out.getvalue()
    assert len(model.requests) == 2
    assert model.requests[1].messages[-1].content[0].text == "second task"


def test_chat_steers_a_running_task(workspace: Path) -> None:
    read_fd, write_fd = os.pipe()
    stdin = os.fdopen(read_fd, "r")
    writer = os.fdopen(write_fd, "w")
    started, release = threading.Event(), threading.Event()

    def slow_tool_turn(context: Any, options: Any) -> Any:
        return reply(tool_call("list_folder"))

    model = ScriptedModel([slow_tool_turn, "steered answer"])
    original = model.stream_fn

    def watched(*args: Any) -> Any:
        if len(model.requests) == 0:
            started.set()
            release.wait(60)  # hold the first request until the steering line is queued
        return original(*args)

    err = Watched("steering: use metric units")

    def drive() -> None:
        try:
            writer.write("first task\n")
            writer.flush()
            assert started.wait(60)
            writer.write("use metric units\n")
            writer.flush()
            assert err.seen.wait(60)
        finally:
            release.set()
            writer.close()

    out = io.StringIO()
    code = run_chat(workspace, drive, watched, model, stdin, out, err)
    assert code == 0
    second = model.requests[1].messages
    assert [m.role for m in second][-2:] == ["tool_result", "user"]
    assert second[-1].content[0].text == "use metric units"
    assert "steered answer" in out.getvalue()


# --- what users expect of a command ------------------------------------------------------------


def test_version_and_bare_command(capsys: pytest.CaptureFixture[str]) -> None:
    import agentkit

    assert agentkit.__version__ == "0.1.0"
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"agentkit {agentkit.__version__}"
    out = io.StringIO()
    assert cli.main([], stdout=out) == 0
    assert "usage: agentkit" in out.getvalue() and "run" in out.getvalue()


def no_model_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the model was started")

    monkeypatch.setattr(agent_setup, "choose_model", refuse)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "   "], "the task is empty"),
        (["run", "x", "--tools", "read_file,nope"], "unknown tool(s) nope"),
        (["run", "x", "--tools", ","], "--tools is empty"),
        (["run", "x", "--ctx-size", "100"], "--ctx-size must be at least 512"),
        (["run", "@/nonexistent/task.txt"], "cannot read the task from /nonexistent/task.txt"),
    ],
)
def test_bad_arguments_are_refused_before_the_model_starts(
    monkeypatch: pytest.MonkeyPatch, workspace: Path, args: list[str], message: str
) -> None:
    no_model_start(monkeypatch)
    err = io.StringIO()
    code = cli.main([*args, "--workspace", str(workspace)], stderr=err, stdin=io.StringIO(""))
    assert code == 2 and message in err.getvalue()


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_max_turns_is_checked_by_the_parser(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    no_model_start(monkeypatch)
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "x", "--max-turns", value])
    assert exited.value.code == 2 and "--max-turns" in capsys.readouterr().err


def test_the_task_comes_from_stdin_or_a_file(workspace: Path, tmp_path: Path) -> None:
    big = "Summarise this: " + "word " * 40_000  # more than argv's 128 KB per argument
    model = ScriptedModel(["from stdin", "from a file"])
    for spec, stdin in (("-", io.StringIO(big)), (f"@{tmp_path / 'task.txt'}", None)):
        (tmp_path / "task.txt").write_text(big, encoding="utf-8")
        code = cli.main(
            ["run", spec, "--workspace", str(workspace)],
            stream_fn=model,
            model=model.model,
            stdin=stdin or io.StringIO(""),
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
        assert code == 0
    assert [r.messages[-1].content[0].text for r in model.requests] == [big, big]


@pytest.mark.parametrize(
    ("env", "key", "chosen_as"),
    [
        ("OPENAI_API_KEY", "sk-test", "openai:gpt-4.1-mini"),
        ("GOOGLE_API_KEY", "g-test", "google:gemini-2.5-flash"),  # Gemini's second variable
    ],
)
def test_a_hosted_default_is_announced(
    monkeypatch: pytest.MonkeyPatch, env: str, key: str, chosen_as: str
) -> None:
    for name in HOSTED_KEYS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(env, key)
    err = io.StringIO()
    chosen = choose_model(None, None, Console(io.StringIO(), io.StringIO(), err))
    assert f"{chosen.provider}:{chosen.id}" == chosen_as
    assert f"{env} is set; using {chosen_as}" in err.getvalue()
    assert key not in err.getvalue()


def test_model_names_read_as_the_library_reads_them() -> None:
    quiet = Console(io.StringIO(), io.StringIO(), io.StringIO())
    assert choose_model("anthropic", None, quiet).id == "claude-sonnet-4-5"
    ollama = choose_model("ollama:llama3.2", None, quiet)
    assert (ollama.provider, ollama.id) == ("ollama", "llama3.2")
    assert ollama.base_url == "http://127.0.0.1:11434/v1"
    with pytest.raises(CliError, match="provider:id"):
        choose_model("gpt-4.1-mini", None, quiet)


def test_ctx_size_is_for_the_local_model_only(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    err = io.StringIO()
    code = cli.main(
        ["run", "x", "--model", "openai:gpt-4.1-mini", "--ctx-size", "8192"],
        stderr=err,
    )
    assert code == 2 and "--ctx-size applies to the local model only" in err.getvalue()


def test_errors_carry_no_library_internals() -> None:
    raw = (
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: /v1/chat "
        "(Caused by NewConnectionError('<agentkit.providers.http._Pool object at 0x7f>: "
        "Failed to establish a new connection: [Errno 111] Connection refused'))"
    )
    assert readable_error(raw) == "cannot reach 127.0.0.1:9 (the connection was refused)"
    key = "No API key for provider 'openai': set OPENAI_API_KEY or pass api_key in the options"
    assert readable_error(key) == "No API key for provider 'openai': set OPENAI_API_KEY"
    overflow = readable_error("the request exceeds the available context size")
    assert "--ctx-size" in overflow and "shorter task" in overflow


def test_a_context_overflow_says_what_to_do(workspace: Path) -> None:
    code, _, err, _ = run_cli(
        ["run", "x", "--workspace", str(workspace)],
        [reply("", error="request (5000 tokens) exceeds the available context size (4096)")],
    )
    assert code == 1 and "pass a larger --ctx-size" in err


def test_escape_sequences_are_shown_escaped(workspace: Path) -> None:
    (workspace / "evil.txt").write_text("\x1b]52;c;aGk=\x07clipboard\n")
    code, out, _, _ = run_cli(
        ["run", "x", "--workspace", str(workspace)],
        [reply(tool_call("read_file", {"path": "evil.txt"})), "hidden: \x1b[8msecret\x9b2J"],
    )
    assert code == 0
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "\\x1b]52;c;aGk=\\x07clipboard" in out
    assert "hidden: \\x1b[8msecret\\x9b2J" in out


def test_json_lines_always_encode(workspace: Path) -> None:
    code, out, _, _ = run_cli(
        ["run", "x", "--json", "--workspace", str(workspace)], ["caf\udce9 \x9b \u2028"]
    )
    assert code == 0
    out.encode("utf-8")
    deltas = [json.loads(line) for line in out.splitlines()]
    text = "".join(d.get("delta", "") for d in deltas if d["type"] == "message_update")
    # The lone surrogate became U+FFFD where it entered the transcript (the model's stream).
    assert text == "caf\ufffd \x9b \u2028"


def test_chat_json_is_pure_jsonl(workspace: Path) -> None:
    model = ScriptedModel(["first answer"])
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        ["chat", "--json", "--workspace", str(workspace)],
        stream_fn=model,
        model=model.model,
        stdin=io.StringIO("hello\n"),
        stdout=out,
        stderr=err,
    )
    assert code == 0
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events and events[-1]["type"] == "agent_end"
    assert "agentkit chat" in err.getvalue()


class Counting(io.StringIO):
    """An output stream that counts how often ``marker`` has been written."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.changed = threading.Condition()

    def write(self, text: str) -> int:
        written = super().write(text)
        with self.changed:
            self.changed.notify_all()
        return written

    def wait_for(self, count: int, timeout: float = 60) -> bool:
        with self.changed:
            return self.changed.wait_for(
                lambda: self.getvalue().count(self.marker) >= count, timeout
            )


def test_chat_approval_answers_belong_to_their_question(workspace: Path) -> None:
    """'y' typed twice answers the first question only: the second question, shown later,
    is not approved by the line typed before it appeared."""
    read_fd, write_fd = os.pipe()
    stdin = os.fdopen(read_fd, "r")
    writer = os.fdopen(write_fd, "w")
    out = Counting("Allow write_file")
    err = Counting("steering: y")
    model = ScriptedModel(
        [
            reply(tool_call("write_file", {"path": "a.txt", "content": "a"})),
            reply(tool_call("write_file", {"path": "b.txt", "content": "b"})),
            "done",
        ]
    )
    original = model.stream_fn

    def watched(*args: Any) -> Any:
        if len(model.requests) == 1:  # the second request: let the stray "y" arrive first
            err.wait_for(1)
        return original(*args)

    def drive() -> None:
        try:
            writer.write("write two files\n")
            writer.flush()
            assert out.wait_for(1)
            writer.write("y\ny\n")
            writer.flush()
            assert out.wait_for(2)
            writer.write("n\n")
        finally:
            writer.close()

    code = run_chat(workspace, drive, watched, model, stdin, out, err)
    assert code == 0
    assert (workspace / "a.txt").read_text() == "a"
    assert not (workspace / "b.txt").exists()


def test_the_small_model_gets_repaired_arguments_and_a_note(workspace: Path) -> None:
    code, out, _, model = run_cli(
        ["run", "read", "--workspace", str(workspace)],
        [
            reply(tool_call("read_file", {"path": "notes.txt", "type": "string", "limit": "5"})),
            "It says remember the milk.",
        ],
    )
    assert code == 0
    result = last_tool_result(model)
    assert not result.is_error
    text = result.content[0].text
    assert "dropped unknown key 'type'" in text and "converted limit" in text
    assert "remember the milk" in result.content[1].text


PEG_ERROR = (
    'Failed to parse input at pos 42: {"name": "read_file", "arguments": {"path": '
    "does not match the expected peg-native format"
)


def test_an_unparsable_reply_is_sampled_again_without_parser_jargon(workspace: Path) -> None:
    code, out, err, model = run_cli(
        ["run", "read notes", "--workspace", str(workspace)],
        [reply("", error=PEG_ERROR), "It says remember the milk."],
    )
    assert code == 0, err
    assert "the model's reply could not be read; asking again" in err
    assert "peg" not in err and "pos 42" not in err
    assert out.splitlines()[-1] == "It says remember the milk."
    assert len(model.requests) == 2
    retried = model.requests[1].messages
    assert all(m.role != "assistant" for m in retried)  # the bad reply is dropped
    assert retried[-1].content[0].text == CALL_FORMAT_NOTE  # and the model is told why


def test_parse_retries_are_bounded(workspace: Path) -> None:
    code, _, err, model = run_cli(
        ["run", "read notes", "--workspace", str(workspace)],
        [reply("", error=PEG_ERROR)] * 3 + ["never"],
    )
    assert code == 1 and len(model.requests) == 1 + PARSE_RETRIES
    assert "could not be read" in err and "peg" not in err


SMALL = SCRIPTED_MODEL.model_copy(update={"context_window": 4096})
"""A model with a small context, which gets the small-model measures."""

TOOL_LIST_ECHO = (
    "The file is found with:\n```xml\n<tools>\n"
    '{"type": "function", "function": {"name": "search_text", "parameters": {}}}\n```'
)


def test_an_answer_that_echoes_the_tool_list_is_asked_for_again(workspace: Path) -> None:
    code, out, err, model = run_cli(
        ["run", "where is milk?", "--workspace", str(workspace)],
        [TOOL_LIST_ECHO, "notes.txt mentions milk."],
    )
    assert code == 0, err
    assert "asking again" in err
    assert out.splitlines()[-1] == "notes.txt mentions milk."
    retried = model.requests[1].messages
    assert all(m.role != "assistant" for m in retried)  # the echo is dropped
    assert retried[-1].content[0].text == CALL_FORMAT_NOTE


@pytest.mark.parametrize(
    "text",
    [
        "notes.txt says: remember the milk.",
        'The config has "type": "module" and a function main.',
        "Use the tools list_folder and read_file.",
    ],
)
def test_answers_that_do_not_quote_a_declaration_are_kept(workspace: Path, text: str) -> None:
    code, out, _, model = run_cli(["run", "hi", "--workspace", str(workspace)], [text])
    assert code == 0 and len(model.requests) == 1
    assert out.splitlines()[-1] == text


def test_a_small_model_reads_a_file_before_replacing_it(workspace: Path) -> None:
    """The small model's whole-file write over a file it never read is refused; it reads the
    file and edits it instead, and the rest of the file survives."""
    code, _, err, model = run_cli(
        ["run", "add eggs to notes.txt", "--workspace", str(workspace), "--yes"],
        [
            reply(tool_call("write_file", {"path": "notes.txt", "content": "eggs"})),
            reply(tool_call("read_file", {"path": "notes.txt"})),
            reply(
                tool_call(
                    "edit_file",
                    {"path": "notes.txt", "old_text": "milk", "new_text": "milk and eggs"},
                )
            ),
            "Added eggs.",
        ],
        on=SMALL,
    )
    assert code == 0, err
    assert (workspace / "notes.txt").read_text() == "remember the milk and eggs\n"
    refused = [m for m in model.requests[1].messages if m.role == "tool_result"][-1]
    assert refused.is_error and "already exists and was not read" in refused.content[0].text


class TtyStream(io.StringIO):
    """An output stream that says it is a terminal and signals each write."""

    def __init__(self) -> None:
        super().__init__()
        self.wrote = threading.Event()

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        written = super().write(text)
        self.wrote.set()
        return written


def test_a_spinner_shows_work_before_the_first_token(workspace: Path) -> None:
    err = TtyStream()
    gate = threading.Event()
    model = ScriptedModel(["The answer."])
    original = model.stream_fn

    def slow_start(*args: Any) -> Any:
        assert gate.wait(10)  # the model "reads its prompt" until the spinner has shown
        return original(*args)

    def release() -> None:
        while "working..." not in err.getvalue():
            err.wrote.clear()
            if not err.wrote.wait(10):
                break
        gate.set()

    releaser = threading.Thread(target=release)
    releaser.start()
    out = io.StringIO()
    code = cli.main(
        ["run", "x", "--workspace", str(workspace)],
        stream_fn=slow_start,
        model=model.model,
        stdout=out,
        stderr=err,
    )
    releaser.join()
    assert code == 0
    assert "working... 0 s" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")  # the spinner line is cleared before the answer
    assert out.getvalue() == "The answer.\n"


def test_json_reports_progress_and_the_time_to_first_token(workspace: Path) -> None:
    code, out, _, _ = run_cli(["run", "x", "--json", "--workspace", str(workspace)], ["Hi"])
    assert code == 0
    events = [json.loads(line) for line in out.splitlines()]
    progress = [e for e in events if e["type"] == "progress"]
    assert progress[0]["phase"] == "waiting" and progress[-1]["phase"] == "first_event"
    assert isinstance(progress[-1]["waited_s"], float)
    kinds = [e["type"] for e in events]
    assert kinds.index("progress") < kinds.index("message_update")


def test_json_says_the_local_model_is_starting(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    from agentkit import local

    for env in HOSTED_KEYS:
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("AGENTKIT_KEEP_SERVER", "0")  # the in-process server, replaced below
    weights = workspace.parent / "m.gguf"
    weights.write_bytes(b"GGUF")
    server = local.LocalModel(object(), "http://127.0.0.1:9", weights, 4096, slot_dir=None)
    monkeypatch.setattr(local, "get_local_server", lambda **kw: server)
    model = ScriptedModel(["Hi"], model=server.model)
    out = io.StringIO()
    code = cli.main(
        ["run", "x", "--json", "--workspace", str(workspace)],
        stream_fn=model,
        stdout=out,
        stderr=io.StringIO(),
    )
    server.stop()
    assert code == 0
    first = json.loads(out.getvalue().splitlines()[0])
    assert first == {"type": "progress", "phase": "model_start"}


@pytest.mark.parametrize(
    ("sandboxed", "says"),
    [
        (False, "(not sandboxed: it runs with your permissions) [y/N]"),
        (True, "(sandboxed: read-only system, no network) [y/N]"),
    ],
)
def test_the_command_question_says_whether_it_is_sandboxed(
    monkeypatch: pytest.MonkeyPatch, workspace: Path, sandboxed: bool, says: str
) -> None:
    from agentkit.workspace import sandbox

    monkeypatch.setattr(sandbox, "_sandbox_probe", [sandboxed])
    code, out, _, _ = run_cli(
        ["run", "list", "--workspace", str(workspace)],
        [reply(tool_call("run_command", {"command": "ls"})), "Not run."],
        stdin=Terminal("n\n"),
    )
    assert code == 0
    assert f'Allow run_command {{"command": "ls"}}? {says}' in out


def test_a_call_written_as_text_runs_and_is_not_shown_as_text(workspace: Path) -> None:
    fenced = '```json\n{"name": "read_file", "arguments": {"path": "notes.txt"}}\n```'
    model = ScriptedModel([fenced, "It says milk."])
    small = model.model.model_copy(update={"context_window": 4096})  # as the embedded one
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cli.main(
        ["run", "read notes", "--workspace", str(workspace)],
        stream_fn=model,
        model=small,
        stdin=io.StringIO(""),
        stdout=stdout,
        stderr=stderr,
    )
    out, err = stdout.getvalue(), stderr.getvalue()
    assert code == 0, err
    assert "```" not in out and '"arguments"' not in out  # held back, then it became a call
    assert '-> read_file {"path": "notes.txt"}' in out
    assert "remember the milk" in last_tool_result(model).content[0].text
    assert out.splitlines()[-1] == "It says milk."


def test_text_that_only_looks_like_a_call_is_shown_when_the_reply_ends(workspace: Path) -> None:
    answer = '{"host": "localhost"} is the whole file.'
    model = ScriptedModel([answer])
    stdout = io.StringIO()
    code = cli.main(
        ["run", "show it", "--workspace", str(workspace)],
        stream_fn=model,
        model=model.model.model_copy(update={"context_window": 4096}),
        stdin=io.StringIO(""),
        stdout=stdout,
        stderr=io.StringIO(),
    )
    assert code == 0 and stdout.getvalue().splitlines()[-1] == answer


def test_the_help_says_what_a_newcomer_needs(capsys: pytest.CaptureFixture[str]) -> None:
    from agentkit.local import EMBEDDED_MODELS

    def help_of(*args: str) -> str:
        with pytest.raises(SystemExit):
            cli.main([*args, "--help"])
        return " ".join(capsys.readouterr().out.split())

    chat = help_of("chat")
    assert all(word in chat for word in ("/exit", "/compact", "!line", "Ctrl-C"))
    assert "web page on 127.0.0.1" in help_of("ui")
    run = help_of("run")
    assert all(f"local:{name}" in run for name in EMBEDDED_MODELS)
    assert "--model NAME|PATH.gguf" in help_of("server", "start")


def test_a_call_that_names_no_tool_is_marked_and_shown_as_text(workspace: Path) -> None:
    said = '{"name": "fly", "arguments": {"to": "the moon"}}'
    model = ScriptedModel([said])
    stdout = io.StringIO()
    code = cli.main(
        ["run", "fly", "--workspace", str(workspace)],
        stream_fn=model,
        model=model.model.model_copy(update={"context_window": 4096}),
        stdin=io.StringIO(""),
        stdout=stdout,
        stderr=io.StringIO(),
    )
    lines = stdout.getvalue().splitlines()
    assert code == 0
    assert lines == ['-> fly {"to": "the moon"  (not a tool call)', said]


def test_a_streamed_call_is_clipped_and_escaped(workspace: Path) -> None:
    content = "x" * 500
    _, out, _, _ = run_cli(
        ["run", "go", "--yes", "--workspace", str(workspace)],
        [reply(tool_call("write_file\x1b[2J", {"path": "a.txt", "content": content})), "ok"],
    )
    call = out.splitlines()[0]
    assert call.startswith('-> write_file\\x1b[2J {"path": "a.txt", "content": "xxx')
    assert call.endswith("...") and len(call) <= len("-> write_file\\x1b[2J ") + 200
    assert "\x1b" not in out


def test_a_spinner_shows_while_the_weights_are_joined(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentkit.cli import model_choice
    from agentkit.local import LocalModelError

    for name in HOSTED_KEYS:
        monkeypatch.delenv(name, raising=False)
    err = TtyStream()

    def joining(name: str, join: bool = True) -> str:  # the first run's join, held open
        deadline = time.monotonic() + 10
        while "preparing the model's weights... " not in err.getvalue():
            err.wrote.clear()
            assert err.wrote.wait(1) or time.monotonic() < deadline, err.getvalue()
        raise LocalModelError("the weights are not installed")

    monkeypatch.setattr(model_choice, "local_model_file", joining)
    code = cli.main(["run", "x", "--workspace", str(workspace)], stdout=io.StringIO(), stderr=err)
    assert code == 2
    shown = err.getvalue()
    assert shown.index("preparing the model's weights") < shown.index("\r\x1b[K")  # cleared
    assert shown.endswith("agentkit: the weights are not installed\n")


def test_a_long_call_written_as_text_is_shown_clipped_and_runs_whole(workspace: Path) -> None:
    """A 200 kB write_file call written as text, in 5,000 deltas: shown clipped, run whole."""
    content = "word " * 40_000
    said = json.dumps({"name": "write_file", "arguments": {"path": "big.txt", "content": content}})
    model = ScriptedModel([said, "Written."], chunk_size=40)
    stdout = io.StringIO()
    code = cli.main(
        ["run", "write it", "--yes", "--workspace", str(workspace)],
        stream_fn=model,
        model=model.model.model_copy(update={"context_window": 4096}),
        stdin=io.StringIO(""),
        stdout=stdout,
        stderr=io.StringIO(),
    )
    lines = stdout.getvalue().splitlines()
    assert code == 0
    assert lines[0].startswith('-> write_file {"path": "big.txt", "content": "word word')
    assert lines[0].endswith("...") and len(lines[0]) < 230
    assert (workspace / "big.txt").read_text() == content


def test_an_unknown_local_model_names_the_embedded_ones(workspace: Path) -> None:
    err = io.StringIO()
    code = cli.main(
        ["run", "x", "--model", "local:qwen-9000", "--workspace", str(workspace)],
        stdout=io.StringIO(), stderr=err,
    )  # fmt: skip
    assert code == 2
    assert err.getvalue() == (
        "agentkit: 'qwen-9000' is neither an embedded model (qwen2.5-coder-0.5b, "
        "qwen2.5-coder-1.5b) nor a GGUF file\n"
    )


def test_ctrl_c_while_the_spinners_thread_starts_leaves_nothing_to_join(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import threading

    from agentkit.cli.console import Spinner

    console = Console(io.StringIO(), io.StringIO(), io.StringIO())
    monkeypatch.setattr(Console, "shows_status", property(lambda self: True))

    def interrupted(self: threading.Thread) -> None:
        raise KeyboardInterrupt  # Ctrl-C before the thread said it began

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    spinner = Spinner(console, "starting the local model")
    with pytest.raises(KeyboardInterrupt), spinner:
        pass
    monkeypatch.undo()
    spinner.stop()  # nothing half-started is left to join: it raised "cannot join" before
