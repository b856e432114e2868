"""Tool calls of the embedded model, constrained and read from text: the request shape against
a local replay server over real HTTP, and the calls read back through the agent loop."""

from __future__ import annotations

import json
from typing import Any

from gbnf import matches
from replay_server import ReplayServer, Reply

from agentkit import Agent, tool
from agentkit.local import (
    constrain_tool_calls,
    embedded_model,
    tool_call_grammar,
    with_constrained_tool_calls,
)
from agentkit.local.repair import with_text_tool_calls
from agentkit.local.template import TOOLS_POSTAMBLE
from agentkit.types import ToolCall


def sse(*texts: str) -> bytes:
    """A Chat Completions stream that writes ``texts`` as content and stops."""
    chunks = [{"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + b"data: [DONE]\n\n"


@tool
def read_file(path: str, limit: int = 10) -> str:
    """Read a file."""
    return f"{path} says hello ({limit} lines)"


def test_the_call_is_constrained_declared_in_text_and_read_back(server: ReplayServer) -> None:
    server.enqueue(
        Reply(body=sse('{"name": "read_file", ', '"arguments": {"path": "a.txt"}}'), chunk=9),
        Reply(body=sse("It says hello.")),
    )
    agent = Agent(
        model=embedded_model(server.url),
        system_prompt="Use the tools.",
        tools=[read_file],
        stream_fn=with_text_tool_calls(with_constrained_tool_calls()),
    )
    result = agent.prompt("read a.txt")
    assert result[-1].text == "It says hello."

    first = server.requests[0].json
    assert server.requests[0].path == "/v1/chat/completions"
    assert "tools" not in first and "tool_choice" not in first  # the server refuses both
    system = first["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("Use the tools.")
    assert system["content"].endswith(TOOLS_POSTAMBLE)
    declared = json.loads(system["content"].split("<tools>\n")[1].split("\n</tools>")[0])
    assert declared["function"]["name"] == "read_file"
    assert set(declared["function"]["parameters"]["properties"]) == {"path", "limit"}
    assert first["grammar"].startswith("root ::= call | answer")
    assert 'calls ::= "\\"read_file\\""' in first["grammar"]

    calls = [c for c in result[1].content if isinstance(c, ToolCall)]
    assert [(c.name, c.arguments) for c in calls] == [("read_file", {"path": "a.txt"})]
    tool_result = [m for m in agent.state.messages if m.role == "tool_result"][-1]
    assert tool_result.content[0].text == "a.txt says hello (10 lines)"
    # The call is replayed as a call, with its result, in the next request.
    second = server.requests[1].json["messages"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "read_file"
    assert second[3]["role"] == "tool" and "says hello" in second[3]["content"]


def _payload(**extra: Any) -> dict[str, Any]:
    declaration = {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "mode": {"enum": ["text", "raw"]}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    }
    payload = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [declaration],
        "stream": True,
    }
    payload.update(extra)
    return payload


def test_requests_that_must_not_change_are_left_alone() -> None:
    for payload in (
        _payload(tools=[]),
        _payload(grammar='root ::= "x"'),
        _payload(response_format={"type": "json_object"}),
        _payload(messages=[{"role": "system", "content": [{"type": "text", "text": "s"}]}]),
    ):
        assert constrain_tool_calls(payload) is payload


def test_without_a_system_message_one_is_added_and_the_grammar_is_optional() -> None:
    payload = _payload(tool_choice="auto")
    changed = constrain_tool_calls(payload, grammar=False)
    assert "grammar" not in changed and "tools" not in changed and "tool_choice" not in changed
    assert changed["messages"][0]["role"] == "system"
    assert changed["messages"][1:] == payload["messages"]
    assert "tools" in payload  # the caller's payload is not changed


def test_the_grammar_names_only_declared_tools_keys_and_types() -> None:
    grammar = tool_call_grammar(_payload()["tools"])
    call = '{"name": "read_file", "arguments": %s}'
    for arguments in ('{"path": "a.txt"}', '{"path": "a.txt", "mode": "raw"}', '{ "path" : "" }'):
        assert matches(grammar, call % arguments), arguments
    fenced = '```json\n{\n  "name": "read_file",\n  "arguments": {\n    "path": "a"\n  }\n}\n```'
    assert matches(grammar, fenced)
    for arguments in (
        '{"path": "a", "type": "string"}',  # a key beyond the declared ones
        '{"path": 3}',  # a value of the wrong type
        '{"path": "a", "mode": "fast"}',  # outside the enum
        '{"mode": "raw"}',  # the required key missing
    ):
        assert not matches(grammar, call % arguments), arguments
    assert not matches(grammar, '{"name": "write_file", "arguments": {"path": "a"}}')
    assert not matches(grammar, '{"name": "read_file", "arguments": {"path": "a"}} and more')
    # Any reply that does not begin like a call is an answer, fenced code and JSON included.
    for answer in ("", "It says hello.\nTwo lines.", "```python\nprint(1)\n```", '{"a": 1}'):
        assert matches(grammar, answer), answer


def test_a_key_comes_once_in_declared_order_so_a_repeating_model_must_stop() -> None:
    # The embedded model, fenced, once looped on '"path": ".",' until the context ran out.
    grammar = tool_call_grammar(_payload()["tools"])
    call = '{"name": "read_file", "arguments": %s}'
    assert not matches(grammar, call % '{"path": ".", "path": "."}')
    assert not matches(grammar, call % '{"mode": "raw", "path": "a"}')  # out of declared order
    assert matches(grammar, call % '{"path": "a", "mode": "text"}')


def test_an_open_schema_lets_any_key_through_and_a_keyless_one_only_braces() -> None:
    open_schema = _payload()["tools"][0]
    open_schema["function"]["parameters"].pop("additionalProperties")
    grammar = tool_call_grammar([open_schema])
    call = '{"name": "read_file", "arguments": %s}'
    assert matches(grammar, call % '{"mode": "raw", "path": "a", "extra": [1, {"b": null}]}')
    keyless = {"type": "function", "function": {"name": "now", "parameters": {
        "type": "object", "properties": {}, "additionalProperties": False}}}
    grammar = tool_call_grammar([keyless])
    assert matches(grammar, '{"name": "now", "arguments": { }}')
    assert not matches(grammar, '{"name": "now", "arguments": {"at": 1}}')


def test_a_required_call_admits_a_call_and_nothing_else() -> None:
    declaration = _payload()["tools"]
    optional, required = tool_call_grammar(declaration), tool_call_grammar(declaration, required=True)
    call = '{"name": "read_file", "arguments": {"path": "a.txt"}}'
    assert matches(optional, call) and matches(required, call)
    for prose in ("The file says hello.", "To read it, call read_file with the path.", ""):
        assert matches(optional, prose) and not matches(required, prose)
    constrained = constrain_tool_calls(_payload(tool_choice="required"))
    assert constrained["grammar"].startswith("root ::= call\n")
    assert "tool_choice" not in constrained  # the server refuses it beside a grammar


def test_a_named_tool_choice_admits_a_call_of_that_tool_only() -> None:
    payload = _payload()
    write = json.loads(json.dumps(payload["tools"][0]))
    write["function"]["name"] = "write_file"
    payload["tools"].append(write)
    payload["tool_choice"] = {"type": "function", "function": {"name": "write_file"}}
    constrained = constrain_tool_calls(payload)
    grammar = constrained["grammar"]
    assert matches(grammar, '{"name": "write_file", "arguments": {"path": "a"}}')
    assert not matches(grammar, '{"name": "read_file", "arguments": {"path": "a"}}')
    assert not matches(grammar, "I will write it.")
    assert "tool_choice" not in constrained
    system = constrained["messages"][0]["content"]
    assert '"read_file"' in system and '"write_file"' in system  # the declarations stay whole
    payload["tool_choice"] = {"type": "function", "function": {"name": "no_such_tool"}}
    unknown = constrain_tool_calls(payload)["grammar"]  # nothing to hold it to: as "auto"
    assert matches(unknown, '{"name": "read_file", "arguments": {"path": "a"}}')
    assert matches(unknown, "An answer.")


def test_tool_choice_none_keeps_the_prompt_and_admits_an_answer_only() -> None:
    auto, none = constrain_tool_calls(_payload()), constrain_tool_calls(_payload(tool_choice="none"))
    assert none["messages"] == auto["messages"]  # the same prompt: its cached prefix holds
    assert "tools" not in none and "tool_choice" not in none
    grammar = none["grammar"]
    for answer in ("The file says hello.", "", "It has 5 names.\nAna, Ben, Cleo, Dev, Zoe."):
        assert matches(grammar, answer), answer
    for call in ('{"name": "read_file", "arguments": {"path": "a"}}',
                 '{"name ": "edit_file", "arguments": {}}',  # seen: a space in the key
                 '```json\n{"name": "read_file", "arguments": {}}\n```',
                 ' {"name": "read_file"}', '<tool_call>{"name": "x"}'):  # fmt: skip
        assert not matches(grammar, call), call
    assert constrain_tool_calls(_payload(tool_choice="none"), grammar=False)["grammar"] == grammar


def test_a_task_that_names_a_file_gets_a_call_before_an_answer(
    server: ReplayServer, tmp_path: Any
) -> None:
    """The look-first measure over real HTTP: while the latest user message names a workspace
    file (or a command) and no tool result has come in, the grammar admits only a call."""
    from agentkit.local.looking import with_look_first

    (tmp_path / "notes.txt").write_text("The secret word is pelican.\n")
    server.enqueue(
        Reply(body=sse('{"name": "read_file", "arguments": {"path": "notes.txt"}}')),
        Reply(body=sse("The secret word is pelican.")),
        Reply(body=sse("You are welcome.")),
    )
    agent = Agent(
        model=embedded_model(server.url),
        tools=[read_file],
        stream_fn=with_text_tool_calls(with_look_first(with_constrained_tool_calls(), tmp_path)),
    )
    agent.prompt("What is the secret word in notes.txt?")
    agent.prompt("Thanks!")  # names nothing: the model may answer at once
    grammars = [r.json["grammar"].split("\n", 1)[0] for r in server.requests]
    assert grammars == ["root ::= call", 'root ::= call | answer | ""', 'root ::= call | answer | ""']
