"""Argument repair for small models: fix what a tool call's arguments get wrong in predictable
ways, before validation, and tell the model what was changed.

Small models often send a stray key (``"type": "string"`` copied from the schema), a number as
text, or the right value under a near name. Validation would reject the whole call and the model
tends to repeat the error as its answer. :func:`repair_arguments` makes the safe repairs:

- keys the schema does not declare (``additionalProperties: false``) are dropped; when exactly
  one required property is missing and exactly one unknown key is present, that key is renamed;
- a value wrapped like a schema (``{"type": "string", "value": "a.txt"}``) is unwrapped;
- a scalar of the wrong JSON type is coerced when the conversion is exact (``"5"`` to ``5``,
  ``"true"`` to ``True``, ``5`` to ``"5"``).

A small model also copies placeholders from the declarations: ``{"path": "string"}``, the
schema's type name, or the parameter's own name as its value. No repair can guess the real
value, so :func:`find_placeholders` finds them and a wrapped tool refuses the call with a result
that says what to send instead; the same call sent again runs (a file may really be called
``string``).

:func:`with_argument_repair` wraps an :class:`~agentkit.AgentTool` so that its arguments are
repaired through the framework's ``prepare_arguments`` seam and its result starts with a note
that lists the repairs, so the model learns the right shape::

    agent = Agent(model=model, tools=[with_argument_repair(t) for t in tools])

Small models also write a call as text now and then, often in a code fence.
:func:`with_text_tool_calls` wraps a stream function so that a reply which is exactly one JSON
call to a declared tool becomes that call (:func:`parse_text_tool_call` says what counts; prose
never does)::

    agent = Agent(model=model, tools=tools, stream_fn=with_text_tool_calls())

And a small model repeats a failed call unchanged, whatever its result says, until the turn
budget runs out. :func:`stop_repeated_failures` is an ``after_tool_call`` hook that ends the
run at the third identical failure in a row, with a result that says why::

    agent = Agent(model=model, tools=tools, after_tool_call=stop_repeated_failures())
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import secrets
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..abort import AbortSignal
from ..errors import PlaceholderArgumentsError
from ..event_stream import AssistantMessageEventStream
from ..events import DoneEvent
from ..hooks import AfterToolCallContext, AfterToolCallResult
from ..loop import StreamFn, get_default_stream_fn
from ..tools import AgentTool, AgentToolResult, OnUpdate
from ..transcript import get_current_tools
from ..types import AssistantMessage, Context, Model, TextContent, ToolCall

_WRAPPER_KEYS = ("value", "default", "const", "example")
_TYPE_NAMES = frozenset(
    ("string", "str", "integer", "int", "number", "float", "boolean", "bool", "object", "array")
)
_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def repair_arguments(arguments: Any, schema: dict[str, Any]) -> tuple[Any, list[str]]:
    """A repaired copy of ``arguments`` for the object ``schema``, and one note per change.

    Arguments that are not an object, or a schema that does not describe an object's
    properties, come back unchanged with no notes. Never raises.
    """
    notes: list[str] = []
    try:
        repaired = _repair_object(arguments, schema, "", notes)
    except Exception:  # repair is best effort: validation reports what is still wrong
        return arguments, []
    return repaired, notes


def _repair_object(value: Any, schema: Any, where: str, notes: list[str]) -> Any:
    if not isinstance(value, dict) or not isinstance(schema, dict):
        return value
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return value
    result = dict(value)
    if schema.get("additionalProperties") is False:
        unknown = [key for key in result if key not in properties]
        required = [
            name for name in schema.get("required", []) if name in properties and name not in result
        ]
        if len(unknown) == 1 and len(required) == 1:
            old, new = unknown[0], required[0]
            result[new] = result.pop(old)
            notes.append(f"renamed {where}{old!r} to {where}{new!r}")
            unknown = []
        for key in unknown:
            del result[key]
            notes.append(f"dropped unknown key {where}{key!r}")
    for name, sub in properties.items():
        if name in result and isinstance(sub, dict):
            result[name] = _repair_value(result[name], sub, f"{where}{name}", notes)
    return result


def _repair_value(value: Any, schema: dict[str, Any], where: str, notes: list[str]) -> Any:
    kind = schema.get("type")
    if kind == "object":
        return _repair_object(value, schema, where + ".", notes)
    if kind == "array" and isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            _repair_value(item, schema["items"], f"{where}[{i}]", notes)
            for i, item in enumerate(value)
        ]
    if kind not in ("string", "integer", "number", "boolean"):
        return value
    if isinstance(value, dict):
        inner = [value[k] for k in _WRAPPER_KEYS if k in value]
        if len(inner) == 1 and not isinstance(inner[0], (dict, list)):
            notes.append(f"unwrapped {where} from {json.dumps(value, default=str)[:80]}")
            value = inner[0]
    converted = _convert(value, kind)
    if converted is _FAILED or (type(converted) is type(value) and converted == value):
        return value
    notes.append(f"converted {where} from {json.dumps(value, default=str)[:40]} to {kind}")
    return converted


_FAILED: Any = object()


def _convert(value: Any, kind: str) -> Any:
    """``value`` as the JSON type ``kind`` when the conversion is exact, else ``_FAILED``
    (or ``value`` itself when it already has that type)."""
    return _CONVERTERS[kind](value)


def _to_string(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) or (isinstance(value, float) and value == value):
        return str(value)
    return _FAILED


def _to_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return _FAILED


def _to_integer(value: Any) -> Any:
    if isinstance(value, bool):  # a bool is an int to Python, never a number to the schema
        return _FAILED
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        return int(value.strip())
    return _FAILED


def _to_number(value: Any) -> Any:
    if isinstance(value, bool):
        return _FAILED
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value.strip())
        return number if number not in (float("inf"), float("-inf")) else _FAILED
    return _FAILED


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": _to_string,
    "boolean": _to_boolean,
    "integer": _to_integer,
    "number": _to_number,
}
"""The exact conversion to each scalar JSON type :func:`_repair_value` repairs."""


def find_placeholders(arguments: Any, schema: dict[str, Any]) -> list[str]:
    """The names of the string arguments whose value is a placeholder copied from the schema:
    the JSON type's name (``"string"``, ``"integer"``...) or the parameter's own name, in any
    case, perhaps in ``<>``, ``{}`` or ``[]``. Only the object's own declared properties are
    looked at; anything that is not an object gives ``[]``."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(arguments, dict) or not isinstance(properties, dict):
        return []
    found = []
    for name, value in arguments.items():
        if name not in properties or not isinstance(value, str):
            continue
        bare = value.strip().strip("<>{}[]").strip().lower()
        if bare in _TYPE_NAMES or bare == name.lower():
            found.append(name)
    return found


