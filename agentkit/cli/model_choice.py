"""Which model the command runs: ``--model``/``--base-url``, else a configured provider, else
the embedded local model (kept running between runs, its prompt prefix cached)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from ..errors import CliError
from ..tools import AgentTool
from ..types import Model
from .console import Console, Spinner, json_line


def choose_model(
    spec: str | None, base_url: str | None, io: Console, *, ctx_size: int | None = None
) -> Model:
    """The model for ``--model``/``--base-url``, or the default (a configured provider, else
    the embedded local model); the command says which default it picked and why."""
    if spec in (None, "") and base_url is None:
        from ..providers.table import configured_provider

        configured = configured_provider()  # the provider table's order: the first key set wins
        if configured is not None:
            provider, env, model_id = configured
            io.err(
                f"agentkit: {env} is set; using {provider}:{model_id} (pick another "
                "with --model, or --model local for the embedded offline model)."
            )
            return _catalog_model(f"{provider}:{model_id}")
        io.err("agentkit: no provider API key found; using the embedded local model (offline).")
        return _local_model(None, ctx_size, io)
    provider, _, model_id = (spec or "openai-compatible:default").partition(":")
    if provider == "local" and base_url is None:
        return _local_model(model_id or None, ctx_size, io)
    if base_url is not None:
        if model_id:
            try:
                known = _catalog_model(f"{provider}:{model_id}")
                return known.model_copy(update={"base_url": base_url.rstrip("/")})
            except CliError:
                pass  # an OpenAI-compatible server the catalog does not know
        from ..providers import local_model

        return local_model(base_url, model_id or "default", provider=provider)
    return _catalog_model(spec or "")


def _catalog_model(spec: str) -> Model:
    """The model ``spec`` names, read as ``Agent(model=...)`` reads it (the provider table's
    default for a bare provider, a local server's preset for ``ollama:llama3.2``...)."""
    try:
        from ..providers import model_from_spec
    except ImportError as exc:  # pragma: no cover - the providers ship with the package
        raise CliError(f"the providers are unavailable: {exc}") from None
    try:
        return model_from_spec(spec)
    except (KeyError, ValueError, LookupError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        raise CliError(str(message)) from None


def _local_model(path: str | None, ctx_size: int | None, io: Console) -> Model:
    """The embedded model, its server kept between runs unless ``--no-keep-server`` (or
    ``AGENTKIT_KEEP_SERVER=0``) says otherwise; the server is left in ``io.local_server``."""
    from .. import local

    spinner = Spinner(io, "starting the local model")

    def starting() -> None:
        io.err("agentkit: starting the local model...")
        if io.json:
            io.out(json_line({"type": "progress", "phase": "model_start"}))
        spinner.start()

    options: dict[str, Any] = {}
    if ctx_size is not None:
        options["n_ctx"] = ctx_size
    try:
        # The first run joins and checks the weights (a few seconds); later runs only look.
        with Spinner(io, "preparing the model's weights", delay=0.5):
            options["model_path"] = local_model_file(path or "")
        server: local.LocalModel
        keep = io.keep_server
        if os.name != "posix":  # the kept server needs fcntl locks and sessions
            keep = False
        elif keep is None:
            from ..local.kept import keep_server_default

            keep = keep_server_default()
        if keep:
            from ..local.kept import kept_server

            server = kept_server(on_start=starting, **options)
            if server.reused:
                io.err(f"agentkit: using the local model server kept from an earlier run "
                       f"(pid {server.pid})")  # fmt: skip
        else:
            starting()
            server = local.get_local_server(**options)
    except local.LocalModelError as exc:
        raise CliError(str(exc)) from None
    finally:
        spinner.stop()
    io.local_server = server
    return server.model


def local_model_file(name: str, *, join: bool = True) -> str:
    """The GGUF file ``--model local:NAME`` names: an embedded model's verified weights (joined
    on first use; ``join=False``: where they are or would be joined), the default embedded
    model's for an empty NAME, else NAME itself, a GGUF file of the user's own, loaded as it
    is."""
    from .. import local

    if not name:
        return str(local.prepare_weights())  # the default embedded model's
    weights = local.EMBEDDED_MODELS.get(name)
    if weights is None:
        if not os.path.isfile(name):
            names = ", ".join(local.EMBEDDED_MODELS)
            raise local.LocalModelError(
                f"{name!r} is neither an embedded model ({names}) nor a GGUF file"
            )
        return name
    if not join:
        from ..local.weights import cache_dir

        return str(cache_dir() / weights.filename)
    return str(local.prepare_weights(weights=weights))


PREFIX_FORMAT = "tools declared in the system text, v1"
"""Part of the saved prefix's key: how the request lays out the prompt (see agentkit.local.server)."""


class PrefixCache:
    """The embedded model's saved KV cache for this agent's fixed prompt prefix (system prompt
    and tool declarations): restored before the first request, saved after the first run, so
    later runs do not read the prefix again."""

    def __init__(self, server: Any, system_prompt: str, tools: Sequence[AgentTool]) -> None:
        self.server = server
        declared = [[t.name, t.description, t.parameters] for t in tools]
        self.key = server.prefix_key(
            system_prompt, json.dumps(declared, sort_keys=True, default=str), PREFIX_FORMAT
        )
        self.saved = server.has_saved_prefix(self.key)

    def restore(self) -> None:
        if self.saved:
            self.saved = self.server.restore_prefix(self.key)

    def save(self) -> None:
        if not self.saved:
            self.saved = self.server.save_prefix(self.key)
