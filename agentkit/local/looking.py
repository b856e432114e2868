"""Look before answering: a small model asked about a file or a command must call a tool first.

Small local models answer "the secret word in notes.txt is 'secret'" without reading the file,
or explain how one would call the tool instead of calling it. The measure is general, not a
list of prompts: when the user's latest message names something the tools can look at -- a
file or folder that exists in the workspace, a command to run, or a search of the workspace
("which file mentions budget?") -- and the model has not
looked at anything since that message, the request asks for a tool call (``tool_choice``
"required", which the embedded server's grammar turns into "a call and nothing else"). Once a
tool result is in, the model answers freely.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..loop import StreamFn
from ..transcript import get_current_tools
from ..types import Model, as_stream_options, role_of

_WORD = re.compile(r"[\w./-]+")
_COMMAND = re.compile(r"\b(?:run|execute)\b[^.?!\n]*?(?:command|`)|`[^`\n]+`", re.I)
"""A command the user asks to run: "Run the command: ...", "execute `make test`", `ls -l`."""
_SEARCH = re.compile(
    r"\b(?:search|grep|find|list|look\s+(?:for|in|through)|which\s+files?)\b.*?\b(?:workspace|"
    r"folders?|director(?:y|ies)|files?|project|tree|repo(?:sitory)?)\b|\b(?:workspace|files?|"
    r"folders?)\b.*?\b(?:mention|contain|include|define)s?\b",
    re.I | re.S,
)
"""A request to search the workspace: "search the workspace for budget", "which file mentions
it?", "list the files of the project"."""


def names_to_look_at(text: str, workspace: Path) -> list[str]:
    """The files and folders of ``workspace`` that ``text`` names (relative paths, with or
    without ``./``), in the order it names them; ``.`` alone and names outside the workspace do
    not count."""
    root = workspace.resolve()
    named: list[str] = []
    for word in _WORD.findall(text):
        candidate = word.strip("./") if word not in (".", "..") else ""
        if not candidate or candidate in named or len(candidate) > 255:
            continue
        try:
            target = (root / candidate).resolve()
        except (OSError, ValueError):
            continue
        if target != root and target.is_relative_to(root) and target.exists():
            named.append(candidate)
    return named


def asks_to_look(messages: Sequence[Any], workspace: Path) -> bool:
    """Whether the latest user message names a workspace file or folder, a command or a search
    of the workspace, and no tool result has come in since it."""
    for message in reversed(messages):
        role = role_of(message)
        if role == "tool_result":
            return False
        if role == "user":
            text = _text_of(getattr(message, "content", ""))
            return bool(
                _COMMAND.search(text)
                or _SEARCH.search(text)
                or names_to_look_at(text, workspace)
            )
    return False


def with_look_first(stream_fn: StreamFn | None, workspace: Path) -> StreamFn:
    """A stream function that asks for a tool call (``tool_choice`` "required") while the
    latest user message names something in ``workspace`` or a command and nothing has been
    looked at since (:func:`asks_to_look`); other requests go through unchanged."""
    from ..loop import get_default_stream_fn

    def stream(model: Model, context: Any, options: Any) -> Any:
        inner = stream_fn or get_default_stream_fn()
        options = as_stream_options(options)
        declared = context.tools or get_current_tools(context.messages)  # the loop declares
        # tools in the transcript's system messages; a caller may pass them directly
        if declared and options.tool_choice is None and asks_to_look(context.messages, workspace):
            options = options.model_copy(update={"tool_choice": "required"})
        return inner(model, context, options)

    return stream


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(getattr(part, "text", "") for part in content or [])
