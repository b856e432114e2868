"""Telling a context overflow from any other refusal: how each API words one, in one place.

Each wire module hands its API's words to the runner (``overflow`` on its
:class:`~.runner.ApiSpec`), llama.cpp's server has its own words in whichever API it speaks
(:data:`LLAMA_CPP`), and the runner raises a match as
:class:`~agentkit.errors.ContextOverflowError`, so the loop can compact and retry. The words are
data that the wire modules and the runner both read, so they live below both: this module
imports neither.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

OPENAI_COMPLETIONS = (
    r"context_length_exceeded",
    r"maximum context length is \d+",  # "This model's maximum context length is 128000 tokens"
    r"reduce the length of the messages",
)
"""How Chat Completions reports a request over the context window (HTTP 400, code
``context_length_exceeded``), as OpenAI and the servers that copy it word it."""

OPENAI_RESPONSES = (
    r"context_length_exceeded",
    r"exceeds the context window",  # "Your input exceeds the context window of this model."
    r"maximum context length is \d+",
)
"""How the Responses API reports a request over the context window (HTTP 400, or a
``response.failed`` event, code ``context_length_exceeded``)."""

ANTHROPIC_MESSAGES = (
    r"prompt is too long",  # "prompt is too long: 208310 tokens > 200000 maximum"
    r"input length and `?max_tokens`? exceed context limit",
    r"request exceeds the maximum allowed number of bytes",  # HTTP 413 request_too_large
)
"""How the Messages API reports a request over the context window (HTTP 400
``invalid_request_error``, or 413 ``request_too_large``)."""

GOOGLE = (
    # "The input token count (1196265) exceeds the maximum number of tokens allowed (1048575)."
    r"input token count.{0,40}exceeds the maximum",
)
"""How the Gemini API reports a request over the context window (HTTP 400
``INVALID_ARGUMENT``)."""

LLAMA_CPP = (
    r"exceed_context_size_error",
    # "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it"
    r"exceeds the available context size",
)
"""How llama.cpp's server (the embedded model's) reports a prompt over its ``--ctx-size``, in
whichever wire API it speaks: HTTP 400, type ``exceed_context_size_error``."""

EVERY_API = (*OPENAI_COMPLETIONS, *OPENAI_RESPONSES, *ANTHROPIC_MESSAGES, *GOOGLE)
"""The words of every API above (llama.cpp's are always matched)."""


@functools.lru_cache(maxsize=16)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (*patterns, *LLAMA_CPP)), re.I)


def is_context_overflow(message: str, patterns: Sequence[str] = ()) -> bool:
    """Whether an error ``message`` says the request did not fit the context window, in the
    words ``patterns`` (one API's) or llama.cpp's."""
    return bool(message) and _pattern(tuple(patterns)).search(message) is not None


def any_api_overflow(message: str) -> bool:
    """:func:`is_context_overflow` in any known API's words: for an error from a stream function
    that carries no :class:`~agentkit.errors.ProviderError` (a user's own, say)."""
    return is_context_overflow(message, EVERY_API)
