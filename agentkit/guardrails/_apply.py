"""Running a list of guardrails over one text, in order: the shared step of every point."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import AbortError, GuardrailError
from .base import POINT_TEXT, Check, Guardrail, Verdict


@dataclass
class Stop:
    """A guardrail ended the run: it tripped (``reason`` is its own) or failed (``error``)."""

    guardrail: str
    point: str
    action: Literal["trip", "error"]
    reason: str
    error: BaseException | None = None

    @property
    def message(self) -> str:
        """The run's ``error_message``."""
        where = POINT_TEXT.get(self.point, self.point)
        if self.action == "trip":
            return f"Stopped by the guardrail {self.guardrail!r} on {where}: {self.reason}"
        return f"The guardrail {self.guardrail!r} failed on {where}: {self.reason}"

    @property
    def detail(self) -> dict[str, str]:
        """What ``RunResult.ending.detail`` carries."""
        return {"guardrail": self.guardrail, "reason": self.reason, "point": self.point}


@dataclass
class Redaction:
    """A guardrail replaced part of a text ``count`` times."""

    guardrail: str
    reason: str
    count: int = 1


@dataclass
class Applied:
    """The text after the guardrails (redacted, perhaps), and the stop, if one stopped it."""

    text: str
    stop: Stop | None = None
    redactions: list[Redaction] = field(default_factory=list)


def apply(
    guardrails: Sequence[Guardrail], text: str, check_for: Callable[[Guardrail], Check]
) -> Applied:
    """Each guardrail in turn over ``text`` (a redaction is what the next one sees), until one
    trips or fails. An :class:`~agentkit.errors.AbortError` (the check's signal aborted) goes
    on up: the caller ends as the abort says."""
    redactions: list[Redaction] = []
    for guardrail in guardrails:
        check = check_for(guardrail)
        try:
            verdict = _verdict(guardrail.check(text, check), guardrail)
        except AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - a guardrail's failure ends the run, named
            detail = str(exc) or type(exc).__name__
            if not isinstance(exc, GuardrailError):
                detail = f"{type(exc).__name__}: {detail}"
            stop = Stop(guardrail.label, check.point, "error", detail)
            stop.error = GuardrailError(stop.message)
            stop.error.__cause__ = exc
            return Applied(text, stop, redactions)
        if verdict.action == "trip":
            stop = Stop(guardrail.label, check.point, "trip", verdict.reason)
            return Applied(text, stop, redactions)
        if verdict.action == "redact" and verdict.text != text:
            redactions.append(Redaction(guardrail.label, verdict.reason))
            text = verdict.text or ""
    return Applied(text, None, redactions)


def _verdict(value: object, guardrail: Guardrail) -> Verdict:
    if value is None:
        return Verdict()
    if not isinstance(value, Verdict):
        raise GuardrailError(f"check() returned {type(value).__name__}, not a Verdict or None")
    if value.action == "redact" and not isinstance(value.text, str):
        raise GuardrailError("a redact verdict needs the redacted text")
    if value.action not in ("pass", "redact", "trip"):
        raise GuardrailError(f"unknown verdict action {value.action!r}")
    return value
