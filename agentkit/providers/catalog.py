"""The model catalog: the built-in models (``models.json``, shipped as package data), the ones
an application registers, and presets for local OpenAI-compatible servers.

The registry is the one piece of global mutable state here; a lock guards it.
"""

from __future__ import annotations

import difflib
import json
import threading
from importlib import resources
from typing import Any

from ..errors import UnknownModelError
from ..types import Model, ModelCost
from .table import PROVIDERS, get_env_base_url, local_servers

LOCAL_SERVERS: dict[str, str] = local_servers()
"""Default base URLs of the usual local servers (all speak Chat Completions)."""

_LOCAL_PORTS = {int(url.rsplit(":", 1)[1].split("/")[0]): name for name, url in LOCAL_SERVERS.items()}


# Guards _models and _loaded.
_lock = threading.Lock()
_models: dict[tuple[str, str], Model] = {}
_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    text = resources.files(__package__).joinpath("models.json").read_text(encoding="utf-8")
    for entry in json.loads(text)["models"]:
        model = Model.model_validate(entry)
        _models.setdefault((model.provider, model.id), model)
    _loaded = True


def register_model(model: Model | dict[str, Any]) -> Model:
    """Add ``model`` to the catalog (replacing one with the same provider and id); return it."""
    if not isinstance(model, Model):
        model = Model.model_validate(model)
    with _lock:
        _load_builtin()
        _models[(model.provider, model.id)] = model
    return model


def get_model(provider: str, model_id: str) -> Model:
    """A copy of the catalog's ``model_id`` from ``provider``.

    Raises :class:`UnknownModelError` (an ``AgentError`` and a ``KeyError``) naming close
    matches.
    """
    with _lock:
        _load_builtin()
        model = _models.get((provider, model_id))
        if model is not None:
            return model.model_copy(deep=True)
        providers = sorted({p for p, _ in _models})
        ids = sorted(i for p, i in _models if p == provider)
    if provider not in providers:
        close = difflib.get_close_matches(provider, providers, n=3, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownModelError(
            f"Unknown provider '{provider}'{hint} Known providers: {', '.join(providers)}"
        )
    close = difflib.get_close_matches(model_id, ids, n=5, cutoff=0.4)
    hint = f" Close matches: {', '.join(close)}." if close else f" Known: {', '.join(ids)}."
    raise UnknownModelError(f"Unknown model '{model_id}' for provider '{provider}'.{hint}")


def get_models(provider: str | None = None) -> list[Model]:
    """Copies of every model in the catalog (of one provider, if given), sorted by provider, id."""
    with _lock:
        _load_builtin()
        items = sorted(_models.items())
    return [m.model_copy(deep=True) for (p, _), m in items if provider is None or p == provider]


def get_providers() -> list[str]:
    """The providers that have models in the catalog, sorted."""
    with _lock:
        _load_builtin()
        return sorted({p for p, _ in _models})


def local_model(
    base_url: str | None,
    model_id: str,
    *,
    server: str | None = None,
    name: str | None = None,
    api: str = "openai-completions",
    reasoning: bool = False,
    input: list[str] | None = None,
    context_window: int = 32768,
    max_tokens: int = 4096,
    compat: dict[str, Any] | None = None,
    provider: str = "local",
    register: bool = False,
) -> Model:
    """A model served by a local OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM Studio).

    ``base_url`` is the URL up to and including ``/v1``; ``None`` takes the default of
    ``server``. ``server`` picks the preset quirks (guessed from the usual ports when omitted).
    No API key is needed. ``register=True`` also adds it to the catalog.
    """
    if base_url is None:
        if server not in LOCAL_SERVERS:
            raise ValueError(f"give a base_url or one of the servers {sorted(LOCAL_SERVERS)}")
        base_url = LOCAL_SERVERS[server]
    if server is None:
        from urllib.parse import urlsplit

        try:
            port = urlsplit(base_url).port
        except ValueError:
            port = None
        server = _LOCAL_PORTS.get(port or 0)
    row = PROVIDERS.get(server or "") or PROVIDERS["local"]
    merged = row.compat.model_dump(exclude_none=True)
    merged.update(compat or {})
    model = Model(
        id=model_id,
        name=name or model_id,
        api=api,
        provider=provider,
        base_url=base_url.rstrip("/"),
        reasoning=reasoning,
        input=list(input or ["text"]),
        cost=ModelCost(),
        context_window=context_window,
        max_tokens=max_tokens,
        compat=merged,
    )
    if register:
        register_model(model)
    return model


def model_from_spec(spec: str) -> Model:
    """The model a ``"provider:model-id"`` string names (what ``--model`` and
    ``Agent(model="...")`` take).

    ``"provider"`` alone is that provider's default model (from the provider table); a local
    server's name (``"ollama:llama3.2"``) gives a :func:`local_model` at its default URL. Where
    the provider's SDK reads its endpoint from the environment (``OPENAI_BASE_URL``,
    ``ANTHROPIC_BASE_URL``), the model is sent there too.
    Raises :class:`UnknownModelError` (an ``AgentError`` and a ``KeyError``) naming close
    matches, or ``ValueError`` for a string that names nothing.
    """
    provider, _, model_id = spec.strip().partition(":")
    if not provider:
        raise ValueError(f"a model is named 'provider:id' (e.g. 'openai:gpt-4.1-mini'), got {spec!r}")
    info = PROVIDERS.get(provider)
    if not model_id:
        if info is None or info.default_model is None:
            raise ValueError(
                f"{spec!r} names no model: write 'provider:id' "
                f"(providers with a default: {', '.join(_providers_with_default())})"
            )
        model_id = info.default_model
    if info is not None and info.local_url is not None:
        return local_model(None, model_id, server=provider, provider=provider)
    model = get_model(provider, model_id)
    base_url = get_env_base_url(provider)
    if base_url is not None:
        model.base_url = base_url
    return model


def _providers_with_default() -> list[str]:
    return [name for name, info in PROVIDERS.items() if info.default_model]
