"""Preparing a transcript for one model, whatever produced it.

:func:`prepare_context` replays the system messages (explicit ``Context.system_prompt`` and
``tools`` win), validates the other messages into our pydantic types, and makes the transcript
acceptable to the target API: failed or aborted assistant turns are dropped, thinking is replayed
only to the API (and provider) that signed it, tool-call ids are rewritten to what the target
accepts (consistently for calls and their results), calls that never got a result get a
placeholder one, and images become a note for text-only models.

Each message's conversion is remembered (:class:`ConversionMemo`) while the message lives and
nothing a conversion reads has changed, so a growing transcript is not converted again, message
by message, on every request of a run.
"""

from __future__ import annotations

import hashlib
import operator
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
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
    as_model,
    role_of,
)

IMAGE_OMITTED = "(image omitted: this model does not accept images)"
NO_RESULT = "No result provided"

_SAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass
class PreparedContext:
    """A transcript ready to convert: the system prompt, tools, and the conversation.

    ``memos`` runs beside ``messages``: for each message, a dict in which a provider may keep
    its wire form of that message, under a key naming the API and the settings the form
    depends on (``None``: nothing may be kept, e.g. for a placeholder result). A dict lives as
    long as the transcript message it came from stays unchanged (see :class:`ConversionMemo`).
    The prepared messages and what is kept are shared between requests: read them, never change
    them.
    """

    system_prompt: str
    tools: list[Tool]
    messages: list[UserMessage | AssistantMessage | ToolResultMessage]
    memos: list[dict[Any, Any] | None] = field(default_factory=list)


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


_BY_ROLE: dict[str, Any] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "tool_result": ToolResultMessage,
}
_CONVERTIBLE = frozenset(_BY_ROLE.values())


def _validate(message: Any) -> UserMessage | AssistantMessage | ToolResultMessage | None:
    cls = _BY_ROLE.get(role_of(message) or "")
    if cls is None:
        return None
    return as_model(cls, message)


def same_source(message: AssistantMessage, model: Model) -> bool:
    """Whether ``message`` came from the same provider and API as ``model`` (signatures valid)."""
    return message.provider == model.provider and message.api == model.api


_ATOMS = frozenset({str, int, float, bool, type(None)})
"""Types whose values never change: a fingerprint compares them by identity."""
_BLOCKS = frozenset({TextContent, ImageContent, ThinkingContent, ToolCall})


def fingerprint(message: Any) -> tuple[Any, ...] | None:
    """Everything of a pydantic ``message`` that a conversion may read, as a flat tuple of
    objects, or ``None`` when some of it could change without any of these objects being
    replaced (a list or dict inside tool arguments, a block of another kind).

    That is the message's fields, then its content blocks and their fields, and a tool call's
    arguments. Other nested objects (``usage``, ``details``) count by identity only: no
    conversion reads into them. Block fields are strings, flags or ``None``, as typed.

    Two fingerprints taken while the same objects stay alive are equal element by element
    (``is``) exactly when nothing was replaced, added, removed or reordered: every list, block
    and dict is followed by its length and what it holds, strings and numbers never change in
    place, and the fingerprint holds its objects, so none of them can be freed and its id
    reused.
    """
    parts = [message.__class__, *message.__dict__.values()]
    content = message.content
    if content.__class__ is list:
        parts.append(len(content))
        for block in content:
            kind = block.__class__
            if kind not in _BLOCKS:
                return None
            parts.append(block)
            parts.extend(block.__dict__.values())
            if kind is ToolCall:
                arguments = block.arguments
                values = list(arguments.values())
                if not _ATOMS.issuperset(map(type, values)):
                    return None
                parts.append(len(values))
                parts.extend(arguments)
                parts.extend(values)
    elif content.__class__ is not str:
        return None
    return tuple(parts)


class _Entry:
    """One message's remembered conversion: for which message (weakly), under which settings,
    as of which fingerprint; ``converted`` is ``_SAME`` when the message itself is passed on
    (so the entry never keeps its message alive); ``memo`` is what providers keep."""

    __slots__ = ("ref", "key", "fingerprint", "converted", "memo")

    def __init__(
        self, ref: weakref.ref[Any], key: Any, fingerprint: tuple[Any, ...], converted: Any
    ) -> None:
        self.ref = ref
        self.key = key
        self.fingerprint = fingerprint
        self.converted = converted
        self.memo: dict[Any, Any] = {}


