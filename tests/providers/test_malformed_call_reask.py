"""A server that rejects its own model's tool call (llama.cpp's HTTP 500 "Failed to parse tool
call arguments as JSON") is the model's mistake: the request is asked again with a note that
says so, over real HTTP, and the run goes on."""

from __future__ import annotations

import json

from replay_server import API_KEY, ReplayServer, Reply, call_delta, chat_sse, make_model

from agentkit import Agent
from agentkit.providers import complete, stream_simple
from agentkit.providers.runner import MALFORMED_CALL_REASKS
from agentkit.types import Context, UserMessage
from tests.support import make_tool

LLAMA_CPP_500 = json.dumps(
    {
        "error": {
            "code": 500,
            "message": "Failed to parse tool call arguments as JSON: [json.exception.parse_error"
            ".101] parse error at line 1, column 31: syntax error while parsing value - "
            "unexpected end of input; expected '[', '{', or a literal",
            "type": "server_error",
        }
    }
).encode()


def rejected() -> Reply:
    return Reply(status=500, body=LLAMA_CPP_500, content_type="application/json")


def local(server: ReplayServer) -> object:
    return make_model("openai-completions", server.url, provider="llamacpp")


def last_user_text(body: dict[str, object]) -> str:
    messages = body["messages"]
    assert isinstance(messages, list)
    return str(messages[-1]["content"]) if messages[-1]["role"] == "user" else ""


def test_the_model_is_asked_again_with_a_note_and_the_run_goes_on(server: ReplayServer) -> None:
    call = call_delta("call_1", "read_file", '{"path": "notes.txt"}')
    server.enqueue(
        rejected(),
        Reply(chat_sse(call, finish="tool_calls")),
        Reply(chat_sse({"content": "It says hello."})),
    )
    read_file = make_tool("read_file", lambda *_: "hello")
    agent = Agent(
        model=local(server), stream_fn=stream_simple, tools=[read_file], max_retries=0
    )
    new = agent.prompt("What does notes.txt say?")

    assert new[-1].stop_reason == "stop", new[-1].error_message
    assert [m.role for m in new] == ["user", "assistant", "tool_result", "assistant"]
    assert len(read_file.calls) == 1
    first, again, after_tool = (r.json for r in server.requests)
    assert last_user_text(first) == "What does notes.txt say?"
    note = last_user_text(again)
    assert "could not parse a tool call" in note and "unexpected end of input" in note
    assert again["messages"][:-1] == first["messages"]  # the same request, plus the note
    # the note was for that request only: the transcript keeps the answer, not the note
    assert "could not parse" not in json.dumps(after_tool)
    assert "could not parse" not in json.dumps([m.model_dump() for m in agent.state.messages])


def test_a_model_that_keeps_failing_ends_the_request_with_the_servers_message(
    server: ReplayServer,
) -> None:
    server.enqueue(*(rejected() for _ in range(MALFORMED_CALL_REASKS + 1)))
    message = complete(
        local(server), Context(messages=[UserMessage(content="hi")]), {"max_retries": 0}
    )
    assert message.stop_reason == "error"
    assert "Failed to parse tool call arguments" in (message.error_message or "")
    assert len(server.requests) == MALFORMED_CALL_REASKS + 1
    notes = [last_user_text(r.json) for r in server.requests[1:]]
    assert all(n.count("could not parse a tool call") == 1 for n in notes)  # one note, not piled


def test_other_server_errors_are_retried_unchanged(server: ReplayServer) -> None:
    server.enqueue(
        Reply(status=500, body=b'{"error": {"message": "CUDA out of memory"}}'),
        Reply(chat_sse({"content": "fine"})),
    )
    message = complete(
        local(server),
        Context(messages=[UserMessage(content="hi")]),
        {"max_retries": 1, "retry_base_delay_ms": 1, "api_key": API_KEY},
    )
    assert message.stop_reason == "stop"
    assert server.requests[0].json == server.requests[1].json
