"""Every exception agentkit raises, in one hierarchy under :class:`AgentError`.

Each is defined here and nowhere else; the module that raises one imports it (and keeps the
name importable, so ``agentkit.sessions.SessionError`` and ``agentkit.errors.SessionError`` are
the same class). Nothing here imports an optional dependency, so the errors of the MCP, Celery,
local-model and workspace integrations can be caught without installing them.

Names ending in ``Error`` are failures. The two signals are not: :class:`ToolRetry` is how a
tool asks the model to call it again, :class:`BudgetReached` is the abort reason of a run whose
time ran out; both say what they are for and never reach the caller of a run as exceptions.

::

    AgentError
    ├── AgentBusyError                a prompt, continue or reset during a run
    ├── CannotContinueError           continue_() with nothing to continue from
    ├── AbortError                    an operation stopped by its run's abort
    │   └── RequestAbortedError       internal to the providers: a request stopped by the abort
    ├── ToolArgumentsError            a tool call's arguments do not match its schema
    │   └── PlaceholderArgumentsError (also ValueError) a placeholder the local model copied
    ├── NoStreamFunctionError         no stream function given and no default configured
    ├── ProviderError                 a provider unreachable, refusing, or breaking off
    │   ├── ContextOverflowError      the request did not fit the model's context window
    │   └── QuotaWaitError            not sent: its rate limiter would hold it too long
    ├── UnknownModelError             (also KeyError) get_model found no such model
    ├── StreamEndedError              a stream ended without its result
    ├── OutputValidationError         no valid typed output within the retry budget
    ├── BudgetExceededError           raise_for_error() of a run a budget ended
    ├── GuardrailTrippedError         raise_for_error() of a run a guardrail ended
    ├── GuardrailError                a guardrail failed (it raised, or could not decide)
    ├── AgentRunFailedError           a Celery run ended in an error or was aborted
    ├── ApprovalError                 a decision on a call that does not wait (decided twice)
    ├── CompactionError               a compaction could not be made
    ├── SessionError
    │   ├── SessionConflictError      another writer appended first; nothing written
    │   ├── SessionStoreError         the store failed or could not be reached
    │   ├── SessionCorruptError       a stored message unreadable or missing
    │   ├── SessionImportError        a JSONL import rejected at a line
    │   └── RunLogError               a run log asked for what it does not hold
    │       └── RunNotFoundError      (also KeyError) no run of that id in the store
    ├── LedgerError                   the spend ledger's store failed, or a key or cap is bad
    │   └── SpendCapError             a reservation would take a key's spend past its cap
    ├── MCPServerError                an MCP server could not be started, reached or listed
    ├── LocalModelError               the embedded model could not be prepared or started
    │   ├── LocalModelNotInstalledError
    │   └── LocalModelIntegrityError
    ├── WorkspaceError                a workspace tool asked for what it must not or cannot do
    │   └── MissingPathError
    ├── CliError                      a command-line problem the user can fix
    ├── ToolRetry                     signal: a tool asks the model to call it again
    └── BudgetReached                 signal: the abort reason of a run out of time
"""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    """Base of agentkit's own errors."""


class AgentBusyError(AgentError):
    """A prompt, continue or reset was asked for while a run is active."""


class CannotContinueError(AgentError):
    """``continue_()`` has nothing to continue from."""


class AbortError(AgentError):
    """An operation was stopped because its run was aborted."""


class RequestAbortedError(AbortError):
    """A provider request was stopped through its signal. The providers catch it and end the
    stream as aborted, so it never reaches their caller."""


class ToolArgumentsError(AgentError):
    """A tool call's arguments do not match the tool's schema (the message is what the model sees)."""


class PlaceholderArgumentsError(ToolArgumentsError, ValueError):
    """A call refused because an argument is a placeholder copied from the tool list
    (:func:`agentkit.local.repair.find_placeholders`); its text, which the model reads as the
    tool's result, says what to send instead."""


class NoStreamFunctionError(AgentError):
    """No stream function was given and no default is configured."""


