"""What the wire modules spell alike: the portable tool choice read into its parts, a schema
closed for the APIs that enforce one, and llama.cpp's own structured-output field.

Each ``providers/<api>.py`` spells :attr:`~agentkit.types.StreamOptions.tool_choice` and
:attr:`~agentkit.types.StreamOptions.output_schema` in its own request body, with these helpers.
"""

from __future__ import annotations

from typing import Any

from ..types import Model, OutputSchema

LOCAL_PROVIDER = "local"
"""The provider of the embedded llama.cpp server, which takes a schema its own way whatever
wire API it speaks."""


LLAMA_CPP_OVERFLOW = (
    r"exceed_context_size_error",
    # "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    r"exceeds the available context size",
)
"""How llama.cpp's server (the embedded model's) reports a prompt over its ``--ctx-size``, in
whichever wire API it speaks: HTTP 400, type ``exceed_context_size_error``."""


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
    """Ask the embedded llama.cpp server for ``schema`` with its top-level ``json_schema`` field
    (which it compiles to a grammar), whatever API the model speaks; return whether ``model``
    is that server. Other models take the schema their API's way."""
    if model.provider != LOCAL_PROVIDER:
        return False
    payload["json_schema"] = schema.json_schema
    return True
