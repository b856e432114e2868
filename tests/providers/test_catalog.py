"""The model catalog, local-server presets, API keys from the environment, the API registry."""

from __future__ import annotations

import threading

import pytest
from replay_server import ReplayServer, Reply, collect, fixture_bytes

from agentkit.event_stream import AssistantMessageEventStream
from agentkit.events import DoneEvent, StartEvent
from agentkit.providers import (
    LOCAL_SERVERS,
    UnknownModelError,
    complete,
    complete_simple,
    get_env_api_key,
    get_model,
    get_models,
    get_providers,
    local_model,
    register_api,
    register_model,
    stream_simple,
    unregister_api,
)
from agentkit.types import AssistantMessage, Context, Model, StreamOptions, UserMessage

KNOWN_APIS = {
    "openai-completions",
    "openai-responses",
    "anthropic-messages",
    "google-generative-ai",
}


def test_builtin_catalog_covers_the_vendors() -> None:
    providers = set(get_providers())
    assert {"openai", "anthropic", "google", "groq", "openrouter", "deepseek", "xai"} <= providers
    for model in get_models():
        assert model.api in KNOWN_APIS
        assert model.base_url.startswith("https://")
        assert model.context_window > 0 and model.max_tokens > 0
        assert model.cost.input > 0 and model.cost.output >= model.cost.input * 0.5
        assert set(model.input) <= {"text", "image"}


def test_get_model_returns_an_independent_copy() -> None:
    model = get_model("anthropic", "claude-sonnet-4-5")
    assert model.api == "anthropic-messages"
    assert model.base_url == "https://api.anthropic.com"
    assert model.reasoning and "image" in model.input
    assert model.cost.input == 3 and model.cost.output == 15
    model.cost.input = 999
    assert get_model("anthropic", "claude-sonnet-4-5").cost.input == 3
    assert get_model("openai", "gpt-4o-mini").api == "openai-responses"
    assert get_model("google", "gemini-2.5-flash").base_url.endswith("/v1beta")


def test_unknown_model_lists_close_matches() -> None:
    with pytest.raises(KeyError) as info:
        get_model("anthropic", "claude-sonet-4-5")
    assert isinstance(info.value, UnknownModelError)
    assert "claude-sonnet-4-5" in str(info.value)
    with pytest.raises(UnknownModelError) as info:
        get_model("antropic", "x")
    assert "anthropic" in str(info.value)


def test_the_catalog_loads_once_however_many_threads_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lock's job: one thread loads models.json while the others wait for it. Without the
    # lock a second thread would start a second load (and could iterate a dict being filled).
    import json as real_json

    from agentkit.providers import catalog

    monkeypatch.setattr(catalog, "_models", {})
    monkeypatch.setattr(catalog, "_loaded", False)
    entered = [threading.Event(), threading.Event()]
    go = threading.Event()
    loads: list[int] = []

    class SlowJson:
        @staticmethod
        def loads(text: str) -> object:
            entered[len(loads)].set()
            loads.append(1)
            go.wait(10)
            return real_json.loads(text)

    monkeypatch.setattr(catalog, "json", SlowJson)
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.append(len(get_models()))) for _ in range(2)]
    threads[0].start()
    assert entered[0].wait(5)
    threads[1].start()
    assert not entered[1].wait(0.5)  # the second thread waits for the first load
    go.set()
    for thread in threads:
        thread.join(10)
    assert loads == [1] and seen[0] == seen[1] > 0


def test_register_model_replaces() -> None:
    register_model(
        Model(id="m0", api="openai-completions", provider="test-reg", base_url="http://x/v1")
    )
    register_model(
        {"id": "m0", "api": "openai-completions", "provider": "test-reg", "base_url": "http://y/v1"}
    )
    assert get_model("test-reg", "m0").base_url == "http://y/v1"
    assert len(get_models("test-reg")) == 1