class ProviderError(AgentError):
    """A provider could not be reached, refused a request or broke off its stream.

    ``str(error)`` is the readable message (never an API key); ``status`` is the HTTP status
    when the server answered with one; ``retry_after`` the seconds it asked to wait (from
    ``Retry-After`` or ``retry-after-ms``); ``retryable`` whether another attempt may help.
    The providers raise it on their request thread, where the runner's retry policy catches it;
    a stream function never raises it to its caller, whose stream ends with an ``error`` event
    carrying the same message and this error (``ErrorEvent.provider_error``) instead; a run it
    ended raises it from ``RunResult.raise_for_error()``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after
        self.retryable = retryable


class ContextOverflowError(ProviderError):
    """The request did not fit the model's context window: the provider said so in its own
    words (:mod:`agentkit.providers.overflow` lists each API's), or, after compaction, the
    run's conversation still does not fit. With compaction configured
    (:mod:`agentkit.compaction`) the loop compacts and retries the request once on the first.
    """


class QuotaWaitError(ProviderError):
    """A request was not sent: its :class:`~agentkit.limits.RateLimiter` bucket would hold it
    back longer than it waits (a pause set by a 429's ``Retry-After`` beyond the request's
    ``max_retry_delay_ms``, any wait beyond the limiter's ``max_wait``, or any pause for a model
    with a fallback). ``retry_after`` is how long the bucket is held. Not retried; failover
    moves on to the next model, as for a 429.
    """


class UnknownModelError(AgentError, KeyError):
    """``get_model`` found no such model; the message lists close matches."""

    def __str__(self) -> str:
        # KeyError's own __str__ would show the message quoted, as a key's repr
        return str(self.args[0]) if self.args else "unknown model"


class StreamEndedError(AgentError):
    """The stream ended without the event or value that carries its result."""


class OutputValidationError(AgentError):
    """The model never produced output matching ``output_type`` within its retry budget.

    ``errors`` is the text of the last validation errors (what the model was last told).
    """

    def __init__(self, message: str, errors: str) -> None:
        super().__init__(message)
        self.errors = errors


class BudgetExceededError(AgentError):
    """Raised by :meth:`RunResult.raise_for_error` when a budget ended the run; ``limit`` names
    the budget (``"max_turns"``, ``"timeout"``, ...)."""

    def __init__(self, message: str, limit: str | None) -> None:
        super().__init__(message)
        self.limit = limit


class GuardrailTrippedError(AgentError):
    """Raised by :meth:`RunResult.raise_for_error` when a guardrail ended the run
    (:mod:`agentkit.guardrails`); ``guardrail`` names it, ``reason`` says why, ``point`` is
    where it tripped (``"input"``, ``"tool_call"``, ``"tool_result"`` or ``"output"``)."""

    def __init__(
        self, message: str, guardrail: str | None, reason: str | None, point: str | None = None
    ) -> None:
        super().__init__(message)
        self.guardrail, self.reason, self.point = guardrail, reason, point


class GuardrailError(AgentError):
    """A guardrail failed instead of deciding: its check raised, or a model judge got no
    usable answer. The run it guarded ends with stop reason ``error`` and this error."""


class AgentRunFailedError(AgentError):
    """A Celery run (:func:`agentkit.integrations.celery.run_session`) ended in an error or was
    aborted; the session holds what happened."""


class ApprovalError(AgentError):
    """A decision that cannot be recorded: the call was decided already (a decision is
    recorded once), resumed, or never waited; or a prompt while calls wait for approval."""
class CompactionError(AgentError):
    """A compaction could not be made (its summary request failed, or nothing can be dropped
    without splitting a tool call from its result); the transcript is unchanged."""


# --- sessions -----------------------------------------------------------------------------------


class SessionError(AgentError):
    """Base of the session errors."""


class SessionConflictError(SessionError):
    """Another writer appended to the session since this writer last read it; nothing was
    written. Reload the session (``Session.load()``) to see what the other writer added."""

    def __init__(self, name: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {name!r} was changed by another writer: this writer expected version "
            f"{expected}, the store has version {actual}; nothing was written (reload the "
            "session and retry)"
        )
        self.name, self.expected, self.actual = name, expected, actual


class SessionStoreError(SessionError):
    """The store could not be reached or failed; what it had committed before is kept."""


class SessionCorruptError(SessionError):
    """A stored session cannot be read: a record is not a message, or records are missing
    (changed or deleted outside agentkit). The message names the store, the session and the
    position; other sessions in the store stay usable, and nothing is written."""

    def __init__(self, store: str, name: str, position: int, reason: str) -> None:
        super().__init__(
            f"session {name!r} in {store}: the stored message at position {position} "
            f"(counting from 0) {reason}; the session was changed outside agentkit"
        )
        self.name = name
        self.position = position


class SessionImportError(SessionError):
    """A JSONL import was rejected; ``line`` is the 1-based line at fault. Nothing was imported."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}; nothing was imported")
        self.line = line


class RunLogError(SessionError):
    """A run log (:mod:`agentkit.runlog`) was asked for what it does not hold: an ``after``
    past the run's last event, a store that keeps no run log, a bad run id."""


