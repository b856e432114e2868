"""A cache note kept by a session (SQLite store): it loads back, ``cache_report`` reads the
stored transcript, and the web page's view of the transcript shows the note's line."""

from __future__ import annotations

from pathlib import Path

from agentkit import Agent, Usage
from agentkit.context import CacheNote, CacheWatch, cache_report
from agentkit.sessions import Session
from agentkit.testing import ScriptedModel, reply
from agentkit.types import role_of
from agentkit.ui.view import transcript


def test_a_note_survives_a_session_and_shows_on_the_page(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path}/sessions.db"
    model = ScriptedModel([
        reply("Hi.", usage=Usage(input=900, cache_write=1000, output=2)),
        reply("Hi.", usage=Usage(input=1900, output=2)),
    ])  # fmt: skip
    watch = CacheWatch()
    Agent(model=model.model, stream_fn=model, system_prompt="Time: 10:00.", policies=[watch],
          session=Session("alice", store)).prompt("hello")  # fmt: skip
    resumed = Agent(model=model.model, stream_fn=model, system_prompt="Time: 10:05.",
                    policies=[watch], session=Session("bob", store),
                    messages=Session("alice", store).load()[1:])  # fmt: skip
    resumed.prompt("again")

    stored = Session("bob", store).load()
    [note] = [m for m in stored if role_of(m) == "cache"]
    assert CacheNote.model_validate(note if isinstance(note, dict) else note.model_dump())
    report = cache_report(stored)
    assert [(n.part, n.position) for n in report.notes] == [("system_prompt", 10)]
    assert [t.cache_write for t in report.turns] == [1000, 0]
    entries, _ = transcript(stored)
    [entry] = [e for e in entries if e.role == "cache"]
    assert [b.text for b in entry.blocks] == [report.notes[0].summary]
    assert "a timestamp at char 10" in entry.blocks[0].text
