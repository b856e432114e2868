"""Rules of your own: a regular expression (:class:`Pattern`) and a length (:class:`MaxLength`).

A pattern you write runs on text a user or a model chose: write it without nested repetition
(``(a+)+``, ``(\\w+\\s?)*``), which Python's ``re`` may take exponential time over on a crafted
input; bound every repetition you can (``{1,64}`` rather than ``+``).
"""

from __future__ import annotations

import re
from typing import Literal

from .base import PASS, Check, Finding, Guardrail, PatternGuardrail, Verdict


class Pattern(PatternGuardrail):
    """Refuses text that matches ``pattern`` (a string or a compiled expression): trips, or
    with ``action="redact"`` replaces each match (the group named ``secret`` only, if the
    pattern has one) with ``[redacted: <label>]``. ``hold``, for a streamed answer, is how
    many characters at its end to keep back unchecked until more arrived (the longest match
    you expect; default 64), so that a match is never cut by a checkpoint."""

    def __init__(
        self,
        pattern: str | re.Pattern[str],
        *,
        name: str = "pattern",
        label: str = "forbidden text",
        action: Literal["trip", "redact"] = "trip",
        flags: int = 0,
        hold: int = 64,
        beside: bool = False,
    ) -> None:
        super().__init__(action=action, name=name, beside=beside)
        self.pattern = re.compile(pattern, flags) if isinstance(pattern, str) else pattern
        if self.pattern.search("") is not None:
            raise ValueError(f"the pattern {self.pattern.pattern!r} matches empty text")
        self.labels = {"match": label}
        self._hold = hold

    def find(self, text: str) -> list[Finding]:
        """Every match of the pattern in ``text``."""
        group = "secret" if "secret" in self.pattern.groupindex else 0
        return [Finding(m.start(group), m.end(group), "match") for m in self.pattern.finditer(text)]

    def hold(self, text: str) -> int:
        """The last ``hold`` characters (see the class)."""
        return min(self._hold, len(text))


class MaxLength(Guardrail):
    """Refuses text longer than ``chars`` characters: the input, a tool call's arguments (their
    JSON), a tool result, or the answer (counted as it streams, each block of text on its own).
    ``action="redact"`` cuts the text at the limit, with ``marker`` at the cut, instead of
    ending the run (not for a tool call's arguments, which must stay valid JSON: there it
    trips)."""

    name = "max_length"

    def __init__(
        self,
        chars: int,
        *,
        action: Literal["trip", "redact"] = "trip",
        name: str | None = None,
        marker: str = " [cut]",
    ) -> None:
        if chars < 1:
            raise ValueError(f"chars must be 1 or more, got {chars}")
        if action not in ("trip", "redact"):
            raise ValueError(f"action must be 'trip' or 'redact', not {action!r}")
        self.chars, self.action, self.marker = chars, action, marker
        if name is not None:
            self.name = name
        self.beside = False  # counting characters is instant

    def check(self, text: str, check: Check) -> Verdict:
        """Pass text within the limit (the answer's text before this chunk counts too)."""
        used = len(check.before) if check.point == "output" else 0
        if used + len(text) <= self.chars:
            return PASS
        reason = f"{check.where} is longer than {self.chars} characters"
        if self.action == "trip" or check.point == "tool_call":
            return Verdict.trip(reason)
        room = max(self.chars - used, 0)
        if used > self.chars:
            return Verdict.redact("", reason)  # cut already: the rest is dropped
        return Verdict.redact(text[:room] + self.marker, reason)
