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
    """A provider could not be reached or refused a request (never carries an API key)."""
