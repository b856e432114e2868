"""The provider table: one row per provider, read by keys, the providers, the catalog and the CLI.

A row says what a provider is called in messages, which environment variables hold its key (in
order of preference), whether it needs a key at all, where a local server listens by default, its
default model, and the server quirks (:class:`~agentkit.types.ModelCompat`) its OpenAI-compatible
endpoint needs. Nothing else in agentkit keeps its own list of providers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..types import Model, ModelCompat

_LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "0.0.0.0"})


@dataclass(frozen=True)
class ProviderInfo:
    """One provider's row in the table."""

    name: str
    label: str
    env_keys: tuple[str, ...] = ()
    keyless: bool = False
    default_model: str | None = None
    """The catalog id used when only this provider's key is configured."""
    local_url: str | None = None
    """Where the server listens by default (local servers only)."""
    compat: ModelCompat = field(default_factory=ModelCompat)
    env_base_url: str | None = None
    """The environment variable that moves the provider's endpoint (a proxy, a gateway, a
    compatible server), named and spelt as the vendor's own SDK reads it."""


_LOCAL_COMPAT = ModelCompat(
    max_tokens_field="max_tokens",
    supports_developer_role=False,
    supports_reasoning_effort=False,
    supports_usage_in_streaming=True,
    reasoning_field="reasoning_content",
    structured_output="json_schema",  # llama.cpp's own field (the embedded server is llama.cpp)
)

_OPENAI_FORM = ModelCompat(structured_output="response_format")
"""Typed output as OpenAI's ``response_format``: the form vLLM, Ollama and LM Studio document
(none of them reads llama.cpp's ``json_schema``)."""

PROVIDERS: dict[str, ProviderInfo] = {
    info.name: info
    for info in (
        ProviderInfo(
            "anthropic",
            "Anthropic",
            ("ANTHROPIC_API_KEY",),
            default_model="claude-sonnet-4-5",
            env_base_url="ANTHROPIC_BASE_URL",
        ),
        ProviderInfo(
            "openai",
            "OpenAI",
            ("OPENAI_API_KEY",),
            default_model="gpt-4.1-mini",
            compat=ModelCompat(supports_store=True),
            env_base_url="OPENAI_BASE_URL",
        ),
        ProviderInfo(
            "google",
            "Google Gemini",
            ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            default_model="gemini-2.5-flash",
        ),
        ProviderInfo(
            "groq",
            "Groq",
            ("GROQ_API_KEY",),
            compat=ModelCompat(supports_developer_role=False, reasoning_field="reasoning"),
        ),
        ProviderInfo(
            "openrouter",
            "OpenRouter",
            ("OPENROUTER_API_KEY",),
            compat=ModelCompat(thinking_format="openrouter", reasoning_field="reasoning"),
        ),
        ProviderInfo(
            "deepseek",
            "DeepSeek",
            ("DEEPSEEK_API_KEY",),
            compat=ModelCompat(
                max_tokens_field="max_tokens",
                supports_developer_role=False,
                supports_reasoning_effort=False,
                reasoning_field="reasoning_content",
            ),
        ),
        ProviderInfo(
            "xai",
            "xAI",
            ("XAI_API_KEY",),
            compat=ModelCompat(supports_developer_role=False, reasoning_field="reasoning_content"),
        ),
        ProviderInfo(
            "mistral",
            "Mistral",
            ("MISTRAL_API_KEY",),
            compat=ModelCompat(
                max_tokens_field="max_tokens",
                supports_developer_role=False,
                supports_reasoning_effort=False,
            ),
        ),
        ProviderInfo(
            "cerebras",
            "Cerebras",
            ("CEREBRAS_API_KEY",),
            compat=ModelCompat(supports_developer_role=False),
        ),
        ProviderInfo("together", "Together AI", ("TOGETHER_API_KEY",)),
        ProviderInfo("fireworks", "Fireworks", ("FIREWORKS_API_KEY",)),
        ProviderInfo("local", "The local model server", keyless=True, compat=_LOCAL_COMPAT),
        ProviderInfo(
            "ollama",
            "Ollama",
            keyless=True,
            local_url="http://127.0.0.1:11434/v1",
            compat=_LOCAL_COMPAT.merged(ModelCompat(reasoning_field="reasoning"), _OPENAI_FORM),
        ),
        ProviderInfo(
            "llamacpp",
            "llama.cpp",
            keyless=True,
            local_url="http://127.0.0.1:8080/v1",
            compat=_LOCAL_COMPAT,
        ),
        ProviderInfo(
            "vllm",
            "vLLM",
            keyless=True,
            local_url="http://127.0.0.1:8000/v1",
            compat=_LOCAL_COMPAT.merged(_OPENAI_FORM),
        ),
        ProviderInfo(
            "lmstudio",
            "LM Studio",
            keyless=True,
            local_url="http://127.0.0.1:1234/v1",
            compat=_LOCAL_COMPAT.merged(_OPENAI_FORM),
        ),
    )
}
"""Every provider agentkit knows, by name. Order matters: the first three, in this order, are
the defaults picked from the environment (:func:`configured_provider`)."""


