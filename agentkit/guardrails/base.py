"""What every guardrail is made of: the text it is asked about and where (:class:`Check`), what
it decides (:class:`Verdict`), the class to subclass (:class:`Guardrail`) and the base of the
detectors that find spans of text (:class:`PatternGuardrail`: secrets, PII, your own regex).

A guardrail is a plain object with a ``check(text, check)`` method. It may be asked from
several threads at once (the input check has a thread of its own, tool results are checked on
their tool threads), so keep no state between calls, or guard it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..abort import AbortSignal
    from ..policy import RunScope
    from ..types import AssistantMessage, Model, OutputSchema, ToolCall

Point = Literal["input", "tool_call", "tool_result", "output"]
"""Where a guardrail checks: the user's ``input``, a ``tool_call``'s arguments, a
``tool_result`` before the model reads it, the ``output`` (the answer, as it streams)."""

POINT_TEXT: dict[str, str] = {
    "input": "the input",
    "tool_call": "a tool call's arguments",
    "tool_result": "a tool result",
    "output": "the answer",
}
"""How a point is named in a reason or an error message."""


@dataclass(frozen=True)
class Verdict:
    """A guardrail's decision about one text: ``"pass"`` it, ``"redact"`` it (go on with
    ``text``, the offending parts replaced) or ``"trip"`` (end the run). ``reason`` says why,
    in words that do not quote what was refused (it is shown and recorded)."""

    action: Literal["pass", "redact", "trip"] = "pass"
    reason: str = ""
    text: str | None = None

    @staticmethod
    def trip(reason: str) -> Verdict:
        """End the run: the guardrail refuses the text."""
        return Verdict("trip", reason)

    @staticmethod
    def redact(text: str, reason: str) -> Verdict:
        """Go on with ``text`` in place of what was checked."""
        return Verdict("redact", reason, text)


PASS = Verdict()
"""The verdict of a text a guardrail lets through (a check may also return ``None``)."""

Requester = Callable[..., "AssistantMessage"]


@dataclass(frozen=True)
class Check:
    """What a guardrail is asked about besides the text: the ``point``, the run (``run``, to
    read; ``None`` outside one), the ``signal`` that ends the check (an abort of the run, or of
    the input check when its request failed), the ``tool_call`` of a ``tool_call`` or
    ``tool_result`` check, and for the ``output``: ``before``, the answer's text released
    before this chunk, and ``final``, whether the chunk ends its block of text."""

    point: Point
    signal: AbortSignal
    run: RunScope | None = None
    tool_call: ToolCall | None = None
    before: str = ""
    final: bool = True
    requester: Requester | None = field(default=None, repr=False)

    def complete(
        self,
        messages: list[Any],
        *,
        max_tokens: int | None = None,
        output_schema: OutputSchema | None = None,
        model: Model | None = None,
    ) -> AssistantMessage:
        """One small request of the run's own, without tools (a judge's): made with the run's
        stream function and abort signal, ended at its deadline, its usage counted in the
        run's. ``model`` asks another model than the run's; ``output_schema`` a typed answer.
        Returns the final message (an ``error`` or ``aborted`` one when it failed)."""
        if self.requester is None:
            raise RuntimeError("this check belongs to no run: it cannot make a request")
        return self.requester(
            messages, signal=self.signal, max_tokens=max_tokens,
            output_schema=output_schema, model=model,
        )  # fmt: skip

    @property
    def where(self) -> str:
        """The point in words (``"the answer"``, ``"a tool result"``, ...)."""
        return POINT_TEXT[self.point]


class Guardrail:
    """A check of text at one or more points of a run (:class:`~agentkit.guardrails.Guardrails`
    says which).

    Override :meth:`check`. Its contract: it gets the text and a :class:`Check`, and returns a
    :class:`Verdict` (or ``None`` to pass). It may block (a model judge does); it should watch
    ``check.signal`` when it waits, so an abort ends it. Raising fails the run with a
    :class:`~agentkit.errors.GuardrailError` naming the guardrail.

    ``beside``: at the input point, check beside the request (on a thread of its own, the
    request's answer held until the check passes) rather than before it. A slow check (a model
    judge, a moderation service) belongs beside; a fast one that redacts, before, so that what
    it removes never leaves. :meth:`hold` is the guardrail's own checkpoint rule for a streamed
    answer."""

    name: str = ""
    """Names the guardrail in the result, the transcript and traces (default: the class name)."""
    beside: bool = True

    def check(self, text: str, check: Check) -> Verdict | None:
        """Decide about ``text`` (see the class)."""
        raise NotImplementedError(f"{type(self).__name__} must define check(text, check)")

    def hold(self, text: str) -> int:
        """For a streamed answer: how many characters at the end of ``text`` (the unchecked
        text up to a checkpoint) to keep back until more has arrived, because they may be the
        start of something this guardrail refuses once it is whole. ``len(text)`` waits for
        more; 0 (the default) checks all of it now. The end of the answer is always checked
        whole."""
        return 0

    @property
    def label(self) -> str:
        """The guardrail's name: ``name``, or its class name in lower case."""
        return self.name or type(self).__name__.lower()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.label}>"