def _refusal(tool_name: str, arguments: dict[str, Any], names: list[str]) -> str:
    shown = ", ".join(f"{name} {json.dumps(arguments[name])}" for name in names)
    return (
        f"{tool_name} was not run: {shown} is a placeholder copied from the tool list, not a "
        f"real value. Call {tool_name} again with the real "
        f"{' and '.join(names)} taken from the user's request (send the same call again only "
        "if that value is really meant)."
    )


def with_argument_repair(tool: AgentTool) -> AgentTool:
    """A copy of ``tool`` whose arguments are repaired before validation (chained after its own
    ``prepare_arguments``) and whose result begins with a note of the repairs made.

    A call with a placeholder argument (:func:`find_placeholders`) is refused with
    :class:`PlaceholderArgumentsError`, which the loop turns into an error result for the model to
    retry from; the same arguments sent again are let through."""
    pending: dict[str, list[list[str]]] = defaultdict(list)
    refused: set[str] = set()  # placeholder calls refused once: a repeat runs
    lock = threading.Lock()  # guards both: calls are prepared and run on different threads
    previous = tool.prepare_arguments
    execute = tool.execute

    def prepare(raw: Any) -> Any:
        if previous is not None:
            raw = previous(raw)
        repaired, notes = repair_arguments(raw, tool.parameters)
        placeholders = find_placeholders(repaired, tool.parameters)
        if placeholders:
            with lock:
                first_time = _key(repaired) not in refused
                refused.add(_key(repaired))
            if first_time:
                raise PlaceholderArgumentsError(_refusal(tool.name, repaired, placeholders))
        if notes:
            with lock:
                pending[_key(repaired)].append(notes)
        return repaired

    def run(
        tool_call_id: str, params: dict[str, Any], signal: AbortSignal, on_update: OnUpdate
    ) -> AgentToolResult:
        with lock:
            waiting = pending.get(_key(params))
            notes = waiting.pop(0) if waiting else None
            if waiting == []:
                pending.pop(_key(params), None)
        result = execute(tool_call_id, params, signal, on_update)
        if not notes or not isinstance(result, AgentToolResult):
            return result
        note = TextContent(
            text=f"[Note: your arguments were repaired: {'; '.join(notes)}. "
            f"Next time use exactly the parameters of {tool.name}.]\n"
        )
        return result.model_copy(update={"content": [note, *result.content]})

    return dataclasses.replace(tool, prepare_arguments=prepare, execute=run)


