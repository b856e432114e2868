"""Every exception agentkit raises, in one hierarchy under :class:`AgentError`."""

from __future__ import annotations


class AgentError(Exception):
    """Base of agentkit's own errors."""


class AgentBusyError(AgentError):
    """A prompt, continue or reset was asked for while a run is active."""


class CannotContinueError(AgentError):
    """``continue_()`` has nothing to continue from."""


class AbortError(AgentError):
    """An operation was stopped because its run was aborted."""


class ToolArgumentsError(AgentError):
    """A tool call's arguments do not match the tool's schema (the message is what the model sees)."""


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


class ToolRetry(AgentError):
    """Raised by a tool to ask the model to call it again, differently: the message is sent
    back as the call's error result. Each tool has a retry budget per run (``max_retries``);
    past it the model is told to stop retrying. Peer: pydantic-ai ``ModelRetry``."""
