"""Replaying system messages (SPEC 2.10) and declaring tool changes (SPEC 4.3)."""

from __future__ import annotations

from agentkit import SystemMessage, TextContent, Tool, UserMessage
from agentkit.transcript import (
    ToolDeclarations,
    declare_tool_changes,
    get_current_system_message,
    get_current_system_prompt,
    get_current_tools,
    split_transcript,
)
from agentkit.types import ToolRef
from tests.support import make_tool

A, B, C = (Tool(name=n, description=f"tool {n}") for n in "ABC")


def test_replay_removes_then_adds_and_keeps_positions() -> None:
    messages = [
        SystemMessage(content="base", tools_added=[A, B, C]),
        UserMessage(content="hi"),
        SystemMessage(tools_added=[Tool(name="B", description="new B")]),
        SystemMessage(tools_removed=[ToolRef(name="A")], tools_added=[A]),
    ]
    tools = get_current_tools(messages)
    assert [t.name for t in tools] == ["B", "C", "A"]  # A moved to the end, B kept its place
    assert tools[0].description == "new B"


def test_system_message_replay_joins_content_and_merges_sections() -> None:
    messages = [
        SystemMessage(content=[TextContent(text="line 1"), TextContent(text="line 2")], timestamp=7),
        SystemMessage(content="", sections={"skills": "SK", "memory": "M"}),
        SystemMessage(content="more", sections={"memory": None}),
    ]
    current = get_current_system_message(messages)
    assert current is not None
    assert current.content == "line 1\nline 2\n\nmore"
    assert current.sections == {"skills": "SK"}
    assert current.timestamp == 7
    assert get_current_system_prompt(messages) == "line 1\nline 2\n\nmore\n\nSK"
    assert get_current_system_message([UserMessage(content="x")]) is None
    assert get_current_system_prompt([]) == ""


def test_split_transcript_for_single_prompt_providers() -> None:
    messages = [
        SystemMessage(content="S", tools_added=[A]),
        UserMessage(content="q"),
        SystemMessage(content="later"),
    ]
    prompt, tools, rest = split_transcript(messages)
    assert prompt == "S\n\nlater"
    assert [t.name for t in tools] == ["A"]
    assert [m.role for m in rest] == ["user"]


def test_no_change_returns_pending_unchanged() -> None:
    tool_a = make_tool("A")
    context = [SystemMessage(tools_added=[tool_a.declaration()])]
    pending = [UserMessage(content="hi")]
    assert declare_tool_changes(context, [tool_a], pending) is pending


def test_changed_definition_is_both_removed_and_added() -> None:
    old = make_tool("A")
    new = make_tool("A", parameters={"type": "object", "properties": {"x": {"type": "string"}}})
    context = [SystemMessage(tools_added=[old.declaration()])]
    [declaration, user] = declare_tool_changes(context, [new], [UserMessage(content="hi")])
    assert user.role == "user"
    assert [t.name for t in declaration.tools_added] == ["A"]
    assert [t.name for t in declaration.tools_removed] == ["A"]
    assert declaration.tools_added[0].parameters == new.parameters


def test_declaration_goes_before_the_first_non_system_message_or_last() -> None:
    tool_a = make_tool("A")
    sys_msg = SystemMessage(content="extra")
    out = declare_tool_changes([], [tool_a], [UserMessage(content="u")])
    assert [m.role for m in out] == ["system", "user"]
    empty = declare_tool_changes([], [tool_a], [])
    assert len(empty) == 1 and empty[0].tools_added[0].name == "A"
    # A pending system message carries the changes instead of a new one.
    carried = declare_tool_changes([], [tool_a], [sys_msg, UserMessage(content="u")])
    assert [m.role for m in carried] == ["system", "user"]
    assert carried[0].content == "extra" and carried[0].tools_added[0].name == "A"
    assert sys_msg.tools_added is None  # the caller's message is not mutated


def test_callers_tools_added_is_overwritten_by_the_executable_set() -> None:
    tool_a = make_tool("A")
    context = [SystemMessage(tools_added=[tool_a.declaration()])]
    intent = SystemMessage(content="", tools_added=[Tool(name="Z")])
    [out] = declare_tool_changes(context, [tool_a], [intent])
    assert out is not intent
    assert out.tools_added is None and out.tools_removed is None


def test_tool_declarations_answer_as_the_full_replay_while_things_change() -> None:
    declare = ToolDeclarations()
    tool_a = make_tool("a", parameters={"type": "object", "properties": {}})
    tools = [tool_a]
    transcript: list[object] = [UserMessage(content="hi")]

    def both(pending: list[object]) -> list[object]:
        expected = declare_tool_changes(transcript, tools, list(pending))
        got = declare(transcript, tools, pending)
        assert [m.model_dump(exclude={"timestamp"}) for m in got] == [  # type: ignore[attr-defined]
            m.model_dump(exclude={"timestamp"}) for m in expected  # type: ignore[attr-defined]
        ]
        transcript.extend(got)
        return got

    assert [m.role for m in both([])] == ["system"]  # a declares itself once
    assert both([]) == [] and both([]) == []  # then nothing changes, twice (the fast path)
    tools.append(make_tool("b"))
    [added] = both([])
    assert [t.name for t in added.tools_added] == ["b"]  # type: ignore[attr-defined]
    assert both([]) == []
    tool_a.parameters["properties"]["x"] = {"type": "integer"}  # changed in place
    [changed] = both([])
    assert [t.name for t in changed.tools_added] == ["a"]  # type: ignore[attr-defined]
    assert [t.name for t in changed.tools_removed] == ["a"]  # type: ignore[attr-defined]
    assert both([]) == []
    transcript.append(SystemMessage(tools_removed=[ToolRef(name="b")]))  # a caller removes b
    [again] = both([])
    assert [t.name for t in again.tools_added] == ["b"]  # type: ignore[attr-defined]
    tools.pop()
    [removed] = both([UserMessage(content="more")])[:1]
    assert [t.name for t in removed.tools_removed] == ["b"]  # type: ignore[attr-defined]
    assert both([]) == []
