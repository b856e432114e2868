"""The event classes behave as frozen dataclasses: fields, equality, hashing, repr, copies."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from pathlib import Path

import pytest

import agentkit.events as events_module
from agentkit.events import (
    AgentEndEvent,
    AgentStartEvent,
    MessageUpdateEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolExecutionEndEvent,
    TurnEndEvent,
    event_to_dict,
)
from agentkit.tools import AgentToolResult
from agentkit.types import AssistantMessage

EVENT_CLASSES = [
    value
    for value in vars(events_module).values()
    if isinstance(value, type)
    and not value.__name__.startswith("_")
    and value.__name__.endswith("Event")
    and value.__module__ == events_module.__name__
]


def test_every_event_class_is_a_slotted_dataclass_with_a_literal_type() -> None:
    assert len(EVENT_CLASSES) == 25  # 22, the two compaction events and the spend event
    for cls in EVENT_CLASSES:
        assert dataclasses.is_dataclass(cls), cls
        names = [f.name for f in dataclasses.fields(cls)]
        assert names[-1] == "type" and cls.__match_args__ == tuple(names), cls
        assert cls.__slots__ == tuple(names), cls


def test_events_are_frozen() -> None:
    event = TextDeltaEvent(0, "hi", AssistantMessage())
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.delta = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del event.delta
    assert event.delta == "hi"


def test_equality_hash_and_repr_are_by_fields() -> None:
    partial = AssistantMessage()
    event = TextDeltaEvent(0, "hi", partial)
    assert event == TextDeltaEvent(0, "hi", partial)
    assert event != TextDeltaEvent(1, "hi", partial)
    assert event != ThinkingDeltaEvent(0, "hi", partial)  # same values, another class
    assert event.type == "text_delta"
    assert (
        repr(event)
        == f"TextDeltaEvent(content_index=0, delta='hi', partial={partial!r}, type='text_delta')"
    )
    assert hash(AgentStartEvent()) == hash(AgentStartEvent())
    with pytest.raises(TypeError):
        hash(AgentEndEvent())  # a list field is not hashable, as in a frozen dataclass
    assert (
        AgentEndEvent().messages == [] and AgentEndEvent().messages is not AgentEndEvent().messages
    )
    assert TurnEndEvent("m").tool_results == []


def test_copies_pickles_replace_and_match() -> None:
    end = ToolExecutionEndEvent("c1", "look", AgentToolResult(content="ok"), False, 1.5)
    assert copy.copy(end) == end and copy.deepcopy(end) == end
    assert pickle.loads(pickle.dumps(end)) == end
    assert dataclasses.replace(end, is_error=True).is_error is True
    assert dataclasses.asdict(end)["duration_ms"] == 1.5
    match end:
        case ToolExecutionEndEvent(call_id, name, _, is_error, duration):
            assert (call_id, name, is_error, duration) == ("c1", "look", False, 1.5)
        case _:
            pytest.fail("positional match failed")


def test_event_to_dict_puts_the_type_first() -> None:
    partial = AssistantMessage()
    data = event_to_dict(MessageUpdateEvent(partial, TextDeltaEvent(0, "x", partial)))
    assert list(data)[0] == "type" and data["type"] == "message_update"
    assert data["assistant_message_event"]["delta"] == "x"


@pytest.mark.processes
@pytest.mark.slow  # a whole mypy run
def test_a_type_checker_reads_the_events_as_frozen(tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "assign.py"
    snippet.write_text(
        "from agentkit.events import TextDeltaEvent\n"
        "def edit(event: TextDeltaEvent) -> None:\n"
        "    event.delta = 'changed'\n"
    )
    out, _, status = mypy_api.run(
        [str(snippet), "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache")]
    )
    assert status == 1 and 'Property "delta" defined in "TextDeltaEvent" is read-only' in out, out
