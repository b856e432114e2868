"""Typed output: :class:`OutputSpec` turns an ``output_type`` into a JSON schema, asks each wire
API for it natively, validates the answer with pydantic, and reads partial objects.

``output_type`` may be a pydantic model, a dataclass, a TypedDict or a primitive (``int``,
``list[str]``, ...). A schema whose root is not an object is wrapped as ``{"result": ...}`` on
the wire (OpenAI requires an object) and unwrapped again. The request asks for the schema the
API's own way (see :meth:`OutputSpec.apply`); the final text is validated, and a failure is sent
back to the model as a user message, at most ``retries`` times. Peers: openai-agents and
pydantic-ai ``output_type``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import from_json

from .transcript import user_message
from .types import Model, StreamOptions, UserMessage, on_payload_before

DEFAULT_OUTPUT_RETRIES = 2
"""How many times a run sends validation errors back before it fails."""

RETRY_TEXT = (
    "Your answer did not match the required output schema:\n{errors}\n"
    "Reply again with only a JSON value that matches the schema."
)

ANTHROPIC_BETA = "structured-outputs-2025-11-13"
"""The ``anthropic-beta`` value that enables Anthropic's ``output_format``."""


class OutputSpec:
    """An ``output_type`` made ready for the wire: its JSON schema, validator and wire mappings.

    Construction raises ``TypeError`` when the type cannot be described as a JSON schema, so a
    bad ``output_type`` fails where it is given, never in the middle of a run.
    """

    def __init__(
        self, output_type: Any, *, name: str | None = None, retries: int = DEFAULT_OUTPUT_RETRIES
    ) -> None:
        if retries < 0:
            raise ValueError(f"output retries must be 0 or more, got {retries}")
        self.type = output_type
        self.retries = retries
        try:
            self._adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            schema = self._adapter.json_schema()
        except Exception as exc:
            raise TypeError(
                f"output_type {output_type!r} cannot be described as a JSON schema: {exc}"
            ) from exc
        self.wrapped = schema.get("type") != "object"
        if self.wrapped:
            defs = schema.pop("$defs", None)
            schema = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
            if defs:
                schema["$defs"] = defs
        self.schema: dict[str, Any] = schema
        """The JSON schema the model is asked for (an object; see ``wrapped``)."""
        self.name = name or _schema_name(output_type)
        self.strict_schema, self.strict = strict_schema(schema)

    @classmethod
    def of(cls, value: Any) -> OutputSpec | None:
        """``value`` as a spec: ``None`` stays ``None``, a spec stays itself."""
        if value is None or isinstance(value, OutputSpec):
            return value
        return cls(value)

    # --- validation ----------------------------------------------------------------------------

    def validate_text(self, text: str) -> Any:
        """The validated output in ``text``; raises ``ValueError`` with readable errors."""
        body = _strip_fence(text)
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            raise ValueError(f"  - not valid JSON: {exc}") from None
        if self.wrapped:
            if not isinstance(data, dict) or "result" not in data:
                raise ValueError('  - root: must be an object with the key "result"')
            data = data["result"]
        try:
            return self._adapter.validate_python(data)
        except ValidationError as exc:
            lines = []
            for err in exc.errors():
                path = ".".join(str(p) for p in err["loc"]) or "root"
                lines.append(f"  - {path}: {err['msg']}")
            raise ValueError("\n".join(lines)) from None

    def retry_message(self, errors: str) -> UserMessage:
        """The message that sends validation ``errors`` back to the model."""
        return user_message(RETRY_TEXT.format(errors=errors))

    def partial(self, text: str) -> Any:
        """The object so far in a streaming ``text`` (not validated), or ``None`` if none yet."""
        body = _strip_fence(text, partial=True)
        if not body:
            return None
        try:
            data = from_json(body, allow_partial=True)
        except ValueError:
            return None
        if self.wrapped:
            return data.get("result") if isinstance(data, dict) else None
        return data

    # --- the wire ------------------------------------------------------------------------------

    def apply(self, payload: dict[str, Any], model: Model) -> dict[str, Any]:
        """Ask for the schema in ``payload`` the way ``model``'s wire API does.

        llama.cpp (provider ``local``): the top-level ``json_schema`` grammar. Chat
        Completions: ``response_format`` json_schema (``strict`` when the schema allows it).
        Responses: ``text.format``. Anthropic: ``output_format`` (with the beta header from
        :meth:`headers`). Gemini: ``responseMimeType`` and ``responseSchema``.
        """
        api = model.api
        if model.provider == "local":
            payload["json_schema"] = self.schema
        elif api == "openai-completions":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": self.name,
                    "schema": self.strict_schema,
                    "strict": self.strict,
                },
            }
        elif api == "openai-responses":
            text = dict(payload.get("text") or {})
            text["format"] = {
                "type": "json_schema",
                "name": self.name,
                "schema": self.strict_schema,
                "strict": self.strict,
            }
            payload["text"] = text
        elif api == "anthropic-messages":
            payload["output_format"] = {"type": "json_schema", "schema": self.strict_schema}
        elif api == "google-generative-ai":
            config = dict(payload.get("generationConfig") or {})
            config["responseMimeType"] = "application/json"
            config["responseSchema"] = openapi_schema(self.schema)
            payload["generationConfig"] = config
        return payload

    def request_options(self, options: StreamOptions, model: Model) -> dict[str, Any]:
        """The request-option changes that ask for this output: an ``on_payload`` applying
        :meth:`apply` before the caller's own ``on_payload``, and :meth:`headers`."""
        update: dict[str, Any] = {"on_payload": on_payload_before(options, self.apply)}
        extra = self.headers(model)
        if extra:
            headers = dict(options.headers or {})
            for name, value in extra.items():
                present = headers.get(name)
                headers[name] = f"{present},{value}" if present else value
            update["headers"] = headers
        return update

    def headers(self, model: Model) -> dict[str, str]:
        """Extra request headers the API needs for structured output (Anthropic's beta)."""
        if model.api == "anthropic-messages" and model.provider != "local":
            return {"anthropic-beta": ANTHROPIC_BETA}
        return {}


