"""Typed output and tool_choice through each wire API over real HTTP (the replay server).

Each request must ask for the schema the API's own way (checked in the recorded request body),
and the streamed answer (see ``tests/fixtures/structured/README.md``) must come back validated
as ``RunResult.output``; a partial object is visible while the answer streams.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from replay_server import (
    API_KEY,
    ReplayServer,
    Reply,
    call_delta,
    chat_sse,
    fixture_bytes,
    make_model,
)

from agentkit import Agent, MessageUpdateEvent
from agentkit.providers import stream_simple
from agentkit.providers.anthropic import STRUCTURED_OUTPUTS_BETA


class City(BaseModel):
    city: str
    country: str
    population_millions: float


FIXTURES = {
    "openai-completions": "structured/openai-chat-json-schema.sse",
    "openai-responses": "structured/openai-responses-json-schema.sse",
    "anthropic-messages": "structured/anthropic-output-format.sse",
    "google-generative-ai": "structured/gemini-response-schema.sse",
}
EXPECTED = City(city="London", country="UK", population_millions=8.9)


def agent_for(server: ReplayServer, api: str, **options: Any) -> Agent:
    model = make_model(api, server.url)
    return Agent(model=model, stream_fn=stream_simple, api_key=API_KEY, **options)


def schema_sent(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """The schema a request body asks for, where the API's structured output puts it."""
    if api == "openai-completions":
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "City"
        assert fmt["json_schema"]["strict"] is True
        return dict(fmt["json_schema"]["schema"])
    if api == "openai-responses":
        fmt = body["text"]["format"]
        assert (fmt["type"], fmt["name"], fmt["strict"]) == ("json_schema", "City", True)
        return dict(fmt["schema"])
    if api == "anthropic-messages":
        assert body["output_format"]["type"] == "json_schema"
        return dict(body["output_format"]["schema"])
    config = body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    return dict(config["responseSchema"])


@pytest.mark.parametrize("api", sorted(FIXTURES))
@pytest.mark.parametrize("chunk", [None, 5])
def test_typed_output_over_each_api(server: ReplayServer, api: str, chunk: int | None) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES[api]), chunk=chunk))
    agent = agent_for(server, api, output_type=City)
    result = agent.prompt("Which city is the capital of the UK? Answer as JSON.")

    assert result.stop_reason == "stop", result.error_message
    assert result.output == EXPECTED
    assert result.usage.requests == 1 and result.usage.output > 0
    assert result.usage.cost.total > 0  # priced from the model's catalog costs
    request = server.requests[0]
    schema = schema_sent(api, request.json)
    if api == "google-generative-ai":  # OpenAPI subset: upper-case types, no extra keys
        assert schema["type"] == "OBJECT"
        assert schema["properties"]["population_millions"] == {"type": "NUMBER"}
        assert "additionalProperties" not in schema
    else:
        assert schema["required"] == ["city", "country", "population_millions"]
        assert schema["additionalProperties"] is False
    if api == "anthropic-messages":
        assert STRUCTURED_OUTPUTS_BETA in request.headers.get("anthropic-beta", "")


@pytest.mark.parametrize("api", sorted(FIXTURES))
def test_partial_object_while_streaming(server: ReplayServer, api: str) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES[api]), chunk=5))
    agent = agent_for(server, api)
    partials: list[Any] = []
    with agent.stream("Capital of the UK?", output_type=City) as events:
        for event in events:
            if isinstance(event, MessageUpdateEvent) and events.partial_output is not None:
                partials.append(events.partial_output)
    assert partials and partials[0] != partials[-1]  # it grew
    assert partials[0].get("city") in (None, "L", "Lo", "Lon", "Lond", "Londo", "London")
    assert partials[-1] == EXPECTED.model_dump()
    assert events.result().output == EXPECTED


@pytest.mark.parametrize(
    ("api", "choice", "sent"),
    [
        ("openai-completions", "required", "required"),
        (
            "openai-completions",
            {"name": "lookup"},
            {"type": "function", "function": {"name": "lookup"}},
        ),
        ("openai-responses", {"name": "lookup"}, {"type": "function", "name": "lookup"}),
        ("openai-responses", "none", "none"),
        ("anthropic-messages", "required", {"type": "any"}),
        ("anthropic-messages", {"name": "lookup"}, {"type": "tool", "name": "lookup"}),
        ("google-generative-ai", "required", {"functionCallingConfig": {"mode": "ANY"}}),
        (
            "google-generative-ai",
            {"name": "lookup"},
            {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}},
        ),
    ],
)
def test_portable_tool_choice_on_the_wire(
    server: ReplayServer, api: str, choice: Any, sent: Any
) -> None:
    from agentkit import tool

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    server.enqueue(Reply(body=fixture_bytes(FIXTURES[api])))
    agent = agent_for(server, api, tools=[lookup], tool_choice="auto")
    agent.prompt("Look up London.", tool_choice=choice)  # the run's choice wins
    body = server.requests[0].json
    key = "toolConfig" if api == "google-generative-ai" else "tool_choice"
    assert body[key] == sent
    assert agent.tool_choice == "auto"  # a run's option does not change the agent


