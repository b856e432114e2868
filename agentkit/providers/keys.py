"""Where API keys come from: the environment variable each vendor documents."""

from __future__ import annotations

import os

ENV_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
}
"""Provider name to the environment variables holding its key, in order of preference."""


def env_var_names(provider: str) -> tuple[str, ...]:
    """The variables checked for ``provider`` (``<PROVIDER>_API_KEY`` for unknown ones)."""
    known = ENV_KEYS.get(provider)
    if known:
        return known
    return (provider.upper().replace("-", "_").replace(".", "_") + "_API_KEY",)


def get_env_api_key(provider: str) -> str | None:
    """The API key for ``provider`` from the environment, or ``None`` when none is set."""
    for name in env_var_names(provider):
        value = os.environ.get(name)
        if value:
            return value
    return None
