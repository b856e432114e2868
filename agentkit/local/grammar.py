"""The grammar that holds the embedded model's reply to a declared call.

:func:`tool_call_grammar` writes a llama.cpp grammar (GBNF) under which a reply is either one
call to a declared tool, with arguments of the declared shape, or free text;
:func:`constrain_tool_calls` rewrites a Chat Completions request to carry it (the server
refuses a grammar beside ``tools``, so the declarations move into the system message), and
:func:`with_constrained_tool_calls` does so for every request of a stream function.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..types import Model
from .template import DEFAULT_SYSTEM, TOOLS_POSTAMBLE, TOOLS_PREAMBLE, mark_failed_results

_GBNF_COMMON = r"""
ws ::= [ \t\n]*
string ::= "\"" char* "\""
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" hex hex hex hex)
hex ::= [0-9a-fA-F]
integer ::= "-"? ("0" | [1-9] [0-9]*)
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? ws "}"
array ::= "[" ws (value ("," ws value)*)? ws "]"
"""


def _gbnf_literal(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class _Grammar:
    """Collects GBNF rules for JSON schemas (the subset tool declarations use)."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def schema(self, schema: Any, name: str) -> str:
        """The rule for a value matching ``schema``; ``value`` when the schema is not one of
        the simple shapes (validation still checks the call)."""
        if not isinstance(schema, dict):
            return "value"
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            options = [_gbnf_literal(json.dumps(v, ensure_ascii=False)) for v in schema["enum"]]
            return self.add(name, " | ".join(options))
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                parts = [self.schema(s, f"{name}-{i}") for i, s in enumerate(schema[key])]
                return self.add(name, " | ".join(parts))
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.add(name, " | ".join(self.schema({"type": k}, f"{name}-{k}") for k in kind))
        if kind in ("string", "integer", "number", "boolean", "null"):
            return str(kind)
        if kind == "array":
            item = self.schema(schema.get("items"), f"{name}-item")
            return self.add(name, f'"[" ws ({item} ("," ws {item})*)? ws "]"')
        if kind == "object" and isinstance(schema.get("properties"), dict):
            return self.object(schema, name)
        return "value"

    def object(self, schema: dict[str, Any], name: str) -> str:
        """The declared keys, each value matching its schema. When the schema allows no other
        keys, each key may appear once, in declared order, and the required ones must: a small
        model that repeats a key then has to close the object instead of looping on it.
        Otherwise any known or unknown key in any order (validation still checks the call)."""
        properties = list(schema["properties"].items())
        pairs = []
        for i, (key, sub) in enumerate(properties):
            label = _gbnf_literal(json.dumps(key, ensure_ascii=False))
            pairs.append(self.add(f"{name}-p{i}-kv", f'{label} ws ":" ws {self.schema(sub, f"{name}-p{i}")}'))
        if schema.get("additionalProperties") is not False:
            pair = self.add(f"{name}-kv", " | ".join([*pairs, 'string ":" ws value']))
            return self.add(name, f'"{{" ws ({pair} ("," ws {pair})*)? ws "}}"')
        required = set(schema.get("required") or ())
        # first<i>: the keys from i on, with none written before; next<i>: the same after one.
        first = after = ""
        for i in reversed(range(len(properties))):
            chain = f"{pairs[i]} {after}".rstrip()
            optional = properties[i][0] not in required
            if i > 0:
                step = f'"," ws {chain}'
                body = _either(step, after) if optional else step
                after = self.add(f"{name}-next{i}", body)
            first = self.add(f"{name}-first{i}", _either(chain, first) if optional else chain)
        return self.add(name, f'"{{" ws {first} ws "}}"' if first else '"{" ws "}"')


def _either(rule: str, otherwise: str) -> str:
    """``rule`` or else ``otherwise``, where an empty ``otherwise`` is nothing at all."""
    return f"{rule} | {otherwise}" if otherwise else f"({rule})?"


_GBNF_REPLY = r"""
sp ::= [ \t\n]*
fence ::= "```" "json"? "\n"
call ::= fence? sp "{" sp "\"name\"" sp ":" sp calls sp "}" (sp "```")?
answer ::= [^{`] .* | "{" a-obj | "```" a-fence | "`" ([^`] .*)? | "``" ([^`] .*)?
a-fence ::= ([^j\n] .*)? | "\n" sp a-brace | "j" a-j
a-j ::= ([^s] .*)? | "s" (([^o] .*)? | "o" (([^n] .*)? | "n" (([^\n] .*)? | "\n" sp a-brace)))
a-brace ::= ([^{ \t\n] .*)? | "{" a-obj
a-obj ::= sp (([^ \t\n"] .*)? | "\"" a-q)
a-q ::= ([^n] .*)? | "n" (([^a] .*)? | "a" (([^m] .*)? | "m" (([^e] .*)? | "e" ([^"] .*)?)))
"""


