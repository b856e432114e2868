"""Tools: :class:`AgentTool`, the :func:`tool` decorator that builds one from a typed function,
the argument validation every call goes through before it runs, and :class:`RunContext`.

Validation follows the reference exactly: a deep copy of the arguments, optional ``null`` values
dropped where the schema rejects null, values coerced to the schema's types, then a JSON Schema
check whose failure text (``Validation failed for tool "<name>": ...``) is what the model reads.

A ``@tool`` function that has a parameter annotated ``RunContext`` (or ``RunContext[MyDeps]``)
receives one: the run's ``deps`` (``Agent(deps=...)`` or ``prompt(..., deps=...)``), the call's
id, the tool's name, how often it was retried and its abort signal. That parameter never
appears in the schema the model sees. Peers: pydantic-ai ``RunContext`` and ``ModelRetry``.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_origin, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from .abort import AbortSignal
from .errors import AgentError, ToolArgumentsError
from .types import (
    AgentTool,
    AgentToolResult,
    ExecutionMode,
    ImageContent,
    OnUpdate,
    TextContent,
    Tool,
    ToolCall,
    ToolExecute,
    to_tool_declaration,
)

if TYPE_CHECKING:
    from jsonschema import ValidationError as ValidationErrorType

__all__ = [
    "AgentTool",
    "AgentToolResult",
    "ExecutionMode",
    "OnUpdate",
    "RunContext",
    "ToolExecute",
    "current_run_context",
    "error_result",
    "to_tool_declaration",
    "to_tool_result",
    "tool",
    "validate_tool_arguments",
]


DepsT = TypeVar("DepsT")


@dataclass(frozen=True)
class RunContext(Generic[DepsT]):
    """What a tool may ask for besides its arguments: the run's ``deps`` and the call itself."""

    deps: DepsT
    tool_call_id: str
    tool_name: str
    retry: int
    """How many times this tool already asked for a retry in this run."""
    signal: AbortSignal


# The RunContext of the tool call running in this context (each call runs in a copy of its own).
_current: ContextVar[RunContext[Any] | None] = ContextVar("agentkit_run_context", default=None)


def current_run_context() -> RunContext[Any]:
    """The :class:`RunContext` of the tool call running on this thread."""
    context = _current.get()
    if context is None:
        raise AgentError("no tool call is running on this thread (RunContext is only for tools)")
    return context


def enter_run_context(context: RunContext[Any]) -> Token[RunContext[Any] | None]:
    """Make ``context`` the running call's :class:`RunContext`; return the token that undoes it."""
    return _current.set(context)


def leave_run_context(token: Token[RunContext[Any] | None]) -> None:
    """Undo :func:`enter_run_context`."""
    _current.reset(token)


def error_result(message: str, *, terminate: bool = False) -> AgentToolResult:
    """The reference's error result: the message as text, empty details, ``is_error`` set."""
    return AgentToolResult(
        content=[TextContent(text=message)], details={}, is_error=True, terminate=terminate
    )


# --- argument validation ----------------------------------------------------------------------


def validate_tool_arguments(tool: AgentTool | Tool, call: ToolCall) -> Any:
    """Return the coerced copy of ``call.arguments``, or raise :class:`ToolArgumentsError`.

    The error text lists each problem as ``  - <path>: <message>`` and ends with the received
    arguments as 2-space-indented JSON, which is what the model sees in the tool result.
    """
    schema = tool.parameters
    original = call.arguments
    args = _drop_rejected_nulls(copy.deepcopy(original), schema)
    coerced = _coerce(args, schema, schema)
    if isinstance(coerced, dict) and _surely_valid(coerced, schema):
        return coerced
    validator = _validator(schema)
    if not isinstance(coerced, dict):
        # The reference's edge for non-object schemas: never throw, fall back to the original.
        return coerced if validator.is_valid(coerced) else original
    errors = sorted(validator.iter_errors(coerced), key=lambda e: [str(p) for p in e.path])
    if not errors:
        return coerced
    lines = [f"  - {_error_path(e)}: {_error_message(e)}" for e in errors]
    received = json.dumps(original, indent=2, ensure_ascii=False, default=str)
    raise ToolArgumentsError(
        f'Validation failed for tool "{tool.name}":\n'
        + "\n".join(lines)
        + f"\n\nReceived arguments:\n{received}"
    )


