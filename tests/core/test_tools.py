"""@tool: schemas from signatures, descriptions from docstrings, results, injection;
and the reference's argument coercion and error text."""

from __future__ import annotations

import json
from enum import Enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from agentkit import (
    AbortController,
    AgentToolResult,
    ImageContent,
    ToolArgumentsError,
    ToolCall,
    tool,
    validate_tool_arguments,
)
from agentkit.tools import parse_docstring


def run(t: Any, params: dict[str, Any], updates: list[Any] | None = None) -> AgentToolResult:
    sink = updates if updates is not None else []
    return t.execute("call-1", params, AbortController().signal, sink.append)


def test_schema_and_descriptions_from_a_google_docstring() -> None:
    @tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c", days: int = 1) -> str:
        """Get the weather forecast.

        Looks it up in the forecast service.

        Args:
            city: The city name,
                for example Paris.
            unit: Temperature unit.
            days (int): How many days.

        Returns:
            The forecast.
        """
        return f"{city} {unit} {days}"

    assert get_weather.name == "get_weather"
    assert get_weather.description == "Get the weather forecast.\n\nLooks it up in the forecast service."
    props = get_weather.parameters["properties"]
    assert props["city"] == {"type": "string", "description": "The city name, for example Paris."}
    assert props["unit"]["enum"] == ["c", "f"] and props["unit"]["default"] == "c"
    assert props["days"]["description"] == "How many days."
    assert get_weather.parameters["required"] == ["city"]
    assert "title" not in get_weather.parameters
    assert run(get_weather, {"city": "Oslo"}).text == "Oslo c 1"


def test_numpy_and_rest_docstrings() -> None:
    numpy_doc = """Sum values.

    Parameters
    ----------
    a : int
        The first value.
    b : int
        The second
        value.

    Returns
    -------
    int
    """
    summary, params = parse_docstring(numpy_doc)
    assert summary == "Sum values."
    assert params == {"a": "The first value.", "b": "The second value."}

    rest_doc = """Sum values.

    :param a: The first value.
    :param int b: The second value.
    :returns: the sum
    """
    summary, params = parse_docstring(rest_doc)
    assert summary == "Sum values."
    assert params == {"a": "The first value.", "b": "The second value."}
    assert parse_docstring("") == ("", {})


def test_injected_parameters_are_hidden_from_the_model() -> None:
    @tool(name="progress", label="Progress", execution_mode="sequential")
    def report(steps: int, signal: Any, on_update: Any, tool_call_id: str) -> str:
        """Reports progress."""
        for i in range(steps):
            on_update(i)
        return f"{tool_call_id} {signal.aborted}"

    assert set(report.parameters["properties"]) == {"steps"}
    assert report.name == "progress" and report.label == "Progress"
    assert report.execution_mode == "sequential"
    updates: list[Any] = []
    assert run(report, {"steps": 3}, updates).text == "call-1 False"
    assert updates == [0, 1, 2]


class Point(BaseModel):
    x: int
    y: int


class Color(Enum):
    RED = "red"
    BLUE = "blue"


def test_nested_models_enums_and_json_results() -> None:
    @tool
    def describe(point: Point, color: Color, tags: list[str] | None = None) -> dict[str, Any]:
        """Describes a point."""
        return {"sum": point.x + point.y, "color": color.value, "tags": tags}

    schema = describe.parameters
    assert "$defs" in schema
    call = ToolCall(id="1", name="describe", arguments={"point": {"x": "1", "y": 2}, "color": "red"})
    args = validate_tool_arguments(describe, call)
    result = run(describe, args)
    assert json.loads(result.text) == {"sum": 3, "color": "red", "tags": None}
    assert result.details == {"sum": 3, "color": "red", "tags": None}


