"""What a run gives back: :class:`RunResult`, the run's new messages plus its envelope.

A :class:`RunResult` *is* the list of new messages (a ``list`` subclass, so ``result[-1]`` and
``for m in result`` work as they always did), and also carries the final text, the typed
output, the usage totals, why the run stopped and its error. ``prompt()``, ``Run.result()`` and
``AgentRunStream.result()`` return one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Literal

from .errors import (  # noqa: F401 - OutputValidationError stays importable from here
    AbortError,
    BudgetExceededError,
    GuardrailTrippedError,
    OutputValidationError,
    ProviderError,
)
from .types import AssistantMessage, Usage

RunStopReason = Literal["stop", "length", "error", "aborted", "budget", "approval", "guardrail"]
"""Why a run ended: it finished (``stop``), its last reply hit the token limit (``length``),
it failed (``error``), it was aborted (``aborted``), a budget ended it (``budget``; the limit
is in :attr:`RunResult.budget`), tool calls wait for a decision recorded later
(``approval``; they are in :attr:`RunResult.pending_approvals`) or a guardrail tripped
(``guardrail``). A run policy may end a run with a word of its own
(:class:`~agentkit.policy.EndRun`)."""

_HTTP_STATUS = re.compile(r"\(HTTP (\d{3})\)")


class RunUsage(Usage):
    """Token and cost totals of a run: every request's :class:`~agentkit.Usage` added up, plus
    counts. ``cost`` comes from the catalog's prices; ``requests`` counts model requests,
    ``tool_calls`` the tool calls that were executed.
    """

    requests: int = 0
    tool_calls: int = 0

    def add(self, usage: Usage | None) -> None:
        """Add one request's (or one tool result's) usage to the totals."""
        if usage is None:
            return
        self.input += usage.input
        self.output += usage.output
        self.cache_read += usage.cache_read
        self.cache_write += usage.cache_write
        self.total_tokens += usage.total_tokens
        cost, more = self.cost, usage.cost
        cost.input += more.input
        cost.output += more.output
        cost.cache_read += more.cache_read
        cost.cache_write += more.cache_write
        cost.total += more.total


class RunResult(list[Any]):
    """A run's new messages (this list) and its envelope: output, usage, stop reason, error.

    ``text`` is the final assistant message's text (thinking excluded); ``output`` the
    validated typed output when the run had an ``output_type``; ``usage`` the run's totals;
    ``stop_reason`` why it ended and ``budget`` which limit ended it; ``error_message`` the
    failure text of an ``error``/``aborted`` run. :meth:`raise_for_error` turns a failure into
    an exception for callers who prefer them.

    It stays a ``list`` because ``prompt()`` returns the run's new messages and callers index,
    iterate and compare that list (a list subclass equals a plain list); the envelope rides
    along as attributes, and :attr:`messages` gives a plain copy.
    """

    def __init__(self, messages: Iterable[Any] = ()) -> None:
        super().__init__(messages)
        self.output: Any = None
        self.usage: RunUsage = RunUsage()
        self.stop_reason: RunStopReason | str = "stop"
        self.budget: str | None = None
        self.error_message: str | None = None
        self.error: BaseException | None = None
        self.pending_approvals: list[Any] = []
        """The calls that wait for a decision (:class:`~agentkit.ApprovalRequest`) when the
        run ended with stop reason ``approval``."""
        self.ending: Any = None
        """The :class:`~agentkit.policy.Ending` a policy asked for, if one ended the run (its
        ``detail`` says more: a guardrail's name and reason, say)."""

    @property
    def messages(self) -> list[Any]:
        """The new messages as a plain list (a copy)."""
        return list(self)

    @property
    def final_message(self) -> AssistantMessage | None:
        """The last assistant message of the run, or ``None`` if it has none."""
        for message in reversed(self):
            if isinstance(message, AssistantMessage):
                return message
        return None

    @property
    def text(self) -> str:
        """The text of the last assistant message that has any (``""`` if none does)."""
        for message in reversed(self):
            if isinstance(message, AssistantMessage) and message.text:
                return message.text
        return ""

    def copy_envelope(self, messages: Iterable[Any]) -> RunResult:
        """A result holding ``messages`` with this result's envelope (output, usage, ...)."""
        other = RunResult(messages)
        other.__dict__.update(self.__dict__)
        return other

    def raise_for_error(self) -> RunResult:
        """Raise if the run did not end well; return ``self`` otherwise (for chaining).

        A provider failure raises the :class:`~agentkit.ProviderError` that ended it (HTTP
        ``status``, ``retry_after``; for a stream function that reports none, one with the
        status read from its message); an invalid typed output raises
        :class:`OutputValidationError`; an abort raises :class:`~agentkit.AbortError`; a budget
        raises :class:`BudgetExceededError`; a guardrail's trip
        :class:`~agentkit.errors.GuardrailTrippedError`.
        """
        if self.stop_reason == "budget":
            raise BudgetExceededError(f"the run's budget {self.budget} was reached", self.budget)
        if self.stop_reason == "guardrail":
            detail = getattr(self.ending, "detail", None) or {}
            raise GuardrailTrippedError(
                self.error_message or f"the guardrail {self.budget} tripped",
                self.budget, detail.get("reason"), detail.get("point"),
            )  # fmt: skip
        if self.stop_reason not in ("error", "aborted"):
            return self
        if self.error is not None:
            raise self.error
        text = self.error_message or "the run failed"
        if self.stop_reason == "aborted":
            raise AbortError(text)
        match = _HTTP_STATUS.search(text)
        raise ProviderError(text, status=int(match.group(1)) if match else None)

    def __repr__(self) -> str:
        return (
            f"RunResult({len(self)} messages, stop_reason={self.stop_reason!r}, "
            f"text={self.text[:40]!r})"
        )


def finish_result(
    result: RunResult, ending: Any = None, aborted_text: str | None = None
) -> RunResult:
    """Settle how the run ended: the one writer of ``stop_reason``, ``error_message`` and
    ``budget``, called once as a run ends.

    The :class:`~agentkit.policy.Ending` a policy asked for wins (a budget, a wait for
    approval, a guardrail, an invalid typed output), unless the last response failed: a
    failure is never hidden. Otherwise the last assistant message says (``error``, ``aborted``,
    ``length``); a run aborted between responses (during its tools) is ``aborted`` with
    ``aborted_text``; else it stopped."""
    last = result.final_message
    failed = last is not None and last.stop_reason == "error"
    if ending is not None and not (failed and ending.reason != "error"):
        result.stop_reason, result.error_message = ending.reason, ending.message
        result.budget, result.ending = ending.budget, ending
        result.pending_approvals = list(ending.pending_approvals)
        if ending.error is not None:
            result.error = ending.error
    elif last is not None and last.stop_reason in ("error", "aborted"):
        result.stop_reason, result.error_message = last.stop_reason, last.error_message
    elif last is not None and last.stop_reason == "length":
        result.stop_reason = "length"
    elif aborted_text is not None:
        result.stop_reason, result.error_message = "aborted", aborted_text
    return result


def as_run_result(messages: Any) -> RunResult:
    """``messages`` as a :class:`RunResult` (a failed run's ``[failure]`` list included)."""
    if isinstance(messages, RunResult):
        return messages
    return finish_result(RunResult(messages))
