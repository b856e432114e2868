"""Typed output: :class:`OutputSpec` turns an ``output_type`` into a JSON schema, validates the
answer with pydantic, and reads partial objects.

``output_type`` may be a pydantic model, a dataclass, a TypedDict or a primitive (``int``,
``list[str]``, ...). A schema whose root is not an object is wrapped as ``{"result": ...}`` on
the wire (OpenAI requires an object) and unwrapped again. The request states the schema as
:attr:`OutputSpec.output_schema` (each provider asks its API for it its own way); the final text
is validated, and a failure is sent back to the model as a user message, at most ``retries``
times. Peers: openai-agents and pydantic-ai ``output_type``.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import from_json

from .errors import OutputValidationError
from .policy import RunPolicy, RunScope
from .transcript import user_message
from .types import AssistantMessage, OutputSchema, UserMessage

DEFAULT_OUTPUT_RETRIES = 2
"""How many times a run sends validation errors back before it fails."""

RETRY_TEXT = (
    "Your answer did not match the required output schema:\n{errors}\n"
    "Reply again with only a JSON value that matches the schema."
)

class OutputSpec:
    """An ``output_type`` made ready for a run: its JSON schema, as the request states it, and
    its validator.

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
        self.output_schema = OutputSchema(name=self.name, json_schema=schema, strict=_strict(schema))
        """What each request asks for (:attr:`~agentkit.types.StreamOptions.output_schema`)."""

    @classmethod
    def of(cls, value: Any, retries: int | None = None) -> OutputSpec | None:
        """``value`` as a spec: ``None`` stays ``None``, a spec stays itself. With ``retries``,
        a spec retrying that many times (a copy, when a given spec retries otherwise)."""
        if value is None:
            return None
        if not isinstance(value, OutputSpec):
            return cls(value) if retries is None else cls(value, retries=retries)
        if retries is None or retries == value.retries:
            return value
        if retries < 0:
            raise ValueError(f"output retries must be 0 or more, got {retries}")
        spec = copy.copy(value)  # the schema and validator are the same; only the count differs
        spec.retries = retries
        return spec

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


class OutputPolicy(RunPolicy):
    """The built-in typed-output policy (``output_type=...``): the run's requests ask for the
    spec's schema (its options carry it from the start), and the final answer is validated; an invalid one goes back to the model
    with the errors, at most ``spec.retries`` times, then the run fails with
    :class:`~agentkit.errors.OutputValidationError`. A budget's summary turn
    (``run.wrapping_up``) is asked for no schema and not validated."""

    name = "output"

    def __init__(self, spec: OutputSpec) -> None:
        self.spec = spec
        self.failures = 0

    def for_run(self, run: RunScope) -> RunPolicy:
        return OutputPolicy(self.spec)

    def start(self, run: RunScope) -> None:
        """Every request of the run asks for the schema (a summary turn's options drop it)."""
        run.options = run.options.model_copy(update={"output_schema": self.spec.output_schema})

    def at_final_answer(self, run: RunScope, message: AssistantMessage) -> list[Any] | None:
        spec = self.spec
        if run.wrapping_up:
            return None
        try:
            run.result.output = spec.validate_text(message.text)
            return None
        except ValueError as exc:
            errors = str(exc)
        if self.failures < spec.retries:
            self.failures += 1
            return [spec.retry_message(errors)]
        failure = OutputValidationError(
            f"The model's output did not match {spec.name} after {spec.retries} "
            f"retr{'y' if spec.retries == 1 else 'ies'}:\n{errors}",
            errors,
        )
        run.end("error", str(failure), error=failure)
        return None


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


def _strict(node: Any) -> bool:
    """Whether every object in ``node`` lists all its properties as required and allows no
    others, so that an API may enforce the schema exactly (OpenAI's strict mode)."""
    if isinstance(node, list):
        return all(_strict(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object" and (
        node.get("additionalProperties", False) is not False
        or set(node.get("properties") or {}) != set(node.get("required") or [])
    ):
        return False
    return all(_strict(value) for value in node.values())