def test_local_model_presets() -> None:
    ollama = local_model(None, "qwen2.5:0.5b", server="ollama")
    assert ollama.base_url == LOCAL_SERVERS["ollama"]
    assert ollama.api == "openai-completions" and ollama.provider == "local"
    assert ollama.compat and ollama.compat.max_tokens_field == "max_tokens"
    assert ollama.compat.reasoning_field == "reasoning"
    guessed = local_model("http://127.0.0.1:8080/v1/", "qwen")
    assert guessed.base_url == "http://127.0.0.1:8080/v1"
    assert guessed.compat and guessed.compat.reasoning_field == "reasoning_content"
    custom = local_model(
        "http://localhost:9999/v1",
        "m",
        compat={"supports_usage_in_streaming": False},
        register=True,
    )
    assert custom.compat and custom.compat.supports_usage_in_streaming is False
    assert get_model("local", "m").base_url == "http://localhost:9999/v1"
    with pytest.raises(ValueError):
        local_model(None, "m")


def test_local_model_talks_to_a_local_server_without_key(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOCAL_API_KEY", raising=False)
    server.enqueue(Reply(body=fixture_bytes("local/llamacpp/chat-tool-call-usage.sse"), chunk=7))
    model = local_model(f"{server.url}/v1", "qwen", server="llamacpp")
    message = complete(
        model, Context(messages=[UserMessage(content="weather?")]), {"max_tokens": 20}
    )
    assert message.stop_reason == "tool_use"
    body = server.requests[0].json
    assert body["max_tokens"] == 20 and "store" not in body
    assert "authorization" not in server.requests[0].headers


def test_env_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "MY_VENDOR_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert get_env_api_key("openai") is None
    monkeypatch.setenv("OPENAI_API_KEY", "o")
    assert get_env_api_key("openai") == "o"
    monkeypatch.setenv("GOOGLE_API_KEY", "g2")
    assert get_env_api_key("google") == "g2"
    monkeypatch.setenv("GEMINI_API_KEY", "g1")
    assert get_env_api_key("google") == "g1"
    monkeypatch.setenv("MY_VENDOR_API_KEY", "v")
    assert get_env_api_key("my-vendor") == "v"
    for provider, var in [
        ("groq", "GROQ_API_KEY"),
        ("openrouter", "OPENROUTER_API_KEY"),
        ("deepseek", "DEEPSEEK_API_KEY"),
        ("xai", "XAI_API_KEY"),
        ("mistral", "MISTRAL_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
    ]:
        monkeypatch.setenv(var, provider + "-key")
        assert get_env_api_key(provider) == provider + "-key"


def test_register_api_and_stream_simple_dispatch() -> None:
    seen: list[StreamOptions] = []

    class FakeOptions(StreamOptions):
        """A custom API's own options: a subclass, since StreamOptions forbids unknown keys."""

        fake_level: str | None = None
        custom: int = 0

    def fake(model: Model, context: Context, options: object = None) -> AssistantMessageEventStream:
        opts = (
            options
            if isinstance(options, StreamOptions)
            else FakeOptions.model_validate(options or {})
        )
        seen.append(opts)
        out = AssistantMessageEventStream()
        message = AssistantMessage(api=model.api, provider=model.provider, model=model.id)
        out.push(StartEvent(partial=message))
        out.push(DoneEvent(reason="stop", message=message))
        return out

    register_api(
        "fake-api", fake, lambda model, level, budgets: {"fake_level": level} if level else {}
    )
    try:
        model = Model(id="f", api="fake-api", provider="fake", base_url="")
        message = complete_simple(model, Context(), FakeOptions(reasoning="high", custom=1))
        assert message.api == "fake-api"
        last = seen[-1]
        assert isinstance(last, FakeOptions)
        assert last.fake_level == "high" and last.custom == 1
        events, _ = collect(stream_simple(model, {"messages": []}, None))
        assert [e.type for e in events] == ["start", "done"]
    finally:
        unregister_api("fake-api")
    assert (
        complete(Model(id="f", api="fake-api", provider="fake", base_url=""), Context()).stop_reason
        == "error"
    )
