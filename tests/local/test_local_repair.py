"""Argument repair for small models (``agentkit.local.repair``), through the agent loop."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from agentkit import Agent, tool
from agentkit.local.repair import (
    REPEATED_FAILURE,
    PlaceholderArgumentsError,
    find_placeholders,
    parse_text_tool_call,
    repair_arguments,
    stop_repeated_failures,
    with_argument_repair,
    with_text_tool_calls,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import ToolCall

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


@pytest.mark.parametrize(
    ("arguments", "found"),
    [
        ({"path": "string"}, ["path"]),
        ({"path": "<string>"}, ["path"]),
        ({"path": " String "}, ["path"]),
        ({"path": "path"}, ["path"]),
        ({"path": "{path}"}, ["path"]),
        ({"path": "integer", "limit": 3}, ["path"]),
        ({"path": "notes.txt"}, []),
        ({"path": "strings.txt"}, []),
        ({"path": "a", "type": "string"}, []),  # an undeclared key: repair drops it
        ({"path": "a", "limit": 5}, []),
        ("path", []),
    ],
)
def test_placeholders_copied_from_the_schema_are_found(arguments: Any, found: list[str]) -> None:
    assert find_placeholders(arguments, SCHEMA) == found


def _notes_tool(ran: list[str]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return f"contents of {path}"

    return with_argument_repair(read_file)


def test_a_placeholder_call_is_refused_and_the_model_retries_with_the_real_value() -> None:
    ran: list[str] = []
    model = ScriptedModel(
        [
            reply(tool_call("read_file", {"path": "string"})),
            reply(tool_call("read_file", {"path": "notes.txt"})),
            "It holds the contents.",
        ]
    )
    agent = Agent(model=model.model, stream_fn=model, tools=[_notes_tool(ran)])
    agent.prompt("read notes.txt")
    refused, done = [m for m in agent.state.messages if m.role == "tool_result"]
    assert refused.is_error and not done.is_error
    text = refused.content[0].text
    assert 'path "string" is a placeholder' in text
    assert "Call read_file again with the real path" in text
    assert ran == ["notes.txt"]  # the placeholder never reached the tool
    # What the model read on its second request is that refusal.
    assert model.requests[1].messages[-1].content[0].text == text


def test_the_same_placeholder_sent_again_runs() -> None:
    ran: list[str] = []
    call = reply(tool_call("read_file", {"path": "string"}))
    model = ScriptedModel([call, call, "done"])
    agent = Agent(model=model.model, stream_fn=model, tools=[_notes_tool(ran)])
    agent.prompt("read the file called string")
    first, second = [m for m in agent.state.messages if m.role == "tool_result"]
    assert first.is_error and not second.is_error
    assert ran == ["string"]


def test_the_refusal_is_a_value_error_with_the_text_the_model_reads() -> None:
    tool_ = _notes_tool([])
    assert tool_.prepare_arguments is not None
    with pytest.raises(PlaceholderArgumentsError, match=r'path "path" is a placeholder'):
        tool_.prepare_arguments({"path": "path"})
    assert issubclass(PlaceholderArgumentsError, ValueError)


# --- tool calls written as text ---------------------------------------------------------------

TOOLS = ("read_file", "write_file")
CALL = '{"name": "read_file", "arguments": {"path": "notes.txt"}}'


@pytest.mark.parametrize(
    "text",
    [
        CALL,
        f"\n  {CALL}  \n",
        f"```json\n{CALL}\n```",
        f"```\n{CALL}\n```",
        f"```json\n{CALL}",  # the model stopped before closing the fence
        f"{CALL}\n\n```",  # ... or closed a fence it never opened
        f"<tool_call>\n{CALL}\n</tool_call>",
        '{"name": "read_file", "parameters": {"path": "notes.txt"}}',
        '{"name": "read_file", "arguments": "{\\"path\\": \\"notes.txt\\"}"}',
    ],
)
def test_a_reply_that_is_one_json_call_is_read_as_that_call(text: str) -> None:
    assert parse_text_tool_call(text, TOOLS) == ("read_file", {"path": "notes.txt"})


@pytest.mark.parametrize(
    "text",
    [
        "The file notes.txt says: remember the milk.",
        f"I will call the tool now: {CALL}",
        f"Here it is:\n```json\n{CALL}\n```",
        f"```json\n{CALL}\n```\nThat reads the file.",
        f"I read it:\n{CALL}\n```",
        f"{CALL}\n```\nmore",
        f"{CALL}\n{CALL}",
        '{"name": "delete_everything", "arguments": {}}',
        '{"name": "read_file", "arguments": {"path": "a"}, "id": 1}',
        '{"name": "read_file", "arguments": ["notes.txt"]}',
        '{"host": "localhost", "port": 8080}',
        '{"name": "read_file", "arguments": {"path": ',
        "```python\nprint('hi')\n```",
        "",
    ],
)
def test_prose_and_anything_else_is_never_a_call(text: str) -> None:
    assert parse_text_tool_call(text, TOOLS) is None


def _read_tool() -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    return read_file


def test_a_fenced_call_runs_the_tool_and_its_arguments_are_repaired() -> None:
    fenced = '```json\n{"name": "read_file", "arguments": {"path": "a.txt", "type": "string"}}\n```'
    model = ScriptedModel([fenced, "It holds the contents."])
    agent = Agent(
        model=model.model,
        stream_fn=with_text_tool_calls(model),
        tools=[with_argument_repair(_read_tool())],
    )
    result = agent.prompt("read a.txt")
    call_message = result[1]
    assert call_message.stop_reason == "tool_use"
    calls = [c for c in call_message.content if isinstance(c, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("read_file", {"path": "a.txt", "type": "string"})  # as the model wrote them
    ]
    assert call_message.text == ""  # the text became the call
    tool_result = [m for m in agent.state.messages if m.role == "tool_result"][-1]
    assert not tool_result.is_error
    assert "dropped unknown key 'type'" in tool_result.content[0].text
    assert tool_result.content[1].text == "contents of a.txt"
    assert result[-1].text == "It holds the contents."
    # The next request replays the call as a call, not as text.
    replayed = model.requests[1].messages
    assert any(
        isinstance(c, ToolCall) for m in replayed if m.role == "assistant" for c in m.content
    )


def test_prose_and_calls_to_undeclared_tools_pass_through_unchanged() -> None:
    answers = [
        'Use {"name": "read_file", "arguments": {"path": "a.txt"}} to read it.',
        '{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}',
    ]
    for answer in answers:
        model = ScriptedModel([answer])
        agent = Agent(
            model=model.model, stream_fn=with_text_tool_calls(model), tools=[_read_tool()]
        )
        result = agent.prompt("read a.txt")
        assert result[-1].text == answer and result[-1].stop_reason == "stop"
        assert len(model.requests) == 1


def test_without_tools_the_stream_is_not_wrapped() -> None:
    model = ScriptedModel([CALL])
    agent = Agent(model=model.model, stream_fn=with_text_tool_calls(model))
    assert agent.prompt("hi")[-1].text == CALL


def test_a_failing_stream_fails_through_the_wrapper() -> None:
    model = ScriptedModel([reply("", error="boom")])
    agent = Agent(model=model.model, stream_fn=with_text_tool_calls(model), tools=[_read_tool()])
    last = agent.prompt("read a.txt")[-1]
    assert last.stop_reason == "error" and last.error_message == "boom"


# --- stop_repeated_failures -------------------------------------------------------------------


def _flaky_reader(fails: set[int]) -> Any:
    """A read_file whose n-th call (1-based) fails with "<path> does not exist" when n is in
    ``fails``."""
    calls = [0]

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        calls[0] += 1
        if calls[0] in fails:
            raise FileNotFoundError(f"{path} does not exist")
        return f"contents of {path}"

    return read_file


def _looping_agent(replies: list[Any], fails: set[int], limit: int = 3) -> tuple[Agent, Any]:
    model = ScriptedModel(replies)
    agent = Agent(
        model=model.model,
        stream_fn=model,
        tools=[_flaky_reader(fails)],
        after_tool_call=stop_repeated_failures(limit),
    )
    return agent, model


def test_the_same_failing_call_ends_the_run_at_the_limit() -> None:
    same = reply(tool_call("read_file", {"path": "string"}))
    agent, model = _looping_agent([same] * 5 + ["answered"], fails=set(range(1, 10)))
    result = agent.prompt("read it")
    assert len(model.requests) == 3  # no request after the third failure
    results = [m for m in agent.state.messages if m.role == "tool_result"]
    assert len(results) == 3 and all(r.is_error for r in results)  # the transcript is whole
    last = results[-1]
    assert last.details == {REPEATED_FAILURE: 3}
    assert "string does not exist" in last.content[0].text
    assert "3 times in a row" in last.content[-1].text
    assert result[-1] is last
    assert [r.details for r in results[:2]] == [{}, {}]
    # The agent stays usable: the next prompt runs, and the count starts again after it.
    assert agent.prompt("try again")[-1].text == "answered"
    assert len(model.requests) == 6


def test_the_limit_is_the_caller_s() -> None:
    same = reply(tool_call("read_file", {"path": "a"}))
    agent, model = _looping_agent([same] * 3 + ["never"], fails={1, 2, 3}, limit=2)
    assert agent.prompt("read")[-1].details == {REPEATED_FAILURE: 2}
    assert len(model.requests) == 2


def test_changed_arguments_a_success_or_another_error_do_not_count() -> None:
    calls = [reply(tool_call("read_file", {"path": p})) for p in ("a", "b", "c", "d")]
    agent, _ = _looping_agent([*calls, "done"], fails={1, 2, 3, 4})  # each call is new
    assert agent.prompt("read")[-1].text == "done"

    same = reply(tool_call("read_file", {"path": "a"}))
    agent, _ = _looping_agent([same] * 5 + ["done"], fails={1, 2, 4, 5})  # the 3rd succeeds
    assert agent.prompt("read")[-1].text == "done"

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        raise OSError(f"attempt {secrets.token_hex(4)} failed")  # never the same text

    model = ScriptedModel([same] * 4 + ["done"])
    agent = Agent(
        model=model.model,
        stream_fn=model,
        tools=[read_file],
        after_tool_call=stop_repeated_failures(),
    )
    assert agent.prompt("read")[-1].text == "done"


def test_a_user_message_between_failures_starts_the_count_again() -> None:
    same = reply(tool_call("read_file", {"path": "a"}))
    agent, model = _looping_agent([same, same, "ok", same, same, "done"], fails=set(range(1, 9)))
    assert agent.prompt("read")[-1].text == "ok"
    assert agent.prompt("again")[-1].text == "done"  # two failures after the user's message
    with pytest.raises(ValueError):
        stop_repeated_failures(1)
