"""Preparing a transcript for one model, whatever produced it.

:func:`prepare_context` replays the system messages (explicit ``Context.system_prompt`` and
``tools`` win), validates the other messages into our pydantic types, and makes the transcript
acceptable to the target API: failed or aborted assistant turns are dropped, thinking is replayed
only to the API (and provider) that signed it, tool-call ids are rewritten to what the target
accepts (consistently for calls and their results), calls that never got a result get a
placeholder one, and images become a note for text-only models.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..transcript import split_transcript
from ..types import (
    AssistantMessage,
    Context,
    ImageContent,
    Model,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    role_of,
)

IMAGE_OMITTED = "(image omitted: this model does not accept images)"
NO_RESULT = "No result provided"

_SAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass
class PreparedContext:
    """A transcript ready to convert: the system prompt, tools, and the conversation."""

    system_prompt: str
    tools: list[Tool]
    messages: list[UserMessage | AssistantMessage | ToolResultMessage]


def short_hash(text: str, length: int = 12) -> str:
    """A stable short hex digest, used to keep shortened ids unique."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]


def safe_id(raw: str, max_length: int) -> str:
    """``raw`` reduced to ``[a-zA-Z0-9_-]`` and at most ``max_length`` characters.

    An id that already fits is kept; any other gets a digest of the original appended, so two
    ids that differ only in what was cut or replaced stay distinct.
    """
    if len(raw) <= max_length and not _SAFE_ID.search(raw) and raw:
        return raw
    cleaned = _SAFE_ID.sub("_", raw) or "call"
    digest = short_hash(raw, 10)
    return f"{cleaned[: max_length - len(digest) - 1]}_{digest}"


def call_part(tool_call_id: str) -> str:
    """The ``call_id`` of a Responses-style ``call_id|item_id`` id (other ids unchanged)."""
    return tool_call_id.split("|", 1)[0] or tool_call_id


def _validate(message: Any) -> UserMessage | AssistantMessage | ToolResultMessage | None:
    role = role_of(message)
    types: dict[str, Any] = {
        "user": UserMessage,
        "assistant": AssistantMessage,
        "tool_result": ToolResultMessage,
    }
    cls = types.get(role or "")
    if cls is None:
        return None
    if isinstance(message, cls):
        return message
    if isinstance(message, dict):
        return cls.model_validate(message)
    return cls.model_validate(message, from_attributes=True)


def same_source(message: AssistantMessage, model: Model) -> bool:
    """Whether ``message`` came from the same provider and API as ``model`` (signatures valid)."""
    return message.provider == model.provider and message.api == model.api


def prepare_context(
    model: Model,
    context: Context,
    normalize_id: Callable[[str], str] | None = None,
) -> PreparedContext:
    """The transcript made acceptable to ``model``'s API (see the module docstring)."""
    prompt, tools, rest = split_transcript(context.messages)
    if context.system_prompt is not None:
        prompt = context.system_prompt
    if context.tools is not None:
        tools = list(context.tools)
    accepts_images = "image" in model.input

    validated = [m for m in (_validate(m) for m in rest) if m is not None]
    id_map: dict[str, str] = {}

    def map_id(raw: str) -> str:
        if normalize_id is None:
            return raw
        if raw not in id_map:
            id_map[raw] = normalize_id(raw)
        return id_map[raw]

    out: list[UserMessage | AssistantMessage | ToolResultMessage] = []
    pending: dict[str, ToolCall] = {}  # calls of the last assistant turn without a result yet

    def flush_pending() -> None:
        for call in pending.values():
            out.append(
                ToolResultMessage(
                    tool_call_id=call.id,
                    tool_name=call.name,
                    content=[TextContent(text=NO_RESULT)],
                    is_error=True,
                )
            )
        pending.clear()

    for message in validated:
        if isinstance(message, AssistantMessage):
            flush_pending()
            if message.stop_reason in ("error", "aborted"):
                continue
            converted = _convert_assistant(message, model, map_id)
            if converted is None:
                continue
            out.append(converted)
            for block in converted.content:
                if isinstance(block, ToolCall):
                    pending[block.id] = block
        elif isinstance(message, ToolResultMessage):
            call_id = map_id(message.tool_call_id)
            if call_id not in pending:
                continue  # a result for a call the model will not see
            pending.pop(call_id)
            content = [_image_or_note(b, accepts_images) for b in message.content]
            if call_id != message.tool_call_id or _changed(content, message.content):
                message = message.model_copy(update={"tool_call_id": call_id, "content": content})
            out.append(message)
        else:
            flush_pending()
            if isinstance(message.content, list):
                content = [_image_or_note(b, accepts_images) for b in message.content]
                if _changed(content, message.content):
                    message = message.model_copy(update={"content": content})
            out.append(message)
    flush_pending()
    return PreparedContext(system_prompt=prompt, tools=tools, messages=out)


def _changed(new: list[Any], old: list[Any]) -> bool:
    """Whether a converted content list differs from the original (block by block identity).

    Unchanged messages and blocks are passed on as they are: the converters only read them, and
    copying every message of a growing transcript on every request is the cost of a long run.
    """
    return len(new) != len(old) or any(a is not b for a, b in zip(new, old, strict=True))


def _image_or_note(block: Any, accepts_images: bool) -> Any:
    if isinstance(block, ImageContent) and not accepts_images:
        return TextContent(text=IMAGE_OMITTED)
    return block


def _convert_assistant(
    message: AssistantMessage, model: Model, map_id: Callable[[str], str]
) -> AssistantMessage | None:
    same = same_source(message, model)
    content: list[Any] = []
    for block in message.content:
        if isinstance(block, ThinkingContent):
            if same:
                content.append(block)
            elif block.thinking.strip() and not block.redacted:
                content.append(TextContent(text=block.thinking))
        elif isinstance(block, ToolCall):
            call_id = map_id(block.id)
            if call_id == block.id and (same or block.thought_signature is None):
                content.append(block)
                continue
            update: dict[str, Any] = {"id": call_id}
            if not same:
                update["thought_signature"] = None
            content.append(block.model_copy(update=update))
        elif isinstance(block, TextContent):
            if same or block.text_signature is None:
                content.append(block)
            else:
                content.append(block.model_copy(update={"text_signature": None}))
    if not content:
        return None
    if not _changed(content, message.content):
        return message
    return message.model_copy(update={"content": content})


def text_of(blocks: Any) -> str:
    """The text of a content list (or a string), images left out, joined with newlines."""
    if isinstance(blocks, str):
        return blocks
    return "\n".join(b.text for b in blocks if isinstance(b, TextContent))


def images_of(blocks: Any) -> list[ImageContent]:
    """The images of a content list."""
    if isinstance(blocks, str):
        return []
    return [b for b in blocks if isinstance(b, ImageContent)]
