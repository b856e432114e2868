"""What a request's cacheable prefix is made of, and where two of them part: the model, the
request options a cache depends on, the declared tools, the system prompt and the messages.

A provider's prompt cache (Anthropic's breakpoints, OpenAI's and Gemini's automatic prefix
caches, llama.cpp's slot) reuses the longest prefix two requests share, in the order the
request is written: tools, then the system prompt, then the messages. A change anywhere makes
everything after it a cache miss, so what matters is the *first* part that changed.

:func:`shape_of` reads a request into a :class:`Shape` (cheap: it keeps references, copies no
text); :func:`first_change` compares two and says what changed first, where, with at most a
redacted hint: never a message's or a prompt's text, which may hold anything the user said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..providers.transform import fingerprint
from ..transcript import split_transcript
from ..types import Tool, role_of

PARTS = ("model", "tools", "system_prompt", "messages", "options")
"""The parts of a request, in the order a change is reported (the first that changed broke
the prefix; the options come last, as they change no text the cache holds)."""

CACHE_OPTIONS = (
    "reasoning", "thinking_budgets", "tool_choice", "output_schema",
    "anthropic", "openai", "google",
)  # fmt: skip
"""The request options a provider's cache depends on (thinking settings, a forced tool and a
response format are part of the cached prompt, or invalidate it); ``max_tokens``,
``temperature`` and the transport's settings are not."""

_TIME = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:\.\d+)?)?(?:Z| ?UTC)?"
    r"|\d{1,2}:\d{2}|\d{1,2}/\d{1,2}/\d{2,4}|\b\d{10,13}\b"
    r"|\b(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\b"
    r"|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.? \d{1,2}\b",
    re.IGNORECASE,
)
"""What looks like a date or a time (ISO dates, clock times, slashed dates, epoch seconds or
milliseconds, day and month names): the usual cause of a system prompt that changes every
request."""
_ID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}|[0-9a-f]{16,}",
                 re.IGNORECASE)  # fmt: skip
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_JOINERS = frozenset("-:/.,+ ")
"""Besides letters and digits, what a timestamp, an id or a number is made of: how far back
from the change its start may lie."""
HINT_CHARS = 24
"""The longest redacted hint (its shape: digits as 9, letters as a)."""


@dataclass
class Shape:
    """One request, as a cache sees it: the ``model``'s key, the cache-relevant ``options``,
    the declared ``tools``, the ``system_prompt`` and the ``messages`` (each as
    :func:`message_key` reads it, beside the message object it came from). ``cache_read`` and
    ``cache_write`` are what the provider reported for it, once it answered."""

    model: tuple[str, ...]
    options: dict[str, Any]
    tools: list[Tool]
    system_prompt: str
    messages: list[Any]
    roles: list[str]
    cache_read: int = 0
    cache_write: int = 0
    answered: bool = False
    at: float = 0.0
    """When it was sent (``time.monotonic()``)."""
    compaction: Any = None
    """Which compaction the messages stand on (``None``: none): set by the watch."""


@dataclass
class Change:
    """What changed first between two requests: the ``part`` (one of :data:`PARTS`), a
    ``position`` in it (a character of the system prompt, a message's or a tool's index), a
    one-line ``text`` saying so (no content), and ``detail`` (names of tools or options, a
    message's role, a hint's kind and shape). ``also`` lists the later parts that changed."""

    part: str
    text: str
    position: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)


def shape_of(model: Any, context: Any, options: Any, at: float) -> Shape:
    """The :class:`Shape` of a request (its model, context and options), sent at ``at``."""
    prompt, tools, rest = split_transcript(context.messages)
    if context.system_prompt is not None:
        prompt = context.system_prompt
    if context.tools is not None:
        tools = list(context.tools)
    model_key = (str(model.provider), str(model.api), str(model.id), str(model.base_url))
    return Shape(
        model=model_key,
        options={name: getattr(options, name, None) for name in CACHE_OPTIONS},
        tools=tools,
        system_prompt=prompt,
        messages=[message_key(m) for m in rest],
        roles=[role_of(m) or "?" for m in rest],
        at=at,
    )


def message_key(message: Any) -> Any:
    """What of ``message`` a request sends, as a value two requests can compare: the
    providers' own :func:`~agentkit.providers.transform.fingerprint` (references to the
    message's fields and blocks, which an edit in place replaces) for agentkit's messages,
    else its JSON text."""
    if hasattr(message, "__dict__") and hasattr(message, "content"):
        try:
            key = fingerprint(message)
        except (AttributeError, TypeError):
            key = None
        if key is not None:
            return key[1:]  # the class is in the role already
    try:
        return json.dumps(message, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(message)


def first_change(old: Shape, new: Shape) -> Change | None:
    """The first part of ``new`` that differs from ``old`` (``None``: ``new`` extends ``old``,
    its cached prefix whole)."""
    changes = [c for c in (_model(old, new), _tools(old, new), _system(old, new),
                           _messages(old, new), _options(old, new)) if c is not None]  # fmt: skip
    if not changes:
        return None
    first = changes[0]
    first.also = [c.part for c in changes[1:]]
    return first


def _model(old: Shape, new: Shape) -> Change | None:
    if old.model == new.model:
        return None
    names = ("provider", "api", "model", "base_url")
    which = [n for n, a, b in zip(names, old.model, new.model, strict=True) if a != b]
    return Change("model", f"the model changed ({', '.join(which)})", detail={"changed": which})


def _options(old: Shape, new: Shape) -> Change | None:
    changed = [name for name in CACHE_OPTIONS if not _same(old.options[name], new.options[name])]
    if not changed:
        return None
    return Change("options", f"the request options changed ({', '.join(changed)})",
                  detail={"changed": changed})  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or a == b)
    except Exception:  # an option object whose comparison fails: count it as changed
        return False


