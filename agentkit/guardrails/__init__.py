"""Guardrails: checks on what goes into a run and what comes out of it, at four points (the
user's input, each tool call's arguments, each tool result before the model reads it, and the
answer, gated as it streams), each able to pass, redact or trip (end the run with stop reason
``"guardrail"``).

    from agentkit import Agent
    from agentkit.guardrails import Guardrails, ModelJudge, PII, Secrets

    agent = Agent(
        model=..., policies=[Guardrails(
            input=[PII(action="redact"), ModelJudge("The user does not ask for legal advice.")],
            tool_results=[Secrets(action="redact")],
            output=[Secrets()],
        )],
    )

:class:`Guardrails` is a run policy (:mod:`agentkit.policy`); the built-in checks are
:class:`Secrets`, :class:`PII`, :class:`Pattern`, :class:`MaxLength` and :class:`ModelJudge`,
and a check of your own subclasses :class:`Guardrail`. See docs/guardrails.md.
"""

from ..errors import GuardrailError, GuardrailTrippedError
from .base import PASS, Check, Finding, Guardrail, PatternGuardrail, Point, Verdict
from .judge import Judgement, ModelJudge
from .pii import PII, iban_valid, luhn_valid
from .policy import Guardrails
from .records import GUARDRAIL_ROLE, GuardrailRecord
from .rules import MaxLength, Pattern
from .secrets import SECRET_PATTERNS, Secrets

__all__ = [
    "GUARDRAIL_ROLE",
    "PASS",
    "PII",
    "SECRET_PATTERNS",
    "Check",
    "Finding",
    "Guardrail",
    "GuardrailError",
    "GuardrailRecord",
    "GuardrailTrippedError",
    "Guardrails",
    "Judgement",
    "MaxLength",
    "ModelJudge",
    "Pattern",
    "PatternGuardrail",
    "Point",
    "Secrets",
    "Verdict",
    "iban_valid",
    "luhn_valid",
]