_SAME = object()


class ConversionMemo:
    """Each transcript message's conversion, remembered while the message lives and its
    :func:`fingerprint` is unchanged.

    A run sends the whole transcript with every request, and the transcript grows by a few
    messages a turn; without this, every message is converted again on every request. The
    fingerprint sees a message edited in place (a block's text, a tool call's arguments, a
    content list appended to) as well as one replaced, so an edit by a hook or an application
    is never answered from memory. Entries are keyed by ``id(message)`` and removed when the
    message is freed (a weak reference's callback), before that id can be reused. The dict's
    single-key reads and writes are atomic, so agents on several threads may share it.
    """

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}

    def converted(
        self, message: Any, key: Any, convert: Callable[[Any], Any]
    ) -> tuple[Any, dict[Any, Any] | None]:
        """``convert(message)`` (remembered under ``key``) and the dict in which providers may
        keep its wire forms (``None`` when the message cannot be remembered)."""
        current = fingerprint(message)
        if current is None:
            return convert(message), None
        entry = self._entries.get(id(message))
        if (
            entry is not None
            and entry.ref() is message
            and entry.key == key
            and len(entry.fingerprint) == len(current)
            and all(map(operator.is_, entry.fingerprint, current))
        ):
            return (message if entry.converted is _SAME else entry.converted), entry.memo
        converted = convert(message)
        entries, ident = self._entries, id(message)
        try:
            ref = weakref.ref(message, lambda _ref: entries.pop(ident, None))
        except TypeError:  # an object without weak references: not remembered
            return converted, None
        entry = _Entry(ref, key, current, _SAME if converted is message else converted)
        entries[ident] = entry
        return converted, entry.memo

    def __len__(self) -> int:
        return len(self._entries)


MEMO = ConversionMemo()
"""The conversions of every transcript message alive (one for the process)."""


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
    # What a message's conversion depends on besides the message itself.
    key = (model.provider, model.api, accepts_images, normalize_id)
    id_map: dict[str, str] = {}

    def map_id(raw: str) -> str:
        if normalize_id is None:
            return raw
        if raw not in id_map:
            id_map[raw] = normalize_id(raw)
        return id_map[raw]

    def convert(message: UserMessage | AssistantMessage | ToolResultMessage) -> Any:
        return _convert(message, model, accepts_images, map_id)

    out: list[UserMessage | AssistantMessage | ToolResultMessage] = []
    memos: list[dict[Any, Any] | None] = []
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
            memos.append(None)
        pending.clear()

    for raw in rest:
        message = raw if raw.__class__ in _CONVERTIBLE else _validate(raw)
        if message is None:
            continue
        if message is raw:
            converted, memo = MEMO.converted(message, key, convert)
        else:  # validated from a dict or another object: new on every request
            converted, memo = convert(message), None
        if isinstance(message, AssistantMessage):
            if pending:
                flush_pending()
            if converted is None:  # failed, aborted, or nothing left to send
                continue
            for block in converted.content:
                if isinstance(block, ToolCall):
                    pending[block.id] = block
        elif isinstance(message, ToolResultMessage):
            if pending.pop(converted.tool_call_id, None) is None:
                continue  # a result for a call the model will not see
        elif pending:
            flush_pending()
        out.append(converted)
        memos.append(memo)
    flush_pending()
    return PreparedContext(system_prompt=prompt, tools=tools, messages=out, memos=memos)


def _convert(
    message: UserMessage | AssistantMessage | ToolResultMessage,
    model: Model,
    accepts_images: bool,
    map_id: Callable[[str], str],
) -> Any:
    """One message made acceptable to ``model`` (``None``: an assistant turn to leave out).
    Unchanged messages and blocks are passed on as they are."""
    if isinstance(message, AssistantMessage):
        if message.stop_reason in ("error", "aborted"):
            return None
        return _convert_assistant(message, model, map_id)
    if isinstance(message, ToolResultMessage):
        call_id = map_id(message.tool_call_id)
        content = [_image_or_note(b, accepts_images) for b in message.content]
        if call_id != message.tool_call_id or _changed(content, message.content):
            return message.model_copy(update={"tool_call_id": call_id, "content": content})
        return message
    if isinstance(message.content, list):
        content = [_image_or_note(b, accepts_images) for b in message.content]
        if _changed(content, message.content):
            return message.model_copy(update={"content": content})
    return message


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
