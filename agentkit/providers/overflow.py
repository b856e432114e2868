"""Telling a context overflow from any other refusal: each wire module lists how its API words
one (``OVERFLOW`` on its :class:`~.runner.ApiSpec`), llama.cpp's server has its own words in
whichever API it speaks (:data:`~.wire.LLAMA_CPP_OVERFLOW`), and the runner raises a match as
:class:`~agentkit.errors.ContextOverflowError`, so the loop can compact and retry.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from .wire import LLAMA_CPP_OVERFLOW


@functools.lru_cache(maxsize=16)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in (*patterns, *LLAMA_CPP_OVERFLOW)), re.I)


def is_context_overflow(message: str, patterns: Sequence[str] = ()) -> bool:
    """Whether an error ``message`` says the request did not fit the context window, in the
    words ``patterns`` (one API's) or llama.cpp's."""
    return bool(message) and _pattern(tuple(patterns)).search(message) is not None


def any_api_overflow(message: str) -> bool:
    """:func:`is_context_overflow` in any known API's words: for an error from a stream function
    that carries no :class:`~agentkit.errors.ProviderError` (a user's own, say)."""
    from . import anthropic, google, openai_completions, openai_responses

    every = (
        *openai_completions.OVERFLOW,
        *openai_responses.OVERFLOW,
        *anthropic.OVERFLOW,
        *google.OVERFLOW,
    )
    return is_context_overflow(message, every)
