"""``agentkit chat --session NAME`` resumes a conversation; ``agentkit sessions ...`` manages
sessions. The store is a SQLite file (the command's default kind)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from agentkit import cli
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel


def run(args: list[str], replies: list[Any] = (), stdin: str = "") -> tuple[int, str, str, Any]:
    model = ScriptedModel(list(replies))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(args, stream_fn=model, model=model.model, stdin=io.StringIO(stdin),
                    stdout=out, stderr=err)  # fmt: skip
    return code, out.getvalue(), err.getvalue(), model


def test_chat_resumes_a_session_and_sessions_manages_it(tmp_path: Path) -> None:
    store = str(tmp_path / "sessions.db")
    chat = ["chat", "--tools", "none", "--workspace", str(tmp_path), "--session", "trip",
            "--store", store]  # fmt: skip
    code, out, err, _ = run(chat, ["Hello Alice."], stdin="My name is Alice\n")
    assert code == 0, err
    assert "Hello Alice." in out
    code, out, err, model = run(chat, ["You are Alice."], stdin="Who am I?\n")
    assert code == 0, err
    sent = [m.role for m in model.requests[0].messages]
    assert sent == ["system", "user", "assistant", "user"]  # the first exchange came back

    code, out, _, _ = run(["sessions", "--store", store, "list"])
    assert code == 0 and out.startswith("trip\t5 messages\t")
    code, out, _, _ = run(["sessions", "--store", store, "show", "trip"])
    assert out.splitlines()[1:] == ["user: My name is Alice", "assistant: Hello Alice.",
                                    "user: Who am I?", "assistant: You are Alice."]  # fmt: skip

    exported = tmp_path / "trip.jsonl"
    assert run(["sessions", "--store", store, "export", "trip", "-o", str(exported)])[0] == 0
    code, out, _, _ = run(["sessions", "--store", store, "import", str(exported), "--name", "t2"])
    assert code == 0 and out == "imported 5 messages as t2\n"
    assert Session("t2", store).load() == Session("trip", store).load()

    assert run(["sessions", "--store", store, "rm", "trip"])[:2] == (0, "removed session trip\n")
    code, _, err, _ = run(["sessions", "--store", store, "show", "trip"])
    assert code == 1 and "no session named 'trip'" in err
    code, _, err, _ = run(["sessions", "--store", store, "rm", "trip"])
    assert code == 1 and "no session named 'trip'" in err


def test_a_damaged_import_is_refused_by_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "agentkit-session", "version": 1, "name": "x", "messages": 1}\n'
                   '{"role": "user", "content": \n')  # fmt: skip
    store = str(tmp_path / "sessions.db")
    code, out, err, _ = run(["sessions", "--store", store, "import", str(bad)])
    assert code == 1 and "line 2: invalid JSON" in err and "nothing was imported" in err
    assert run(["sessions", "--store", store, "list"])[1] == ""


def test_an_empty_store_says_so_on_stderr(tmp_path: Path) -> None:
    store = tmp_path / "sessions.db"
    code, out, err, _ = run(["sessions", "--store", str(store), "list"])
    assert (code, out) == (0, "")  # stdout lists sessions, one a line: none
    assert err == f"agentkit: no sessions in sqlite:///{store}\n"