_PLAIN_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items"}
    | {"title", "description", "default", "examples"}
)
"""The keywords :func:`_surely_valid` understands (the last four only annotate)."""

_PLAIN_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}
"""Type checks that agree with jsonschema's for every draft (a float never counts as an
integer here; jsonschema decides those)."""


def _surely_valid(value: Any, schema: Any) -> bool:
    """Whether ``value`` is certainly valid against ``schema``, for plain schemas only.

    ``True`` only when every (sub)schema that applies uses nothing but :data:`_PLAIN_KEYWORDS`
    and the value passes; anything else (other keywords, ``$ref``, ``$schema``, an invalid
    value) is ``False`` and jsonschema decides. Valid calls to ordinary tools then never load
    jsonschema (about 3 MB of memory); its verdicts and messages are unchanged.
    """
    if not isinstance(schema, dict) or not _PLAIN_KEYWORDS.issuperset(schema):
        return False
    kind = schema.get("type")
    if kind is not None and not _has_plain_type(value, kind):
        return False
    if isinstance(value, dict):
        return _object_surely_valid(value, schema)
    if isinstance(value, list) and "items" in schema:
        return all(_surely_valid(item, schema["items"]) for item in value)
    return True


def _has_plain_type(value: Any, kind: Any) -> bool:
    """Whether ``kind`` (a ``type`` keyword) names only :data:`_PLAIN_TYPES` and ``value`` is
    of one of them."""
    kinds = [kind] if isinstance(kind, str) else kind
    if not isinstance(kinds, list) or not all(
        isinstance(k, str) and k in _PLAIN_TYPES for k in kinds
    ):
        return False
    return any(_PLAIN_TYPES[k](value) for k in kinds)


def _object_surely_valid(value: dict[str, Any], schema: dict[str, Any]) -> bool:
    """:func:`_surely_valid` for an object: its required keys, properties and extra keys."""
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or not isinstance(extra, bool):
        return False
    if any(not isinstance(r, str) or r not in value for r in required):
        return False
    for key, item in value.items():
        if key in props:
            if not _surely_valid(item, props[key]):
                return False
        elif not extra:
            return False
    return True


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    """Follow a local ``$ref`` (``#/$defs/X``) so coercion sees the real schema."""
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 32:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return schema
        target: Any = root
        for part in ref[2:].split("/"):
            if not isinstance(target, dict) or part not in target:
                return schema
            target = target[part]
        schema, seen = target, seen + 1
    return schema


def _schema_types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def _accepts_null(schema: Any, root: dict[str, Any]) -> bool:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or schema == {}:
        return True
    types = _schema_types(schema)
    if types:
        return "null" in types
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return any(_accepts_null(s, root) for s in schema[key])
    if "const" in schema:
        return schema["const"] is None
    if isinstance(schema.get("enum"), list):
        return None in schema["enum"]
    return True


def _drop_rejected_nulls(args: Any, schema: dict[str, Any]) -> Any:
    """Drop optional properties whose value is ``None`` where their schema rejects null."""
    if not isinstance(args, dict) or not isinstance(schema, dict):
        return args
    props = schema.get("properties")
    if not isinstance(props, dict):
        return args
    required = set(schema.get("required") or [])
    for key in [k for k, v in args.items() if v is None]:
        if key in props and key not in required and not _accepts_null(props[key], schema):
            del args[key]
    return args


_NUMBER_RE = re.compile(r"^\s*-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")


def _coerce_scalar(value: Any, target: str) -> Any:
    """Coerce ``value`` to the JSON type ``target`` the way the reference does, or return it."""
    if target == "number" or target == "integer":
        return _to_number(value, integer=target == "integer")
    if target == "boolean":
        return _to_boolean(value)
    if target == "string":
        return _to_string(value)
    if target == "null":
        return None if value in ("", 0, False) and value is not True else value
    return value


