"""The provider table: one source for labels, key variables, keyless providers, defaults and
quirks, read by providers, the catalog and the CLI."""

from __future__ import annotations

import pytest
from replay_server import API_KEY, ReplayServer, Reply, collect, make_model, options

from agentkit import ProviderError
from agentkit.events import ErrorEvent
from agentkit.providers import configured_provider, get_env_api_key, model_from_spec, stream
from agentkit.providers.openai_completions import resolve_compat
from agentkit.providers.table import PROVIDERS, provider_compat, provider_label
from agentkit.types import Context, Model, ModelCompat, UserMessage

CTX = Context(messages=[UserMessage(content="hi")])


def _clear_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for info in PROVIDERS.values():
        for name in info.env_keys:
            monkeypatch.delenv(name, raising=False)


def test_google_api_key_is_read_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_keys(monkeypatch)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key-1234")
    assert get_env_api_key("google") == "g-key-1234"
    assert PROVIDERS["google"].env_keys == ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    assert configured_provider() == ("google", "GOOGLE_API_KEY", "gemini-2.5-flash")


def test_configured_provider_follows_the_table_order(monkeypatch: pytest.MonkeyPatch) -> None:
    _clear_keys(monkeypatch)
    assert configured_provider() is None
    monkeypatch.setenv("OPENAI_API_KEY", "o-key-1234")
    monkeypatch.setenv("GEMINI_API_KEY", "g-key-1234")
    assert configured_provider() == ("openai", "OPENAI_API_KEY", "gpt-4.1-mini")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key-1234")
    assert configured_provider() == ("anthropic", "ANTHROPIC_API_KEY", "claude-sonnet-4-5")


def test_every_default_model_is_in_the_catalog() -> None:
    for info in PROVIDERS.values():
        if info.default_model:
            assert model_from_spec(info.name).id == info.default_model


def test_model_from_spec() -> None:
    assert model_from_spec("anthropic:claude-sonnet-4-5").api == "anthropic-messages"
    local = model_from_spec("llamacpp:qwen")
    assert (local.provider, local.base_url) == ("llamacpp", "http://127.0.0.1:8080/v1")
    with pytest.raises(KeyError, match="Close matches"):
        model_from_spec("openai:gpt-4o-mni")
    with pytest.raises(ValueError, match="provider:id"):
        model_from_spec(":x")
    with pytest.raises(ValueError, match="names no model"):
        model_from_spec("groq")


def test_labels_and_keyless_providers() -> None:
    assert provider_label("google") == "Google Gemini"
    assert provider_label("somebody") == "somebody"
    assert {n for n, i in PROVIDERS.items() if i.keyless} == {
        "local",
        "ollama",
        "llamacpp",
        "vllm",
        "lmstudio",
    }


def test_quirks_layer_table_then_model() -> None:
    model = Model(id="m", api="openai-completions", provider="deepseek", base_url="https://x/v1")
    assert provider_compat(model).max_tokens_field == "max_tokens"
    own = model.model_copy(update={"compat": {"max_tokens_field": "max_completion_tokens"}})
    assert provider_compat(own).max_tokens_field == "max_completion_tokens"
    with pytest.raises(ValueError):
        ModelCompat.model_validate({"suports_store": True})


def test_resolved_quirks_follow_the_model_and_are_each_callers_own() -> None:
    """The merge is remembered per model identity, never shared or stale."""
    model = Model(id="m", api="openai-completions", provider="deepseek", base_url="https://x/v1")
    first = resolve_compat(model)
    assert first["max_tokens_field"] == "max_tokens"
    first["max_tokens_field"] = "changed by a caller"
    assert resolve_compat(model)["max_tokens_field"] == "max_tokens"
    model.compat = {"max_tokens_field": "max_completion_tokens"}  # changed in place
    assert resolve_compat(model)["max_tokens_field"] == "max_completion_tokens"
    model.compat = {"max_tokens_field": ["unhashable"]}
    with pytest.raises(ValueError):
        resolve_compat(model)
    model.compat = {"suports_store": True}
    for _ in range(2):  # a misspelt key is refused every time, not only the first
        with pytest.raises(ValueError):
            resolve_compat(model)


def test_a_missing_key_names_every_variable(
    server: ReplayServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_keys(monkeypatch)
    model = make_model("google-generative-ai", "https://generativelanguage.example/v1beta")
    opts = options()
    opts.pop("api_key")
    _, message = collect(stream(model, CTX, opts))
    assert "GEMINI_API_KEY or GOOGLE_API_KEY" in (message.error_message or "")
    assert "options" not in (message.error_message or "")


def test_provider_error_carries_status_and_retry_after(server: ReplayServer) -> None:
    """The transport reports the status and keeps the headers; the runner's policy reads them."""
    from agentkit.providers.http import StreamingRequest
    from agentkit.providers.runner import parse_retry_after, retryable_status
    from agentkit.types import StreamOptions

    server.enqueue(
        Reply(b'{"error": {"message": "slow down"}}', status=429, headers={"Retry-After": "7"})
    )
    request = StreamingRequest(
        url=server.url + "/v1/chat/completions",
        headers={},
        body=b"{}",
        options=StreamOptions(),
        provider_label="OpenAI",
    )
    with request:
        with pytest.raises(ProviderError) as caught:
            request.open()
        asked = parse_retry_after(request.response_headers)
    error = caught.value
    assert (error.status, asked, retryable_status(error.status)) == (429, 7.0, True)
    assert "slow down" in str(error)


def test_a_failed_run_raises_the_provider_error_with_its_status_and_retry_after(
    server: ReplayServer,
) -> None:
    from agentkit import Agent

    # max_retries=0: the 429 is the request's last word
    for _ in range(2):
        server.enqueue(
            Reply(
                b'{"error": {"message": "slow down"}}', status=429, headers={"Retry-After": "7"}
            )
        )
    model = make_model("openai-completions", server.url)
    events = list(stream(model, CTX, options(max_retries=0)))
    assert isinstance(events[-1], ErrorEvent) and events[-1].provider_error is not None
    assert (events[-1].provider_error.status, events[-1].provider_error.retry_after) == (429, 7.0)

    agent = Agent(model=model, **options(max_retries=0))
    result = agent.prompt("hi")
    assert result.stop_reason == "error"
    with pytest.raises(ProviderError) as caught:
        result.raise_for_error()
    assert (caught.value.status, caught.value.retry_after, caught.value.retryable) == (429, 7.0, True)
    assert "slow down" in str(caught.value)
    assert API_KEY not in str(caught.value)


def test_base_url_variables_move_a_named_model(
    monkeypatch: pytest.MonkeyPatch, server: ReplayServer
) -> None:
    """OPENAI_BASE_URL and ANTHROPIC_BASE_URL send "openai:..." and "anthropic:..." models to
    a gateway, as the vendors' SDKs do; the request really goes there, with the key."""
    from replay_server import fixture_bytes

    from agentkit import Agent, get_model

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1/")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    assert model_from_spec("anthropic").base_url == server.url
    assert get_model("openai", "gpt-4.1-mini").base_url == "https://api.openai.com/v1"
    assert model_from_spec("google").base_url.startswith("https://")
    server.enqueue(Reply(fixture_bytes("vendor/openai-responses-text.sse")))
    result = Agent(model="openai:gpt-4.1-mini", max_retries=0).prompt("What is 2+2?")
    assert result.text == "2+2 = 4"
    (request,) = server.requests
    assert request.path == "/v1/responses"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
