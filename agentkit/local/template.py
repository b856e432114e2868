"""The chat template shipped for the embedded model (``data/qwen2.5-tools.jinja``) and how a
request must word things for it: the tool block it writes into the system message, and the
mark that makes it word a failed tool result as a call to correct."""

from __future__ import annotations

import importlib.resources
from typing import Any

from ..types import Context, TextContent, ToolResultMessage
from .constants import TEMPLATE_FILENAME


def chat_template() -> str:
    """The chat template shipped with agentkit that makes the model's tool calls parseable."""
    resource = importlib.resources.files("agentkit.local") / "data" / TEMPLATE_FILENAME
    return resource.read_text(encoding="utf-8")


TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments as a single line with nothing else (no code fence, no markdown):\n"
    '{"name": <function-name>, "arguments": <args-json-object>}'
)
"""The tool block of the shipped chat template, for requests that declare tools in text."""

DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
"""The system message the template writes when a request has none."""

FAILED_RESULT_PREFIX = "The call failed: "
"""How a failed tool result's text begins in the embedded server's requests (an ``is_error``
result: a refusal, a validation error, a tool's exception). The shipped template words such a
result as a call to correct, not as a result to answer from (the server passes it only text)."""


def mark_failed_results(context: Context) -> Context:
    """``context`` with the text of each failed tool result (``is_error``) starting with
    :data:`FAILED_RESULT_PREFIX`; the same object when no result failed."""
    messages = [_marked(m) for m in context.messages]
    if all(new is old for new, old in zip(messages, context.messages, strict=True)):
        return context
    return context.model_copy(update={"messages": messages})



def _marked(message: Any) -> Any:
    """A failed tool result with :data:`FAILED_RESULT_PREFIX` before its text; any other
    message, or one already marked, as it is."""
    if not isinstance(message, ToolResultMessage) or not message.is_error:
        return message
    content = list(message.content)
    texts = [i for i, c in enumerate(content) if isinstance(c, TextContent)]
    if not texts:
        content.insert(0, TextContent(text=FAILED_RESULT_PREFIX.rstrip()))
    else:
        first = content[texts[0]]
        assert isinstance(first, TextContent)
        if first.text.startswith(FAILED_RESULT_PREFIX):
            return message
        content[texts[0]] = TextContent(text=FAILED_RESULT_PREFIX + first.text)
    return message.model_copy(update={"content": content})