# --- detectors of spans --------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A span of text a detector refuses: ``text[start:end]``, of ``kind`` (``"email"``,
    ``"openai_key"``, ...)."""

    start: int
    end: int
    kind: str


class PatternGuardrail(Guardrail):
    """A guardrail that finds spans (:meth:`find`) and either trips on the first or replaces
    each with ``[redacted: <label>]`` (``action="redact"``). A subclass defines :meth:`find`,
    ``labels`` (kind -> words) and, for streamed answers, :meth:`hold`.

    It runs before the request at the input point (a pattern check takes microseconds, and what
    it redacts then never reaches the model), unless ``beside=True`` is given. In a tool call's
    arguments it redacts string values one by one, so the arguments stay valid JSON."""

    labels: dict[str, str] = {}
    """Each kind of finding in words, for reasons and replacements."""

    def __init__(
        self,
        *,
        action: Literal["trip", "redact"] = "trip",
        name: str | None = None,
        beside: bool = False,
        replacement: str = "[redacted: {label}]",
    ) -> None:
        if action not in ("trip", "redact"):
            raise ValueError(f"action must be 'trip' or 'redact', not {action!r}")
        for char in '"\\':
            if char in replacement:
                raise ValueError(f"the replacement must not contain {char!r} (it goes into JSON)")
        self.action = action
        if name is not None:
            self.name = name
        self.beside = beside
        self.replacement = replacement

    def find(self, text: str) -> list[Finding]:
        """The spans of ``text`` to refuse, in order, not overlapping."""
        raise NotImplementedError

    def describe(self, kinds: Iterable[str]) -> str:
        """The kinds found, in words: ``"card number and email address"``."""
        words = sorted({self.labels.get(kind, kind.replace("_", " ")) for kind in kinds})
        if len(words) < 2:
            return words[0] if words else "nothing"
        return ", ".join(words[:-1]) + " and " + words[-1]

    def check(self, text: str, check: Check) -> Verdict:
        """Trip on the first finding, or redact every one (see the class)."""
        if check.point == "tool_call" and self.action == "redact":
            return self._redact_arguments(text, check)
        findings = self.find(text)
        if not findings:
            return PASS
        reason = f"{self.describe(f.kind for f in findings)} in {check.where}"
        if self.action == "trip":
            return Verdict.trip(reason)
        return Verdict.redact(self.redact(text, findings), reason)

    def redact(self, text: str, findings: list[Finding]) -> str:
        """``text`` with each finding replaced."""
        parts: list[str] = []
        at = 0
        for finding in findings:
            parts.append(text[at : finding.start])
            label = self.labels.get(finding.kind, finding.kind.replace("_", " "))
            parts.append(self.replacement.format(label=label))
            at = finding.end
        parts.append(text[at:])
        return "".join(parts)

    def _redact_arguments(self, text: str, check: Check) -> Verdict:
        """A tool call's arguments (JSON text) with their string values redacted one by one."""
        kinds: list[str] = []

        def clean(value: Any) -> Any:
            if isinstance(value, dict):
                return {key: clean(item) for key, item in value.items()}
            if isinstance(value, list):
                return [clean(item) for item in value]
            if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
                found = self.find(str(value))
                if found:
                    kinds.extend(f.kind for f in found)
                    return self.redact(str(value), found)
            return value

        redacted = clean(json.loads(text))
        if not kinds:
            return PASS
        reason = f"{self.describe(kinds)} in {check.where}"
        return Verdict.redact(json.dumps(redacted, ensure_ascii=False), reason)


def spans(matches: Iterable[Finding]) -> list[Finding]:
    """``matches`` in order of their start, without those overlapping an earlier one."""
    kept: list[Finding] = []
    end = -1
    for finding in sorted(matches, key=lambda f: (f.start, -f.end)):
        if finding.start >= end:
            kept.append(finding)
            end = finding.end
    return kept


def trailing_run(text: str, allowed: Callable[[str], bool], cap: int) -> int:
    """How many characters at the end of ``text`` satisfy ``allowed``, at most ``cap`` (read
    backwards one character at a time: the cost is the run's length, never the text's)."""
    count = 0
    for index in range(len(text) - 1, max(len(text) - cap, 0) - 1, -1):
        if not allowed(text[index]):
            break
        count += 1
    return count
