"""What the samples share: the choice of model.

Every sample runs on :class:`agentkit.testing.ScriptedModel` by default: offline, no API key,
the same answer every time (that is what the tests rely on). To run one on a real model, pass
``--model PROVIDER:MODEL_ID`` (e.g. ``--model openai:gpt-4o-mini``) or set
``AGENTKIT_MODEL=PROVIDER:MODEL_ID``; ``local`` means the embedded offline model (the ``local``
extra), ``ollama:ID`` (or ``llamacpp``, ``vllm``, ``lmstudio``) a local server on its usual port.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import Any

from agentkit import Model
from agentkit.loop import StreamFn
from agentkit.testing import Reply, Script, ScriptedModel
from agentkit.types import Context, StreamOptions

MODEL_ENV = "AGENTKIT_MODEL"
DELAY_ENV = "AGENTKIT_SCRIPTED_DELAY"


def model_spec(cli_value: str | None = None) -> str | None:
    """The real model asked for (``--model`` wins over ``AGENTKIT_MODEL``), or ``None``."""
    return cli_value or os.environ.get(MODEL_ENV) or None


def real_model(spec: str) -> tuple[Model, StreamFn | None]:
    """Resolve a ``--model`` value to a model; the stream function ``None`` means the default
    one (``agentkit.providers.stream_simple``), which speaks to every provider.

    ``local`` is the embedded model; ``ollama:ID``, ``llamacpp:ID``, ``vllm:ID`` and
    ``lmstudio:ID`` are local servers on their usual ports; anything else is looked up in the
    catalog as ``provider:model_id`` (its key comes from the provider's environment variable).
    """
    provider, _, model_id = spec.partition(":")
    try:
        if spec == "local":
            from agentkit.local import get_local_model

            return get_local_model(), None
        from agentkit.providers import LOCAL_SERVERS, get_model, local_model
    except ImportError as exc:
        raise SystemExit(
            f"--model {spec} needs a module this install lacks ({exc}); "
            "run without --model to use the scripted model"
        ) from None
    if not model_id:
        raise SystemExit(f"--model takes PROVIDER:MODEL_ID or 'local', not {spec!r}")
    if provider in LOCAL_SERVERS:
        return local_model(None, model_id, server=provider, provider=provider), None
    try:
        return get_model(provider, model_id), None
    except KeyError as exc:  # UnknownModelError: its message names the close matches
        raise SystemExit(f"--model {spec}: {exc.args[0] if exc.args else exc}") from None


def choose_model(
    script: Sequence[Script], spec: str | None = None, delay: float | None = None
) -> tuple[Model, StreamFn | None]:
    """The sample's model and stream function: scripted unless a real model is asked for.

    ``delay`` (seconds between streamed chunks) defaults to ``AGENTKIT_SCRIPTED_DELAY`` or 0.
    """
    spec = model_spec(spec)
    if spec:
        return real_model(spec)
    scripted = ScriptedModel(script, delay=scripted_delay(delay))
    return scripted.model, scripted


def sample_parser(description: str | None) -> argparse.ArgumentParser:
    """A sample's command line: ``--model`` (a real model instead of the scripted one); the
    sample adds its own arguments."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", help="PROVIDER:MODEL_ID or 'local' (default: scripted)")
    return parser


def model_from_command_line(
    script: Sequence[Script],
    argv: Sequence[str] | None,
    description: str | None,
    delay: float | None = None,
) -> tuple[Model, StreamFn | None]:
    """For a sample whose only argument is ``--model``: parse ``argv`` and choose the model
    (:func:`choose_model`)."""
    args = sample_parser(description).parse_args(argv)
    return choose_model(script, args.model, delay)


def scripted_delay(default: float | None = None) -> float:
    """Seconds between the scripted model's chunks: ``AGENTKIT_SCRIPTED_DELAY`` or ``default``."""
    value = os.environ.get(DELAY_ENV)
    return float(value) if value else (default or 0.0)


def rule_model(answer: Callable[[list[Any]], Reply | str], delay: float = 0.0) -> StreamFn:
    """A scripted model that never runs out: each request gets ``answer(messages)``.

    Servers and workers run many agents on one model, so their demo model answers from the
    request (say, call a tool after a user message, sum up after a tool result) instead of
    playing one fixed script.
    """

    def stream_fn(model: Model, context: Context, options: StreamOptions | None = None) -> Any:
        scripted = ScriptedModel([answer(list(context.messages))], model=model, delay=delay)
        return scripted(model, context, options)

    return stream_fn


def last_text(messages: Sequence[Any]) -> str:
    """The text of the last message of ``messages`` (tool results and replies alike)."""
    for message in reversed(messages):
        content = getattr(message, "content", None)
        if isinstance(content, str):
            return content
        if content:
            return "".join(getattr(block, "text", "") for block in content)
    return ""


def exit_status(messages: Sequence[Any], *, abort_expected: bool = False) -> int:
    """A sample's exit status: 1 when its run ended in an error (or was aborted, unless the
    sample aborts it on purpose), else 0."""
    failed = ("error",) if abort_expected else ("error", "aborted")
    last = messages[-1] if messages else None
    return 1 if getattr(last, "stop_reason", None) in failed else 0