def _to_number(value: Any, *, integer: bool) -> Any:
    """``true``/``false``/``None`` as 1/0/0, a numeric string as its number; else ``value``.
    A string like ``"2.0"`` becomes ``2`` for an integer and stays a float for a number."""
    if isinstance(value, bool):
        return 1 if value else 0
    if value is None:
        return 0
    if isinstance(value, str) and _NUMBER_RE.match(value):
        number = float(value)
        if integer:
            return int(number) if number.is_integer() else value
        return int(number) if number.is_integer() and "." not in value else number
    return value


def _to_boolean(value: Any) -> Any:
    """``None``, ``"true"``/``"false"`` and the numbers 0 and 1 as booleans; else ``value``."""
    if value is None:
        return False
    if value in ("true", "false"):
        return value == "true"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value in (0, 1):
        return value == 1
    return value


def _to_string(value: Any) -> Any:
    """``None`` as ``""``, booleans and numbers as JavaScript would print them; else ``value``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _js_number_text(value)
    return value


def _js_number_text(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def _matches_type(value: Any, target: str) -> bool:
    if target == "null":
        return value is None
    if target == "boolean":
        return isinstance(value, bool)
    if target == "integer":
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            or (isinstance(value, float) and value.is_integer())
        )
    if target == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if target == "string":
        return isinstance(value, str)
    if target == "array":
        return isinstance(value, list)
    if target == "object":
        return isinstance(value, dict)
    return False


def _coerce(value: Any, schema: Any, root: dict[str, Any]) -> Any:
    """Coerce ``value`` (already a private copy) towards ``schema``, recursing into containers."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return value
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list) and members:
            return _coerce_union(value, members, root)
    types = _schema_types(schema)
    if types and not any(_matches_type(value, t) for t in types):
        for t in types:
            coerced = _coerce_scalar(value, t)
            if _matches_type(coerced, t):
                value = coerced
                break
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            for key, sub in props.items():
                if key in value:
                    value[key] = _coerce(value[key], sub, root)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                value[i] = _coerce(item, items, root)
    return value


def _coerce_union(value: Any, members: list[Any], root: dict[str, Any]) -> Any:
    """Pick the first union member that validates the value (as is, then after coercion)."""
    for member in members:
        if _is_valid(value, member, root):
            return value
    for member in members:
        candidate = _coerce(copy.deepcopy(value), member, root)
        if _is_valid(candidate, member, root):
            return candidate
    return value


def _is_valid(value: Any, schema: Any, root: dict[str, Any]) -> bool:
    if not isinstance(schema, dict):
        return True
    full = dict(schema)
    for defs in ("$defs", "definitions"):
        if defs in root and defs not in full:
            full[defs] = root[defs]
    return bool(_validator(full).is_valid(value))


def _validator(schema: dict[str, Any]) -> Any:
    """A JSON Schema validator for ``schema``, of the draft the schema names.

    jsonschema is imported on first use: it costs a noticeable share of ``import agentkit``,
    and a program that never validates a tool call does not need it.
    """
    from jsonschema import validators

    return validators.validator_for(schema)(schema)


def _error_path(error: ValidationErrorType) -> str:
    parts = [str(p) for p in error.absolute_path]
    if error.validator == "required":
        match = re.search(r"'(.+?)' is a required property", error.message)
        if match:
            parts.append(match.group(1))
    return ".".join(parts) if parts else "root"


