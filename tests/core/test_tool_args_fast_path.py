"""Valid calls to plain tools skip jsonschema; every verdict and message stays jsonschema's."""

from __future__ import annotations

import itertools
import subprocess
import sys
from typing import Any

import pytest
from jsonschema import validators

from agentkit import AgentTool, AgentToolResult, ToolArgumentsError
from agentkit.tools import _surely_valid, validate_tool_arguments
from agentkit.types import ToolCall

SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    {"type": "object", "properties": {"n": {"type": "number"}}, "additionalProperties": False},
    {"type": "object", "properties": {"s": {"type": ["string", "null"]}}},
    {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "boolean"}}}},
    {"type": "object", "properties": {"o": {"type": "object", "required": ["a"]}}},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}},
    {"type": "object", "properties": {"n": {"type": ["integer", "nosuchtype"]}}},
    {"type": "object", "properties": {"xs": {"type": "array", "items": [{"type": "string"}]}}},
    {
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/N"}},
        "$defs": {"N": {"type": "string"}},
    },
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"},
    {"type": "object", "properties": {"n": {"type": [{"bad": 1}]}}},
    {"type": "object", "properties": {"n": True}},
    {"type": "object", "required": "n"},
    {"type": "object", "additionalProperties": {"type": "string"}},
]
VALUES: list[Any] = [
    {},
    {"n": 4},
    {"n": 2},
    {"n": 1.5},
    {"n": 2.0},
    {"n": True},
    {"n": None},
    {"n": "x"},
    {"s": None},
    {"s": "t"},
    {"xs": [True, False]},
    {"xs": [True, 1]},
    {"xs": ["a"]},
    {"o": {"a": 1}},
    {"o": {}},
    {"extra": 1},
]


@pytest.mark.parametrize(("schema", "value"), list(itertools.product(SCHEMAS, VALUES)))
def test_surely_valid_never_disagrees_with_jsonschema(schema: Any, value: Any) -> None:
    try:
        expected = validators.validator_for(schema)(schema).is_valid(value)
    except Exception:  # jsonschema cannot decide (an unknown type): the fast path must not
        expected = False
    if _surely_valid(value, schema):
        assert expected, (schema, value)


def test_plain_schemas_take_the_fast_path() -> None:
    schema = SCHEMAS[0]
    assert _surely_valid({"n": 4}, schema)
    assert not _surely_valid({"n": "4x"}, schema)  # invalid: jsonschema words the error
    assert not _surely_valid({"n": 4}, SCHEMAS[5])  # a keyword it does not know


def test_errors_are_still_jsonschema_messages() -> None:
    tool = AgentTool("t", "T.", SCHEMAS[1], lambda *a: AgentToolResult(content=[]))
    call = ToolCall(id="c", name="t", arguments={"n": "many", "x": 1})
    with pytest.raises(ToolArgumentsError) as info:
        validate_tool_arguments(tool, call)
    assert "  - root: must NOT have additional properties" in str(info.value)
    assert "  - n: must be number" in str(info.value)
    ok = ToolCall(id="c", name="t", arguments={"n": "5"})
    assert validate_tool_arguments(tool, ok) == {"n": 5}  # coerced, then validated


@pytest.mark.processes
def test_a_valid_plain_call_does_not_import_jsonschema() -> None:
    code = (
        "import sys\n"
        "from agentkit import tool, validate_tool_arguments\n"
        "from agentkit.types import ToolCall\n"
        "@tool\n"
        "def add(a: int, b: int = 0) -> int:\n"
        "    '''Add.'''\n"
        "    return a + b\n"
        "args = validate_tool_arguments(add, ToolCall(id='c', name='add', arguments={'a': '2'}))\n"
        "assert args == {'a': 2}, args\n"
        "assert 'jsonschema' not in sys.modules\n"
        "try:\n"
        "    validate_tool_arguments(add, ToolCall(id='c', name='add', arguments={'a': 'x'}))\n"
        "except Exception as e:\n"
        "    assert 'must be integer' in str(e), e\n"
        "assert 'jsonschema' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