def _schema_name(output_type: Any) -> str:
    name = getattr(output_type, "__name__", None) or "output"
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(name))
    return cleaned[:64] or "output"


def _strip_fence(text: str, partial: bool = False) -> str:
    """``text`` without a surrounding Markdown code fence (small models add one)."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
        if body.rstrip().endswith("```"):
            body = body.rstrip()[:-3]
        elif not partial:
            return body.strip()
    return body.strip()


def strict_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``schema`` with ``additionalProperties: false`` on every object, and whether OpenAI's
    strict mode can take it (strict mode needs every property required)."""
    strict = True

    def visit(node: Any) -> Any:
        nonlocal strict
        if isinstance(node, list):
            return [visit(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {k: visit(v) for k, v in node.items()}
        if out.get("type") == "object":
            props = out.get("properties") or {}
            out.setdefault("additionalProperties", False)
            if out["additionalProperties"] is not False or set(props) != set(
                out.get("required") or []
            ):
                strict = False
        return out

    converted = visit(schema)
    return converted, strict


_OPENAPI_KEYS = frozenset(
    {
        "type", "format", "description", "nullable", "enum", "items", "properties", "required",
        "minItems", "maxItems", "minimum", "maximum", "anyOf", "propertyOrdering",
    }
)


def openapi_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` in the OpenAPI subset Gemini's ``responseSchema`` takes: ``$ref`` inlined,
    ``["x", "null"]`` and ``anyOf [x, null]`` as ``nullable``, ``const`` as a one-value enum,
    unsupported keys dropped."""
    defs = schema.get("$defs") or {}

    def convert(node: Any, depth: int = 0) -> Any:
        if not isinstance(node, dict) or depth > 32:
            return {}
        if "$ref" in node:
            target = defs.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
            return convert({**target, **{k: v for k, v in node.items() if k != "$ref"}}, depth + 1)
        node = dict(node)
        if "const" in node:
            node["enum"] = [node.pop("const")]
        variants = node.get("anyOf")
        if isinstance(variants, list):
            rest = [v for v in variants if v != {"type": "null"}]
            if len(rest) < len(variants):
                node["nullable"] = True
            if len(rest) == 1:
                del node["anyOf"]
                node = {**convert(rest[0], depth + 1), **{k: v for k, v in node.items()}}
            else:
                node["anyOf"] = rest
        types = node.get("type")
        if isinstance(types, list):
            kinds = [t for t in types if t != "null"]
            if len(kinds) < len(types):
                node["nullable"] = True
            node["type"] = kinds[0] if kinds else "string"
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key not in _OPENAPI_KEYS:
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = {k: convert(v, depth + 1) for k, v in value.items()}
            elif key == "items":
                out[key] = convert(value, depth + 1)
            elif key == "anyOf" and isinstance(value, list):
                out[key] = [convert(v, depth + 1) for v in value]
            elif key == "type" and isinstance(value, str):
                out[key] = value.upper()
            else:
                out[key] = value
        return out

    return convert(schema)
