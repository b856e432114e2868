"""Streams of the four wire APIs saying what a test needs, derived from the vendor recordings in
``tests/fixtures/vendor``: the recorded events are kept (their framing, ids, usage, padding
and the blocks around the answer), and only the answer's text deltas or the tool call's name
and arguments are put in their place."""

from __future__ import annotations

import copy
import json
from typing import Any

from tests.providers.replay_server import fixture_bytes

APIS = ["openai-completions", "openai-responses", "anthropic-messages", "google-generative-ai"]

_TEXT = {
    "openai-completions": "vendor/openai-chat-text-usage.sse",
    "openai-responses": "vendor/openai-responses-text.sse",
    "anthropic-messages": "vendor/anthropic-thinking-text.sse",
    "google-generative-ai": "vendor/gemini-sse-thinking-text.sse",
}
_CALL = {
    "openai-completions": "vendor/openai-chat-tool-call-usage.sse",
    "openai-responses": "vendor/openai-responses-function-call.sse",
    "anthropic-messages": "vendor/anthropic-client-tool-json-args.reframed.sse",
    "google-generative-ai": "vendor/gemini-sse-function-call-thought-signature.sse",
}


class _Event:
    """One SSE event: its ``event:`` name (or ``None``), its data as text and as JSON."""

    def __init__(self, raw: str) -> None:
        self.name: str | None = None
        data: list[str] = []
        for line in raw.splitlines():
            if line.startswith("event:"):
                self.name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
        self.text = "\n".join(data)
        self.raw = raw
        try:
            self.json: Any = json.loads(self.text)
        except ValueError:
            self.json = None

    def with_json(self, value: Any) -> _Event:
        """A copy carrying ``value`` as its data."""
        head = f"event: {self.name}\n" if self.name else ""
        return _Event(f"{head}data: {json.dumps(value)}")


def _events(name: str) -> tuple[list[_Event], str]:
    body = fixture_bytes(name).decode()
    separator = "\r\n\r\n" if "\r\n\r\n" in body else "\n\n"
    return [_Event(chunk) for chunk in body.split(separator) if chunk.strip()], separator


def _body(events: list[_Event], separator: str) -> bytes:
    return (separator.join(e.raw for e in events) + separator).encode()


def text_stream(api: str, deltas: list[str]) -> bytes:
    """A stream of ``api`` whose answer is ``deltas``, one text delta each (anthropic and
    google keep the recording's thinking before it)."""
    events, separator = _events(_TEXT[api])
    return _body(_TEXT_BUILDERS[api](events, deltas), separator)