def _error_message(error: ValidationErrorType) -> str:
    """An error message in the reference's (AJV's) words."""
    kind, arg = error.validator, error.validator_value
    if kind == "type":
        return f"must be {','.join(arg) if isinstance(arg, list) else arg}"
    if kind == "required":
        match = re.search(r"'(.+?)' is a required property", error.message)
        return f"must have required property '{match.group(1) if match else arg}'"
    simple = {
        "enum": "must be equal to one of the allowed values",
        "const": "must be equal to constant",
        "additionalProperties": "must NOT have additional properties",
        "uniqueItems": "must NOT have duplicate items",
        "anyOf": "must match a schema in anyOf",
        "oneOf": "must match exactly one schema in oneOf",
        "not": "must NOT be valid",
    }
    if kind in simple:
        return simple[kind]
    bounds = {
        "minimum": ">=",
        "maximum": "<=",
        "exclusiveMinimum": ">",
        "exclusiveMaximum": "<",
    }
    if kind in bounds:
        return f"must be {bounds[kind]} {arg}"
    sizes = {
        "minLength": ("fewer", "characters"),
        "maxLength": ("more", "characters"),
        "minItems": ("fewer", "items"),
        "maxItems": ("more", "items"),
        "minProperties": ("fewer", "properties"),
        "maxProperties": ("more", "properties"),
    }
    if kind in sizes:
        word, unit = sizes[kind]
        return f"must NOT have {word} than {arg} {unit}"
    if kind == "pattern":
        return f'must match pattern "{arg}"'
    if kind == "format":
        return f'must match format "{arg}"'
    if kind == "multipleOf":
        return f"must be multiple of {arg}"
    return str(error.message)


# --- @tool ------------------------------------------------------------------------------------

INJECTED_PARAMETERS = ("signal", "on_update", "tool_call_id")
"""Parameters of a ``@tool`` function that agentkit fills in instead of the model."""


@overload
def tool(fn: Callable[..., Any], /) -> AgentTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    label: str | None = None,
    description: str | None = None,
    execution_mode: ExecutionMode | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
    max_retries: int = 1,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], AgentTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    label: str | None = None,
    description: str | None = None,
    execution_mode: ExecutionMode | None = None,
    idempotent: bool = False,
    timeout: float | None = None,
    max_retries: int = 1,
    requires_approval: bool = False,
) -> AgentTool | Callable[[Callable[..., Any]], AgentTool]:
    """Turn a typed function into an :class:`AgentTool`.

    The JSON Schema comes from the signature (through pydantic), the descriptions from the
    docstring (Google, NumPy or reST style). Parameters named ``signal``, ``on_update`` or
    ``tool_call_id`` are injected, and so is one annotated :class:`~agentkit.RunContext` (the
    run's ``deps``); none of them is in the schema. ``timeout``, ``max_retries``,
    ``requires_approval`` and ``idempotent`` are the :class:`AgentTool` controls. A ``str``
    return becomes text, an :class:`AgentToolResult` is used as is, anything else is serialised
    to JSON; raising makes an error result. ``async def`` functions work too: each call runs its
    own event loop on the tool's thread.
    """

    def build(func: Callable[..., Any]) -> AgentTool:
        made = _tool_from_function(func, name, label, description, execution_mode)
        made.timeout, made.max_retries = timeout, max_retries
        made.requires_approval, made.idempotent = requires_approval, idempotent
        made.__post_init__()
        return made

    if fn is not None:
        return build(fn)
    return build