def _tools(old: Shape, new: Shape) -> Change | None:
    before, after = old.tools, new.tools
    if len(before) == len(after) and all(map(_same, before, after)):
        return None
    old_names = [t.name for t in before]
    new_names = [t.name for t in after]
    old_set, new_set = set(old_names), set(new_names)
    removed = [n for n in old_names if n not in new_set]
    added = [n for n in new_names if n not in old_set]
    position = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if not _same(a, b)),
        min(len(before), len(after)),
    )
    detail: dict[str, Any] = {"added": added[:20], "removed": removed[:20]}
    if added or removed:
        said = [f"{len(added)} added ({_names(added)})" if added else "",
                f"{len(removed)} removed ({_names(removed)})" if removed else ""]  # fmt: skip
        text = "the tools changed: " + ", ".join(s for s in said if s)
    elif old_names != new_names:
        text = f"the tools were reordered (from tool {position}, {after[position].name!r})"
        detail["reordered"] = True
    else:
        text = f"the tool {after[position].name!r} (tool {position}) changed its declaration"
        detail["changed"] = [after[position].name]
    return Change("tools", text, position, detail)


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n[:40]) for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _system(old: Shape, new: Shape) -> Change | None:
    a, b = old.system_prompt, new.system_prompt
    if a is b or a == b:
        return None
    at = common_prefix(a, b)
    detail: dict[str, Any] = {"length_before": len(a), "length_after": len(b)}
    if at >= len(a):
        return Change("system_prompt", f"the system prompt grew at its end (char {at})", at,
                      detail)  # fmt: skip
    kind, hint = what_changed(a, b, at)
    detail["kind"] = kind
    if hint:
        detail["hint"] = hint
    said = {"timestamp": "a timestamp", "id": "an id", "number": "a number"}.get(kind)
    where = f"{said} at char {at}" if said else f"at char {at}"
    shown = f" (now like {hint!r})" if hint else ""
    return Change("system_prompt", f"the system prompt changed: {where}{shown}", at, detail)


def common_prefix(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share (by halving: each step one slice
    comparison in C, so a megabyte of prompt costs microseconds, not a loop over characters)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def what_changed(old: str, new: str, at: int) -> tuple[str, str]:
    """What the change at ``at`` looks like in ``new``: ``"timestamp"``, ``"id"``,
    ``"number"`` or ``"text"``, and for the first three a redacted shape of it (``"text"``
    gets none: a word's shape could still say something)."""
    start = at
    while (
        start > 0 and start > at - 40 and (new[start - 1].isalnum() or new[start - 1] in _JOINERS)
    ):
        start -= 1
    window = new[start : at + 40]
    for kind, pattern in (("timestamp", _TIME), ("id", _ID), ("number", _NUMBER)):
        for match in pattern.finditer(window):
            if match.start() <= at - start + 1 and match.end() > at - start:
                return kind, shape_hint(match.group())
    return "text", ""


def shape_hint(text: str) -> str:
    """``text``'s shape, no more: digits as ``9``, letters as ``a``, other characters kept,
    cut to :data:`HINT_CHARS`."""
    shown = "".join("9" if c.isdigit() else "a" if c.isalpha() else c for c in text)
    return shown[:HINT_CHARS]


def _messages(old: Shape, new: Shape) -> Change | None:
    before, after = old.messages, new.messages
    count = len(before)
    index = next(
        (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if not _equal(a, b)),
        None,
    )
    if index is None:
        if len(after) >= count:
            return None
        gone = count - len(after)
        return Change("messages", f"the last {gone} message(s) were dropped (from message "
                      f"{len(after)})", len(after), {"dropped": gone})  # fmt: skip
    role = old.roles[index]
    resumes = next((j for j in range(index + 1, count) if index < len(after)
                    and _equal(before[j], after[index])), None)  # fmt: skip
    if resumes is not None:  # the messages from ``index`` up to ``resumes`` are gone
        gone = resumes - index
        what = f"message {index}, a {role} message" if gone == 1 else (
            f"{gone} messages from message {index}, a {role} message")  # fmt: skip
        text = f"an earlier message was dropped ({what})"
        return Change("messages", text, index, {"role": role, "dropped": gone})
    text = f"an earlier message was edited (message {index}, a {role} message)"
    return Change("messages", text, index, {"role": role, "edited": True})


def _equal(a: Any, b: Any) -> bool:
    """Two :func:`message_key` values are the same message (tuples compare element by
    element, by identity first: an unchanged message costs one pointer comparison each)."""
    return _same(a, b)