def tool_stream(api: str, name: str, arguments: dict[str, Any]) -> bytes:
    """A stream of ``api`` that calls ``name`` with ``arguments`` (sent in two pieces)."""
    events, separator = _events(_CALL[api])
    text = json.dumps(arguments)
    pieces = [text[: len(text) // 2], text[len(text) // 2 :]]
    return _body(_CALL_BUILDERS[api](events, name, arguments, pieces), separator)


# --- the answer's text ----------------------------------------------------------------------


def _chat_text(events: list[_Event], deltas: list[str]) -> list[_Event]:
    said = [bool(e.json and e.json.get("choices") and e.json["choices"][0]["delta"].get("content"))
            for e in events]  # fmt: skip
    first = said.index(True)
    template = events[first]
    out = events[:first]
    for delta in deltas:
        data = copy.deepcopy(template.json)
        data["choices"][0]["delta"]["content"] = delta
        out.append(template.with_json(data))
    return out + [e for e, d in zip(events[first:], said[first:], strict=True) if not d]


def _responses_text(events: list[_Event], deltas: list[str]) -> list[_Event]:
    whole = "".join(deltas)
    out: list[_Event] = []
    template = next(e for e in events if e.name == "response.output_text.delta")
    for event in events:
        if event.name == "response.output_text.delta":
            if event is template:
                for delta in deltas:
                    out.append(event.with_json({**event.json, "delta": delta}))
            continue
        out.append(event.with_json(_replace_text(event.json, whole)) if event.json else event)
    return out


def _replace_text(value: Any, whole: str) -> Any:
    """``value`` with every recorded ``text`` of an answer part set to ``whole``."""
    if isinstance(value, dict):
        changed = {k: _replace_text(v, whole) for k, v in value.items()}
        kind = value.get("type")
        if kind in ("output_text", "response.output_text.done") and value.get("text"):
            changed["text"] = whole  # a part as it ends (as it starts, it is empty)
        return changed
    if isinstance(value, list):
        return [_replace_text(v, whole) for v in value]
    return value


def _anthropic_text(events: list[_Event], deltas: list[str]) -> list[_Event]:
    out: list[_Event] = []
    done = False
    for event in events:
        data = event.json
        delta = data.get("delta", {}) if isinstance(data, dict) else {}
        if event.name == "content_block_delta" and delta.get("type") == "text_delta":
            if not done:
                for piece in deltas:
                    out.append(event.with_json({**data, "delta": {**delta, "text": piece}}))
                done = True
            continue
        out.append(event)
    return out


def _gemini_text(events: list[_Event], deltas: list[str]) -> list[_Event]:
    answers = [
        e for e in events if not e.json["candidates"][0]["content"]["parts"][0].get("thought")
    ]
    thoughts = events[: events.index(answers[0])]
    first, middle, last = answers[0], answers[1], answers[-1]
    out = list(thoughts)
    for index, delta in enumerate(deltas):
        template = first if index == 0 else last if index == len(deltas) - 1 else middle
        data = copy.deepcopy(template.json)
        data["candidates"][0]["content"]["parts"][0]["text"] = delta
        if len(deltas) == 1:
            data["candidates"][0]["finishReason"] = "STOP"
        out.append(template.with_json(data))
    return out


_TEXT_BUILDERS = {
    "openai-completions": _chat_text,
    "openai-responses": _responses_text,
    "anthropic-messages": _anthropic_text,
    "google-generative-ai": _gemini_text,
}


# --- a tool call ----------------------------------------------------------------------------


def _chat_call(
    events: list[_Event], name: str, args: dict[str, Any], pieces: list[str]
) -> list[_Event]:
    out = []
    template = None
    for event in events:
        data = event.json
        calls = data and data.get("choices") and data["choices"][0]["delta"].get("tool_calls")
        if not calls:
            out.append(event)
            continue
        function = calls[0]["function"]
        if "name" in function:
            data = copy.deepcopy(data)
            data["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] = name
            out.append(event.with_json(data))
        elif template is None:
            template = event
            for piece in pieces:
                data = copy.deepcopy(event.json)
                data["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = piece
                out.append(event.with_json(data))
    return out


def _responses_call(
    events: list[_Event], name: str, args: dict[str, Any], pieces: list[str]
) -> list[_Event]:
    text = "".join(pieces)
    out: list[_Event] = []
    template_seen = False
    for event in events:
        if event.name == "response.function_call_arguments.delta":
            if not template_seen:
                template_seen = True
                out += [event.with_json({**event.json, "delta": piece}) for piece in pieces]
            continue
        if event.json is None:
            out.append(event)
            continue
        added = event.name == "response.output_item.added"  # its arguments start empty
        out.append(event.with_json(_replace_call(event.json, name, "" if added else text)))
    return out


def _replace_call(value: Any, name: str, text: str) -> Any:
    if isinstance(value, dict):
        changed = {k: _replace_call(v, name, text) for k, v in value.items()}
        if value.get("type") == "function_call":
            changed["name"], changed["arguments"] = name, text
        if value.get("type") == "response.function_call_arguments.done":
            changed["arguments"] = text
        return changed
    if isinstance(value, list):
        return [_replace_call(v, name, text) for v in value]
    return value


def _anthropic_call(
    events: list[_Event], name: str, args: dict[str, Any], pieces: list[str]
) -> list[_Event]:
    out: list[_Event] = []
    done = False
    for event in events:
        data = event.json
        if event.name == "content_block_start":
            block = {**data["content_block"], "name": name}
            out.append(event.with_json({**data, "content_block": block}))
        elif event.name == "content_block_delta":
            if not done:
                delta = data["delta"]
                out += [
                    event.with_json({**data, "delta": {**delta, "partial_json": p}}) for p in pieces
                ]
                done = True
        else:
            out.append(event)
    return out


def _gemini_call(
    events: list[_Event], name: str, args: dict[str, Any], pieces: list[str]
) -> list[_Event]:
    data = copy.deepcopy(events[0].json)
    data["candidates"][0]["content"]["parts"][0]["functionCall"] = {"name": name, "args": args}
    return [events[0].with_json(data), *events[1:]]


_CALL_BUILDERS = {
    "openai-completions": _chat_call,
    "openai-responses": _responses_call,
    "anthropic-messages": _anthropic_call,
    "google-generative-ai": _gemini_call,
}