def _tool_from_function(
    func: Callable[..., Any],
    name: str | None,
    label: str | None,
    description: str | None,
    execution_mode: ExecutionMode | None,
) -> AgentTool:
    summary, param_docs = parse_docstring(inspect.getdoc(func) or "")
    signature = inspect.signature(func)
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise TypeError(
            f"@tool could not resolve the type hints of {func.__name__}: {exc} "
            "(import every type the signature names at module level)"
        ) from exc
    fields: dict[str, Any] = {}
    injected: list[str] = []
    context_param: str | None = None
    for pname, param in signature.parameters.items():
        if pname in INJECTED_PARAMETERS:
            injected.append(pname)
            continue
        if _is_run_context(hints.get(pname)):
            context_param = pname
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"@tool cannot describe *args or **kwargs ({func.__name__})")
        annotation = hints.get(pname, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        doc = param_docs.get(pname)
        # Only a docstring description is set here, so one given through Annotated is kept.
        field = Field(default, description=doc) if doc else Field(default)
        fields[pname] = (annotation, field)
    tool_name = name or func.__name__
    args_model = _arguments_model(tool_name, func.__name__, fields)
    parameters = _clean_schema(args_model.model_json_schema())
    is_async = inspect.iscoroutinefunction(func)

    def execute(
        tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: OnUpdate
    ) -> AgentToolResult:
        try:
            parsed = args_model.model_validate(params)
        except ValidationError as exc:
            raise ToolArgumentsError(_pydantic_error_text(tool_name, exc)) from None
        kwargs = {k: getattr(parsed, k) for k in fields}
        extra = {"signal": signal, "on_update": on_update, "tool_call_id": tool_call_id}
        kwargs.update({k: extra[k] for k in injected})
        if context_param is not None:
            kwargs[context_param] = current_run_context()
        if is_async:
            value = _run_coroutine(func(**kwargs), signal)
        else:
            value = func(**kwargs)
        return to_tool_result(value)

    return AgentTool(
        name=tool_name,
        description=description if description is not None else summary,
        parameters=parameters,
        execute=execute,
        label=label or tool_name,
        execution_mode=execution_mode,
    )


def _run_coroutine(coroutine: Any, signal: AbortSignal) -> Any:
    """Run an async tool's ``coroutine`` in an event loop of its own on this tool thread; the
    call's abort (the run's, or its ``timeout``) cancels it, as asyncio cancels a task."""
    import asyncio  # only async tools need it

    async def cancellable() -> Any:
        loop = asyncio.get_running_loop()
        task = loop.create_task(coroutine)

        def cancel() -> None:  # on the aborting thread
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop closed: the coroutine has ended already
                pass

        remove = signal.add_callback(cancel)
        try:
            return await task
        finally:
            remove()

    return asyncio.run(cancellable())


def _is_run_context(annotation: Any) -> bool:
    """Whether a parameter's annotation is ``RunContext`` or ``RunContext[...]``."""
    return annotation is RunContext or get_origin(annotation) is RunContext


def _arguments_model(tool_name: str, func_name: str, fields: dict[str, Any]) -> type[BaseModel]:
    """The pydantic model validating a ``@tool`` function's arguments.

    Pydantic reserves some names (``model_config``) and silently ignores others (a leading
    underscore); such a parameter would make every call fail, so it is refused here, by name.
    """
    try:
        model: type[BaseModel] = create_model(
            f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
    except Exception as exc:
        raise TypeError(f"@tool cannot describe the parameters of {func_name}: {exc}") from exc
    unusable = sorted(set(fields) - set(model.model_fields))
    if unusable:
        raise TypeError(
            f"@tool cannot use the parameter name(s) {', '.join(unusable)} of {func_name}: "
            "pydantic reserves or ignores them; rename them"
        )
    return model


def to_tool_result(value: Any) -> AgentToolResult:
    """A tool's return value as a result: text for ``str``, JSON text for anything else."""
    if isinstance(value, AgentToolResult):
        return value
    if isinstance(value, str):
        return AgentToolResult(content=[TextContent(text=value)])
    if isinstance(value, (TextContent, ImageContent)):
        return AgentToolResult(content=[value])
    text = json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)
    return AgentToolResult(content=[TextContent(text=text)], details=value)


def _pydantic_error_text(tool_name: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "root"
        lines.append(f"  - {path}: {err['msg']}")
    return f'Validation failed for tool "{tool_name}":\n' + "\n".join(lines)


def _clean_schema(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keys: noise for the model."""
    if isinstance(schema, dict):
        cleaned = {}
        for key, value in schema.items():
            if key == "title" and isinstance(value, str):
                continue
            if key in ("properties", "$defs") and isinstance(value, dict):
                cleaned[key] = {k: _clean_schema(v) for k, v in value.items()}
            else:
                cleaned[key] = _clean_schema(value)
        return cleaned
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-parameter descriptions.

    Google (``Args:``), NumPy (``Parameters`` underlined) and reST (``:param x:``) styles are
    read by ``docstring-parser``; a parameter's wrapped lines are joined by single spaces.
    """
    import docstring_parser  # needed only while @tool builds a tool

    parsed = docstring_parser.parse(doc)
    params = {
        p.arg_name: " ".join(p.description.split())
        for p in parsed.params
        if p.description and p.description.strip()
    }
    return (parsed.description or "").strip(), params