def tool_call_grammar(tools: Sequence[dict[str, Any]], *, required: bool = False) -> str:
    """A llama.cpp grammar (GBNF) for a reply that is either one tool call or an answer
    (``required``: a tool call, nothing else).

    ``tools`` are Chat Completions declarations (``{"type": "function", "function": {...}}``).
    A reply whose first JSON key is ``"name"`` -- bare, or after a ```` ```json ```` fence --
    must be exactly one ``{"name": "<a declared tool>", "arguments": {...}}`` whose arguments
    have only the declared keys, with values of the declared types; any other reply (prose,
    code, other JSON) is free text.
    """
    grammar = _Grammar()
    calls = []
    for i, declaration in enumerate(tools):
        function = declaration.get("function", declaration)
        name = function.get("name")
        if not isinstance(name, str):
            continue
        arguments = grammar.schema(function.get("parameters"), f"tool{i}-args")
        if arguments in ("string", "integer", "number", "boolean", "null"):
            arguments = "object"  # arguments are an object whatever the schema says
        label = _gbnf_literal(json.dumps(name, ensure_ascii=False))
        calls.append(f'{label} sp "," sp "\\"arguments\\"" sp ":" sp {arguments}')
    grammar.add("calls", " | ".join(calls) if calls else 'string sp "," sp "\\"arguments\\"" sp ":" sp object')
    rules = ["root ::= call" if required else 'root ::= call | answer | ""']
    rules.extend(f"{name} ::= {body}" for name, body in grammar.rules.items())
    return "\n".join(rules) + _GBNF_REPLY + _GBNF_COMMON


def constrain_tool_calls(payload: dict[str, Any], *, grammar: bool = True) -> dict[str, Any]:
    """A Chat Completions request for the embedded server whose tool calls are constrained.

    llama.cpp's server refuses a grammar together with ``tools``, so the declarations move
    into the system message (worded as the shipped template words them) and the request
    carries :func:`tool_call_grammar` instead (``grammar=False``: no grammar, the declarations
    still move; ``tool_choice`` "required" makes the grammar admit a call only, a named
    function a call of that function only, and "none" an answer only, whatever ``grammar``
    says); calls then
    come back as text, which
    :func:`agentkit.local.repair.with_text_tool_calls` turns into tool calls. A request without
    tools, with a grammar or schema of its own, or whose system message is not plain text, is
    returned unchanged.
    """
    tools = payload.get("tools")
    if not tools or any(key in payload for key in ("grammar", "json_schema", "response_format")):
        return payload
    messages = list(payload.get("messages") or [])
    block = TOOLS_PREAMBLE + "".join(
        "\n" + json.dumps(t, ensure_ascii=False) for t in tools
    ) + TOOLS_POSTAMBLE
    if messages and messages[0].get("role") == "system":
        if not isinstance(messages[0].get("content"), str):
            return payload
        messages[0] = {**messages[0], "content": messages[0]["content"] + block}
    else:
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM + block})
    constrained = {k: v for k, v in payload.items() if k not in ("tools", "tool_choice")}
    constrained["messages"] = messages
    choice = payload.get("tool_choice")
    if choice == "none":  # the same prompt (its cached prefix), and an answer only
        constrained["grammar"] = _ANSWER_ONLY
    elif grammar:
        named = _named_function(choice)
        allowed = [t for t in tools if _function_name(t) == named] if named else tools
        required = choice == "required" or bool(named and allowed)
        constrained["grammar"] = tool_call_grammar(allowed or tools, required=required)
    return constrained


_ANSWER_ONLY = 'root ::= [^{`< \\t\\n] .* | ""\n'
"""A grammar for a reply that must not call a tool (``tool_choice`` "none"): prose, which
never begins like a call, bare, fenced or tagged (the 1.5B model, held to an answer by the
looser rule, wrote ``{"name ": ...}``, a call with a space in its key)."""


def _named_function(choice: Any) -> str | None:
    """The tool a Chat Completions ``tool_choice`` names (``{"type": "function", "function":
    {"name": ...}}``), else ``None``."""
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _function_name(declaration: Any) -> Any:
    function = declaration.get("function", declaration) if isinstance(declaration, dict) else {}
    return function.get("name") if isinstance(function, dict) else None


def with_constrained_tool_calls(stream_fn: Any = None, *, grammar: bool = True) -> Any:
    """A stream function whose Chat Completions requests go through
    :func:`constrain_tool_calls` (before the caller's own ``on_payload``), for the embedded
    server, with failed tool results marked for the shipped template
    (:func:`mark_failed_results`). Pair it with :func:`agentkit.local.repair.with_text_tool_calls`,
    which reads the calls back: ``with_text_tool_calls(with_constrained_tool_calls())``."""
    from ..loop import get_default_stream_fn
    from ..types import as_stream_options, on_payload_before

    def stream(model: Model, context: Any, options: Any) -> Any:
        inner = stream_fn or get_default_stream_fn()
        if model.api != "openai-completions":
            return inner(model, context, options)
        context = mark_failed_results(context)
        options = as_stream_options(options)
        on_payload = on_payload_before(
            options, lambda payload, _model: constrain_tool_calls(payload, grammar=grammar)
        )
        return inner(model, context, options.model_copy(update={"on_payload": on_payload}))

    return stream
