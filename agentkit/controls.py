"""Per-run tool controls: dependency injection (:class:`RunContext`), ``ToolRetry`` budgets and
per-tool timeouts.

A ``@tool`` function that has a parameter annotated ``RunContext`` (or ``RunContext[MyDeps]``)
receives one: the run's ``deps`` (``Agent(deps=...)`` or ``prompt(..., deps=...)``), the call's
id, the tool's name, how often it was retried and its abort signal. That parameter never
appears in the schema the model sees. Peers: pydantic-ai ``RunContext`` and ``ModelRetry``.
"""

from __future__ import annotations

import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .abort import AbortSignal
from .errors import AgentError
from .types import AgentToolResult, TextContent

DepsT = TypeVar("DepsT")

RETRY_TEXT = "{message}\n\nFix the problem and call {name} again."
RETRIES_SPENT_TEXT = (
    "{message}\n\n{name} asked for a retry more than its budget ({budget}) allows in this run; "
    "do not call it again."
)
TIMEOUT_TEXT = "Tool {name} timed out after {timeout:g} s"


@dataclass(frozen=True)
class RunContext(Generic[DepsT]):
    """What a tool may ask for besides its arguments: the run's ``deps`` and the call itself."""

    deps: DepsT
    tool_call_id: str
    tool_name: str
    retry: int
    """How many times this tool already asked for a retry in this run."""
    signal: AbortSignal


_current: ContextVar[RunContext[Any] | None] = ContextVar("agentkit_run_context", default=None)


def current_run_context() -> RunContext[Any]:
    """The :class:`RunContext` of the tool call running on this thread."""
    context = _current.get()
    if context is None:
        raise AgentError("no tool call is running on this thread (RunContext is only for tools)")
    return context


class ToolControls:
    """One run's tool state: its ``deps`` and each tool's retry count (guarded by a lock, since
    calls of one batch run on pool threads at once)."""

    def __init__(self, deps: Any = None) -> None:
        self.deps = deps
        self._lock = threading.Lock()
        self._retries: dict[str, int] = {}

    def retries(self, tool_name: str) -> int:
        """How many retries ``tool_name`` asked for so far."""
        with self._lock:
            return self._retries.get(tool_name, 0)

    def enter(self, tool_call_id: str, tool_name: str, signal: AbortSignal) -> Any:
        """Make the call's :class:`RunContext` current on this thread; return the reset token."""
        context = RunContext(self.deps, tool_call_id, tool_name, self.retries(tool_name), signal)
        return _current.set(context)

    @staticmethod
    def leave(token: Any) -> None:
        """Undo :meth:`enter`."""
        _current.reset(token)

    def retry_result(self, tool_name: str, budget: int, message: str) -> AgentToolResult:
        """The error result of a ``ToolRetry``: try again, or (past ``budget``) stop trying."""
        with self._lock:
            count = self._retries.get(tool_name, 0) + 1
            self._retries[tool_name] = count
        template = RETRY_TEXT if count <= budget else RETRIES_SPENT_TEXT
        text = template.format(message=message or "Retry", name=tool_name, budget=budget)
        return AgentToolResult(content=[TextContent(text=text)], details={}, is_error=True)
