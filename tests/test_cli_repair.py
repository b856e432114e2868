"""Argument repair for small models (``agentkit.repair``), through the agent loop."""

from __future__ import annotations

from typing import Any

from agentkit import Agent, tool
from agentkit.repair import repair_arguments, with_argument_repair
from agentkit.testing import ScriptedModel, reply, tool_call

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "exact": {"type": "boolean"},
        "ratio": {"type": "number"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def test_unknown_keys_are_dropped_and_types_coerced() -> None:
    fixed, notes = repair_arguments(
        {"path": "a", "type": "string", "limit": "5", "exact": "true", "ratio": "0.5"}, SCHEMA
    )
    assert fixed == {"path": "a", "limit": 5, "exact": True, "ratio": 0.5}
    assert notes == [
        "dropped unknown key 'type'",
        'converted limit from "5" to integer',
        'converted exact from "true" to boolean',
        'converted ratio from "0.5" to number',
    ]


def test_a_lone_misnamed_key_fills_the_missing_required_one() -> None:
    fixed, notes = repair_arguments({"file_path": "a.txt"}, SCHEMA)
    assert fixed == {"path": "a.txt"} and notes == ["renamed 'file_path' to 'path'"]


def test_a_schema_shaped_value_is_unwrapped() -> None:
    fixed, notes = repair_arguments({"path": {"type": "string", "value": "a.txt"}}, SCHEMA)
    assert fixed == {"path": "a.txt"} and notes[0].startswith("unwrapped path")


def test_what_cannot_be_repaired_is_left_for_validation() -> None:
    args = {"path": "a", "limit": "five"}
    assert repair_arguments(args, SCHEMA) == (args, [])
    assert repair_arguments("not an object", SCHEMA) == ("not an object", [])
    good = {"path": "a", "limit": 3}
    assert repair_arguments(good, SCHEMA) == (good, [])


def test_the_model_is_told_what_was_changed() -> None:
    @tool
    def read_file(path: str, limit: int = 10) -> str:
        """Read a file."""
        return f"read {path} ({limit} lines)"

    model = ScriptedModel(
        [reply(tool_call("read_file", {"path": "a.txt", "type": "string", "limit": "3"})), "ok"]
    )
    agent = Agent(model=model.model, stream_fn=model, tools=[with_argument_repair(read_file)])
    agent.prompt("read it")
    result = [m for m in agent.state.messages if m.role == "tool_result"][-1]
    assert not result.is_error
    note, answer = (c.text for c in result.content)
    assert "dropped unknown key 'type'" in note and "read_file" in note
    assert answer == "read a.txt (3 lines)"
    # Without repair the same call fails validation.
    plain = ScriptedModel(
        [reply(tool_call("read_file", {"path": "a.txt", "type": "string"})), "ok"]
    )
    agent = Agent(model=plain.model, stream_fn=plain, tools=[read_file])
    agent.prompt("read it")
    failed = [m for m in agent.state.messages if m.role == "tool_result"][-1]
    assert failed.is_error and "Validation failed" in failed.content[0].text