def provider_info(name: str) -> ProviderInfo | None:
    """The table row of ``name``, or ``None`` for a provider the table does not know."""
    return PROVIDERS.get(name)


def provider_label(model: Model | str) -> str:
    """The vendor's name as messages show it (``"Anthropic"``, ``"OpenAI"``...)."""
    name = model if isinstance(model, str) else model.provider
    info = PROVIDERS.get(name)
    return info.label if info is not None else (name or "The provider")


def env_var_names(provider: str) -> tuple[str, ...]:
    """The variables checked for ``provider`` (``<PROVIDER>_API_KEY`` for unknown ones)."""
    info = PROVIDERS.get(provider)
    if info is not None and info.env_keys:
        return info.env_keys
    return (provider.upper().replace("-", "_").replace(".", "_") + "_API_KEY",)


def get_env_api_key(provider: str) -> str | None:
    """The API key for ``provider`` from the environment, or ``None`` when none is set."""
    for name in env_var_names(provider):
        value = os.environ.get(name)
        if value:
            return value
    return None


def get_env_base_url(provider: str) -> str | None:
    """The provider's endpoint from the environment (``OPENAI_BASE_URL``,
    ``ANTHROPIC_BASE_URL``), without a trailing slash; ``None`` when unset."""
    info = PROVIDERS.get(provider)
    value = os.environ.get(info.env_base_url) if info is not None and info.env_base_url else None
    return value.rstrip("/") if value else None


def is_local_url(url: str) -> bool:
    """Whether ``url`` points at this machine (local servers need no key and no proxy)."""
    from urllib.parse import urlsplit

    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    return host in _LOCAL_HOSTS or host.endswith(".localhost")


def needs_api_key(model: Model) -> bool:
    """Whether requests to ``model`` need a key (keyless providers and local URLs do not)."""
    info = PROVIDERS.get(model.provider)
    return not ((info is not None and info.keyless) or is_local_url(model.base_url))


def configured_provider() -> tuple[str, str, str] | None:
    """The first provider with a default model whose key is set in the environment, as
    ``(provider, environment variable, default model id)``; ``None`` when no key is set.

    This is how the command line picks a hosted provider when no ``--model`` is given; the
    variable is returned so the choice can be announced.
    """
    for info in PROVIDERS.values():
        if info.default_model is None:
            continue
        for name in info.env_keys:
            if os.environ.get(name):
                return info.name, name, info.default_model
    return None


def local_servers() -> dict[str, str]:
    """Default base URLs of the usual local servers (all speak Chat Completions)."""
    return {info.name: info.local_url for info in PROVIDERS.values() if info.local_url}


def own_compat(model: Model) -> ModelCompat | None:
    """``model.compat`` as validated quirks (a dict assigned after the model was made is checked
    here: a misspelt key raises ``ValueError``), or ``None`` when it has none."""
    return ModelCompat.model_validate(model.compat) if model.compat else None


def provider_compat(model: Model) -> ModelCompat:
    """The table's quirks for ``model``'s provider (a local URL of an unknown provider counts
    as ``local``) with ``model.compat`` laid over them; a misspelt ``model.compat`` key raises
    ``ValueError``."""
    info = PROVIDERS.get(model.provider)
    if info is None and is_local_url(model.base_url):
        info = PROVIDERS["local"]
    base = info.compat if info is not None else ModelCompat()
    return base.merged(own_compat(model))