def _key(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, default=str)


# --- tool calls written as text ----------------------------------------------------------------

_FENCED = re.compile(r"^```[\w+-]*[ \t]*\n?(?P<body>.*?)\n?[ \t]*(?:```)?$", re.DOTALL)
_TAGGED = re.compile(r"^<tool_call>\s*(?P<body>.*?)\s*(?:</tool_call>)?$", re.DOTALL)


def parse_text_tool_call(text: str, tool_names: Iterable[str]) -> tuple[str, dict[str, Any]] | None:
    """``(name, arguments)`` when ``text`` is exactly one tool call written as JSON, else ``None``.

    The whole reply must be one ``{"name": ..., "arguments": {...}}`` object naming a tool in
    ``tool_names``: bare (a closing fence after it, with no opening one, is dropped), in one
    code fence (```` ```json ````, the closing fence optional), or in ``<tool_call>`` tags.
    ``"parameters"`` is accepted for ``"arguments"``, and arguments given as a JSON string
    holding an object are decoded. Anything else -- prose, a fence with text around it, two
    calls, an unknown tool, other keys -- is not a call.
    """
    body = text.strip()
    if body.endswith("```") and body[:1] == "{":  # a closing fence it never opened (seen)
        body = body[:-3].rstrip()
    for wrapper in (_FENCED, _TAGGED):
        match = wrapper.match(body) if body[:1] in "`<" else None
        if match is not None:
            body = match.group("body").strip()
            break
    if not body.startswith("{") or not body.endswith("}"):
        return None
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    keys = set(call) - {"name"}
    if len(keys) > 1 or not keys <= {"arguments", "parameters"}:
        return None
    name = call["name"]
    if name not in set(tool_names):
        return None
    arguments: Any = call[keys.pop()] if keys else {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    return name, arguments


def as_tool_call(message: AssistantMessage, tool_names: Iterable[str]) -> AssistantMessage | None:
    """``message`` with its text turned into a tool call, when it ended normally (``stop``),
    has no tool call, and its whole text is one call to a known tool
    (:func:`parse_text_tool_call`); else ``None``. Thinking blocks are kept."""
    if message.stop_reason != "stop" or any(isinstance(c, ToolCall) for c in message.content):
        return None
    parsed = parse_text_tool_call(message.text, tool_names)
    if parsed is None:
        return None
    name, arguments = parsed
    call = ToolCall(id=f"call_{secrets.token_hex(8)}", name=name, arguments=arguments)
    kept = [c for c in message.content if not isinstance(c, TextContent)]
    return message.model_copy(update={"content": [*kept, call], "stop_reason": "tool_use"})


def with_text_tool_calls(stream_fn: StreamFn | None = None) -> StreamFn:
    """A stream function that turns a reply which is exactly one JSON tool call written as
    text (see :func:`parse_text_tool_call`) into that tool call, for models that write calls as
    text now and then (small local ones, often in a code fence). The tools are those the
    request declares; other replies pass through unchanged. ``stream_fn`` defaults to the
    process's default stream function, looked up at each request."""

    def stream(model: Model, context: Context, options: Any) -> AssistantMessageEventStream:
        inner = (stream_fn or get_default_stream_fn())(model, context, options)
        names = {t.name for t in [*get_current_tools(context.messages), *(context.tools or [])]}
        if not names:
            return inner
        outer = AssistantMessageEventStream()

        def relay() -> Iterator[None]:
            try:
                for event in inner:
                    if isinstance(event, DoneEvent):
                        converted = as_tool_call(event.message, names)
                        if converted is not None:
                            event = DoneEvent(reason="tool_use", message=converted)
                    outer.push(event)
                    yield
                outer.end(inner.result())
            except GeneratorExit:  # the consumer left early: so does the inner request
                raise
            except BaseException as exc:  # the consumer sees the inner stream's failure
                outer.fail(exc)
            finally:
                close = getattr(inner, "close", None)  # a stream_fn's own stream may lack it
                if close is not None:
                    close()

        # Like a provider's request: relayed on the loop's thread as it reads, or on its own.
        outer.start_producer(relay(), "agentkit-text-calls")
        return outer

    return stream


REPEAT_LIMIT = 3
"""How many times in a row the same call may fail the same way before
:func:`stop_repeated_failures` ends the run."""
REPEATED_FAILURE = "repeated_failure"
"""The ``details`` key of the result that ended a run for a repeated failure (its count)."""


def stop_repeated_failures(
    limit: int = REPEAT_LIMIT,
) -> Callable[[AfterToolCallContext, AbortSignal], AfterToolCallResult | None]:
    """An ``after_tool_call`` hook that ends the run when the model sends the same call (same
    tool, same arguments) that failed the same way in each of the ``limit - 1`` turns before.

    A small model tends to repeat a failed call unchanged, whatever its result says, until the
    turn budget runs out. The result that ends the run keeps the tool's error, says why the run
    stopped, and carries ``details[REPEATED_FAILURE]``. It only looks at the transcript, so it
    holds no state and serves any number of runs and threads at once."""
    if limit < 2:
        raise ValueError("limit must be at least 2")

    def after(ctx: AfterToolCallContext, signal: AbortSignal) -> AfterToolCallResult | None:
        if not ctx.is_error:
            return None
        this = (ctx.tool_call.name, ctx.tool_call.arguments, _result_text(ctx.result.content))
        earlier = _failed_calls(ctx.context.messages, ctx.assistant_message)
        repeats = 1 + sum(1 for _ in itertools.takewhile(lambda seen: seen == this, earlier))
        if repeats < limit:
            return None
        note = (
            f"The run was stopped: {ctx.tool_call.name} was called with these same arguments "
            f"{repeats} times in a row and failed the same way each time."
        )
        return AfterToolCallResult(
            content=[*ctx.result.content, TextContent(text=note)],
            details={**(ctx.result.details or {}), REPEATED_FAILURE: repeats},
            terminate=True,
        )

    return after


def _failed_calls(messages: Sequence[Any], current: Any) -> Iterator[tuple[str, Any, str]]:
    """The transcript's tool calls before the assistant message ``current``, newest first, as
    (tool name, arguments, error text), for as long as each failed: it stops at a call that
    succeeded or has no result, and at any message that is neither a call nor a result."""
    results = {m.tool_call_id: m for m in messages if getattr(m, "role", None) == "tool_result"}
    for message in reversed(messages):
        role = getattr(message, "role", None)
        if message is current or role == "tool_result":
            continue
        calls = [c for c in getattr(message, "content", ()) if isinstance(c, ToolCall)]
        if role != "assistant" or not calls:
            return
        for call in reversed(calls):
            result = results.get(call.id)
            if result is None or not result.is_error:
                return
            yield call.name, call.arguments, _result_text(result.content)


def _result_text(content: Iterable[Any]) -> str:
    """The text blocks of a tool result, joined."""
    return "\n".join(block.text for block in content if isinstance(block, TextContent))