def test_llama_cpp_gets_its_json_schema_grammar(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES["openai-completions"])))
    model = make_model("openai-completions", server.url, provider="local")
    agent = Agent(model=model, stream_fn=stream_simple, output_type=City)
    assert agent.prompt("UK capital?").output == EXPECTED
    body = server.requests[0].json
    assert "response_format" not in body
    assert body["json_schema"]["required"] == ["city", "country", "population_millions"]


class Optional_(BaseModel):
    name: str
    nickname: str | None = None


def test_a_schema_strict_mode_cannot_take_is_sent_without_strict(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES["openai-responses"])))
    agent = agent_for(server, "openai-responses", output_type=Optional_, output_retries=0)
    assert agent.prompt("x").stop_reason == "error"  # the recorded answer is not an Optional_
    fmt = server.requests[0].json["text"]["format"]
    assert fmt["strict"] is False and fmt["schema"]["additionalProperties"] is False


def test_gemini_schema_is_the_openapi_subset(server: ReplayServer) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES["google-generative-ai"])))
    agent = agent_for(server, "google-generative-ai", output_type=Optional_, output_retries=0)
    agent.prompt("x")
    schema = server.requests[0].json["generationConfig"]["responseSchema"]
    assert schema["properties"]["nickname"] == {"type": "STRING", "nullable": True}
    assert "default" not in str(schema) and "title" not in str(schema)


def _prepared(api: str, **options: Any) -> Any:
    """The request ``api``'s module prepares for a context with one tool, without sending it."""
    from agentkit.providers import anthropic, google, openai_completions, openai_responses
    from agentkit.types import Context, StreamOptions, Tool, UserMessage

    module = {
        "openai-completions": openai_completions,
        "openai-responses": openai_responses,
        "anthropic-messages": anthropic,
        "google-generative-ai": google,
    }[api]
    tool = Tool(name="lookup", description="Look a city up.", parameters={"type": "object"})
    context = Context(messages=[UserMessage(content="hi")], tools=[tool])
    model = make_model(api, "http://127.0.0.1:1")
    return module.prepare(model, context, StreamOptions(**options), API_KEY)


@pytest.mark.parametrize("api", sorted(FIXTURES))
def test_each_api_spells_the_stated_output_schema(api: str) -> None:
    from agentkit import OutputSpec

    prepared = _prepared(api, output_schema=OutputSpec(City).output_schema)
    schema = schema_sent(api, prepared.payload)
    if api == "google-generative-ai":
        assert schema["required"] == ["city", "country", "population_millions"]
    else:
        assert schema["additionalProperties"] is False


@pytest.mark.parametrize("api", sorted(FIXTURES))
def test_an_apis_own_tool_choice_dict_is_sent_whole(api: str) -> None:
    own = {"type": "tool", "name": "lookup"}  # has a "name", but is not the portable form
    body = _prepared(api, tool_choice=own).payload
    assert body["toolConfig" if api == "google-generative-ai" else "tool_choice"] == own


@pytest.mark.parametrize(
    ("api", "sent"),
    [
        ("openai-completions", "required"),
        ("openai-responses", "required"),
        ("anthropic-messages", {"type": "any"}),
        ("google-generative-ai", {"functionCallingConfig": {"mode": "ANY"}}),
    ],
)
def test_any_is_a_synonym_of_required(api: str, sent: Any) -> None:
    body = _prepared(api, tool_choice="any").payload
    assert body["toolConfig" if api == "google-generative-ai" else "tool_choice"] == sent


def test_a_misspelt_tool_choice_fails_where_it_is_given() -> None:
    with pytest.raises(ValueError, match="tool_choice"):
        Agent(model=make_model("openai-completions", "http://127.0.0.1:1"), tool_choice="requried")


def test_the_structured_outputs_beta_joins_the_callers_own() -> None:
    from agentkit import OutputSpec

    prepared = _prepared(
        "anthropic-messages",
        output_schema=OutputSpec(City).output_schema,
        headers={"anthropic-beta": "context-1m-2025-08-07"},
    )
    assert prepared.headers["anthropic-beta"] == f"context-1m-2025-08-07,{STRUCTURED_OUTPUTS_BETA}"
    assert "anthropic-beta" not in _prepared("anthropic-messages").headers


