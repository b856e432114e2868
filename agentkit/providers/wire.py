"""What the wire modules spell alike: the portable tool choice read into its parts, a schema
closed for the APIs that enforce one, llama.cpp's own structured-output field, and what asks for
typed output where a server has no native form (:data:`OUTPUT_TOOL`,
:data:`PROMPTED_OUTPUT_TEXT`; ``ModelCompat.structured_output`` picks the form).

Each ``providers/<api>.py`` spells :attr:`~agentkit.types.StreamOptions.tool_choice` and
:attr:`~agentkit.types.StreamOptions.output_schema` in its own request body, with these helpers.
"""

from __future__ import annotations

from typing import Any

from ..types import Model, OutputSchema
from .table import provider_compat

LOCAL_PROVIDER = "local"
"""The provider of the embedded llama.cpp server, which takes a schema its own way whatever
wire API it speaks."""


def named_tool(choice: Any) -> Any:
    """The tool a portable ``{"name": "<tool>"}`` choice names, else ``None``."""
    if isinstance(choice, dict) and set(choice) == {"name"}:
        return choice["name"]
    return None


def portable_mode(choice: Any) -> Any:
    """A mode with ``"any"`` read as its synonym ``"required"``; a dict (the API's own value)
    as it is."""
    return "required" if choice == "any" else choice


def closed_schema(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that does not say
    otherwise: OpenAI's strict mode and Anthropic's ``output_format`` want objects closed."""
    if isinstance(schema, list):
        return [closed_schema(node) for node in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: closed_schema(value) for key, value in schema.items()}
    if out.get("type") == "object":
        out.setdefault("additionalProperties", False)
    return out


def llama_cpp_schema(payload: dict[str, Any], model: Model, schema: OutputSchema) -> bool:
    """Ask a llama.cpp server (the embedded one, or any whose quirks say
    ``structured_output="json_schema"``) for ``schema`` with its top-level ``json_schema`` field
    (which it compiles to a grammar), whatever API the model speaks; return whether it did.
    Other models take the schema their API's way."""
    if output_form(model) != "json_schema":
        return False
    payload["json_schema"] = schema.json_schema
    return True


def output_form(model: Model) -> str | None:
    """How ``model``'s server is asked for typed output (``ModelCompat.structured_output``,
    from the provider table and ``model.compat``); ``None``: the API's own way."""
    return provider_compat(model).structured_output


OUTPUT_TOOL = "final_result"
"""The tool a server without native typed output is asked to call with the answer as its
arguments (``structured_output="tool"``); its call comes back as the answer's text."""

OUTPUT_TOOL_DESCRIPTION = "Give the final answer. Call this once, with the whole answer."

PROMPTED_OUTPUT_TEXT = (
    "Answer with only a JSON value (no code fence, no other text) that matches this JSON "
    "schema:\n{schema}"
)
"""The instructions that ask for typed output where the server has no way to (``prompted``)."""