def test_return_values() -> None:
    image = ImageContent(data="aGk=", mime_type="image/png")

    @tool
    def picture() -> ImageContent:
        """A picture."""
        return image

    @tool
    def explicit() -> AgentToolResult:
        """An explicit result."""
        return AgentToolResult(content="text", details={"k": 1}, terminate=True)

    assert run(picture, {}).content == [image]
    result = run(explicit, {})
    assert result.text == "text" and result.details == {"k": 1} and result.terminate


def test_async_tools_run_on_the_tool_thread() -> None:
    @tool
    async def later(value: str) -> str:
        """An async tool."""
        return value.upper()

    assert run(later, {"value": "hi"}).text == "HI"


def test_star_args_are_refused() -> None:
    with pytest.raises(TypeError, match="args"):

        @tool
        def bad(*values: int) -> str:
            return ""


SCHEMA = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "name": {"type": "string"},
        "nothing": {"type": "null"},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "optional": {"type": "string"},
        "items": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["count"],
}


def validate(arguments: dict[str, Any]) -> Any:
    from agentkit import Tool

    return validate_tool_arguments(Tool(name="T", parameters=SCHEMA), ToolCall(id="1", name="T", arguments=arguments))


def test_coercions_follow_the_reference() -> None:
    assert validate({"count": "5"})["count"] == 5
    assert validate({"count": True})["count"] == 1
    assert validate({"count": None})["count"] == 0
    assert validate({"count": 1, "ratio": "2.5"})["ratio"] == 2.5
    assert validate({"count": 1, "flag": "true"})["flag"] is True
    assert validate({"count": 1, "flag": 0})["flag"] is False
    assert validate({"count": 1, "name": 5})["name"] == "5"
    assert validate({"count": 1, "name": False})["name"] == "false"
    assert validate({"count": 1, "nothing": ""})["nothing"] is None
    assert validate({"count": 1, "maybe": "7"})["maybe"] == "7"
    assert validate({"count": 1, "items": ["1", 2]})["items"] == [1, 2]


def test_optional_nulls_are_dropped_and_the_original_is_untouched() -> None:
    original = {"count": "3", "optional": None}
    coerced = validate(original)
    assert coerced == {"count": 3}
    assert original == {"count": "3", "optional": None}


def test_error_text_lists_every_problem_with_paths() -> None:
    with pytest.raises(ToolArgumentsError) as error:
        validate({"ratio": "lots", "items": [1, "x"]})
    text = str(error.value)
    lines = text.splitlines()
    assert lines[0] == 'Validation failed for tool "T":'
    assert "  - count: must have required property 'count'" in lines
    assert "  - items.1: must be integer" in lines
    assert "  - ratio: must be number" in lines
    assert text.endswith(
        "\n\nReceived arguments:\n" + json.dumps({"ratio": "lots", "items": [1, "x"]}, indent=2)
    )


def test_root_errors_are_named_root() -> None:
    from agentkit import Tool

    strict = Tool(name="S", parameters={"type": "object", "additionalProperties": False})
    with pytest.raises(ToolArgumentsError, match="  - root: must NOT have additional properties"):
        validate_tool_arguments(strict, ToolCall(id="1", name="S", arguments={"x": 1}))


def test_annotated_constraints_reach_the_schema_and_validation() -> None:
    @tool
    def pick(count: Annotated[int, Field(ge=1, le=5, description="How many.")]) -> str:
        """Picks."""
        return str(count)

    prop = pick.parameters["properties"]["count"]
    assert prop["minimum"] == 1 and prop["maximum"] == 5 and prop["description"] == "How many."
    with pytest.raises(ToolArgumentsError, match="  - count: must be <= 5"):
        validate_tool_arguments(pick, ToolCall(id="1", name="pick", arguments={"count": 9}))


def test_unresolvable_hints_are_a_clear_error() -> None:
    def local_types() -> None:
        class Local(BaseModel):
            x: int

        @tool
        def uses_local(value: Local) -> str:  # a string annotation naming a local class
            """Uses a local type."""
            return ""

    with pytest.raises(TypeError, match="could not resolve the type hints of uses_local"):
        local_types()