# --- local servers: the request form each documents, and the fallbacks ---------------------------

CITY_JSON = '{"city": "London", "country": "UK", "population_millions": 8.9}'


def local_agent(
    server: ReplayServer, name: str | None, system_prompt: str = "", **compat: Any
) -> Agent:
    from agentkit.providers import local_model

    model = local_model(f"{server.url}/v1", "some-model", server=name, compat=compat or None)
    return Agent(
        model=model, stream_fn=stream_simple, output_type=City, system_prompt=system_prompt
    )


@pytest.mark.parametrize("name", ["vllm", "ollama", "lmstudio"])
def test_vllm_ollama_and_lm_studio_are_asked_with_response_format(
    server: ReplayServer, name: str
) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES["openai-completions"])))
    result = local_agent(server, name).prompt("Capital of the UK, as JSON.")
    assert result.output == EXPECTED, result.error_message
    body = server.requests[0].json
    assert "json_schema" not in body  # llama.cpp's field: these servers do not read it
    schema = schema_sent("openai-completions", body)  # response_format, as each documents
    assert schema["required"] == ["city", "country", "population_millions"]


@pytest.mark.parametrize("name", ["llamacpp", None])
def test_llama_cpp_is_asked_with_its_json_schema_field(
    server: ReplayServer, name: str | None
) -> None:
    server.enqueue(Reply(body=fixture_bytes(FIXTURES["openai-completions"])))
    result = local_agent(server, name).prompt("Capital of the UK, as JSON.")
    assert result.output == EXPECTED, result.error_message
    body = server.requests[0].json
    assert body["json_schema"]["required"] == ["city", "country", "population_millions"]
    assert "response_format" not in body


def output_tool_call(arguments: str) -> bytes:
    first = {"index": 0, "id": "call_1", "type": "function"}
    pieces = [arguments[i : i + 7] for i in range(0, len(arguments), 7)]
    deltas = [{"tool_calls": [{**first, "function": {"name": "final_result", "arguments": ""}}]}]
    deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in pieces]
    return chat_sse(*deltas, finish="tool_calls")


def test_a_server_without_native_output_is_asked_through_a_tool(server: ReplayServer) -> None:
    server.enqueue(Reply(body=output_tool_call(CITY_JSON), chunk=11))
    agent = local_agent(server, "ollama", structured_output="tool")
    partials: list[Any] = []
    with agent.stream("Capital of the UK?") as events:
        for event in events:
            if isinstance(event, MessageUpdateEvent) and events.partial_output is not None:
                partials.append(events.partial_output)
    result = events.result()
    assert result.output == EXPECTED, result.error_message
    assert partials and partials[-1] == EXPECTED.model_dump()  # the answer streamed as it came
    body = server.requests[0].json
    assert "response_format" not in body and "json_schema" not in body
    (declared,) = body["tools"]
    assert declared["function"]["name"] == "final_result"
    assert declared["function"]["parameters"]["required"] == ["city", "country", "population_millions"]
    assert body["tool_choice"] == "required"
    assert result.stop_reason == "stop" and len(server.requests) == 1  # no tool ran


def test_the_output_tool_sits_beside_the_agents_own_tools(server: ReplayServer) -> None:
    lookup_call = call_delta("call_0", "lookup", '{"q": "UK"}')
    server.enqueue(
        Reply(body=chat_sse(lookup_call, finish="tool_calls")),
        Reply(body=output_tool_call(CITY_JSON)),
    )
    from tests.support import make_tool

    lookup = make_tool("lookup", lambda *_: "London, 8.9 million")
    agent = local_agent(server, "vllm", structured_output="tool")
    agent.state.tools = [lookup]
    result = agent.prompt("Capital of the UK?")
    assert result.output == EXPECTED, result.error_message
    assert len(lookup.calls) == 1
    names = [t["function"]["name"] for t in server.requests[0].json["tools"]]
    assert names == ["lookup", "final_result"]


def test_a_server_without_native_output_is_asked_in_the_instructions(
    server: ReplayServer,
) -> None:
    server.enqueue(Reply(body=chat_sse({"content": CITY_JSON})))
    agent = local_agent(server, "lmstudio", "Be brief.", structured_output="prompted")
    result = agent.prompt("Capital of the UK?")
    assert result.output == EXPECTED, result.error_message
    body = server.requests[0].json
    assert "response_format" not in body and "json_schema" not in body and "tools" not in body
    system = body["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("Be brief.\n\n")
    assert "population_millions" in system["content"]
    assert agent.state.system_prompt == "Be brief."  # the instructions were for the request