class RunNotFoundError(RunLogError, KeyError):
    """No run of this id in the store (never started there, or its log expired)."""

    def __init__(self, run_id: str, store: str) -> None:
        super().__init__(f"no run {run_id!r} in {store} (never started there, or its log expired)")
        self.run_id = run_id

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


# --- the spend ledger ---------------------------------------------------------------------------


class LedgerError(AgentError):
    """The spend ledger (:mod:`agentkit.ledger`) could not do what was asked: its store failed
    or could not be reached (what it had committed is kept), or a key or cap is malformed."""


class SpendCapError(LedgerError):
    """A reservation was refused: with it, a key's spend in a window would pass its cap.
    ``key``, ``window`` and ``period`` say where (``"user:u1"``, ``"day"``, ``"2026-12-03"``),
    ``cap_usd``/``cap_tokens`` the cap, ``usd``/``tokens`` what is spent and held there now,
    and ``asked_usd``/``asked_tokens`` what the refused reservation asked for."""

    def __init__(
        self,
        message: str,
        *,
        key: str,
        window: str,
        period: str,
        cap_usd: float | None,
        cap_tokens: int | None,
        usd: float,
        tokens: int,
        asked_usd: float,
        asked_tokens: int,
    ) -> None:
        super().__init__(message)
        self.key, self.window, self.period = key, window, period
        self.cap_usd, self.cap_tokens = cap_usd, cap_tokens
        self.usd, self.tokens = usd, tokens
        self.asked_usd, self.asked_tokens = asked_usd, asked_tokens


# --- integrations and the application -----------------------------------------------------------


class MCPServerError(AgentError):
    """An MCP server could not be started, reached or listed."""


class LocalModelError(AgentError):
    """The embedded model could not be prepared or started; the message says what to do."""


class LocalModelNotInstalledError(LocalModelError):
    """The ``local`` extra (the llama.cpp runtime or the weight packages) is not installed."""


class LocalModelIntegrityError(LocalModelError):
    """The joined weights do not have the pinned sha256, so they are refused."""


class WorkspaceError(AgentError):
    """A workspace tool was asked for something it must not or cannot do."""


class MissingPathError(WorkspaceError):
    """A path that does not exist: the file itself, or (``folder``) a folder on the way."""

    def __init__(self, shown: str, folder: bool = False) -> None:
        super().__init__(f"{shown} does not exist")
        self.folder = folder


class CliError(AgentError):
    """A problem the user of the command line can fix; printed without a traceback."""


# --- signals ------------------------------------------------------------------------------------


class ToolRetry(AgentError):
    """Signal raised by a tool to ask the model to call it again, differently: the message is
    sent back as the call's error result. Each tool has a retry budget per run
    (``max_retries``); past it the model is told to stop retrying. Peer: pydantic-ai
    ``ModelRetry``."""


class BudgetReached(AgentError):
    """Signal: the abort reason of a run whose deadline passed; ``limit`` is ``"timeout"``.
    The run ends with ``stop_reason="budget"``; :class:`BudgetExceededError` is what
    ``raise_for_error()`` raises for it."""

    def __init__(self, limit: str) -> None:
        super().__init__(f"the run's budget {limit} was reached")
        self.limit = limit


class EndRun(AgentError):  # noqa: N818 - a request to end a run, not a failure
    """Raise from a run policy's hook (:mod:`agentkit.policy`) to end the run with a stop reason
    of your own, e.g. ``raise EndRun("cost_cap", "this user's daily budget is spent")``: it
    becomes the run's ``stop_reason``, ``message`` its ``error_message``, ``budget`` its
    ``budget`` and ``detail`` (JSON data) is kept in ``RunResult.ending``. The transcript stays
    whole: calls that had no result get one saying the run ended."""

    def __init__(
        self,
        reason: str,
        message: str | None = None,
        *,
        budget: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message or reason)
        self.reason, self.message, self.budget, self.detail = reason, message, budget, detail


class JudgeError(AgentError):
    """An evaluation's model judge gave no verdict (:mod:`agentkit.evals`); the message says
    why."""


class EvalCaseError(AgentError):
    """An evaluation case did not pass (the pytest plugin of :mod:`agentkit.evals`); the
    message is the report's note on it."""


class EvalInterrupted(AgentError, KeyboardInterrupt):
    """Ctrl-C stopped an evaluation (:mod:`agentkit.evals`); :attr:`report` holds the cases
    that ended (the others are ``cancelled``). A ``KeyboardInterrupt`` too, so code that stops
    on Ctrl-C still does."""

    def __init__(self, report: Any) -> None:
        done = len(report.ran)
        super().__init__(f"interrupted after {done} of {len(report.cases)} cases")
        self.report = report
