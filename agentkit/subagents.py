"""Sub-agents: an agent offered to another agent as a tool (``agent.as_tool()``).

Each call of the tool is a **fresh run** of the child inside the parent's run:

- *Fresh*: the call makes a new :class:`~agentkit.Agent` from the child's settings (model, stream
  function, the transcript it starts from, tools, options). The child ``Agent`` object itself
  never runs, so calls at the same time (a parallel batch calling it twice, or two parents
  sharing it) share no state. The run's loop runs on the calling tool thread (its own tool
  calls on tool threads of its own, as for any run).
- *Abort*: the call's signal (the parent's abort, its deadline, the tool's ``timeout``, an
  interrupt) aborts the child's run: its request and its tools get it.
- *Budgets*: the child's budgets are cut to what the parent's run has left, its deadline
  included (:meth:`~agentkit.budgets.BudgetTracker.remaining`); the child's requests and tool
  calls count in the parent's usage, and its tokens and cost come back as the tool result's
  ``usage``, which the parent's batch adds to its :class:`~agentkit.RunResult`. Calls running
  at once each start from what was left when they started.
- *Events*: each event of the child reaches the parent's listeners as a
  ``tool_execution_update`` whose ``partial_result`` is a :class:`SubAgentEvent`.
- *Spans*: a parent traced with :func:`~agentkit.integrations.tracing.enable_tracing` traces its
  children the same way; a child's ``invoke_agent`` nests under the parent's ``execute_tool``.
- *Output*: the child's typed output (when it has an ``output_type``) is the result's
  ``structured_content`` and, as JSON, its text; otherwise its final text is.
- *Session*: ``session=`` keeps the child's own transcript across calls (see :func:`agent_tool`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ._serialize import dumps, to_serialisable
from .abort import AbortSignal
from .budgets import REFUSED_TEXT, Budgets, adopting_runs, current_budget
from .errors import AbortError
from .events import AgentEvent
from .results import RunResult, RunUsage
from .run import Listener, Run, running_agent
from .tools import error_result
from .types import AgentTool, AgentToolResult, TextContent, ToolResultMessage, Usage
from .waits import wait_condition

if TYPE_CHECKING:
    from .sessions import Session

__all__ = ["ChildRun", "SubAgentEvent", "agent_tool", "child_runs"]

TASK_DESCRIPTION = "The task for the agent, with everything it needs to know to do it."

SessionSpec = Any
"""What ``session=`` takes: a :class:`~agentkit.sessions.Session`, a store or store URL (the
session is then named after the parent's), or ``fn(parent_session_name) -> Session | None``."""


@dataclass(frozen=True, slots=True)
class SubAgentEvent:
    """An event of a sub-agent's run, as the ``partial_result`` of the parent's
    ``tool_execution_update`` for the call that runs it."""

    agent: str
    """The tool's name (the child agent's)."""
    tool_call_id: str
    """The parent's call that runs the child."""
    event: AgentEvent
    """The child's event (a grandchild's comes wrapped once more)."""


@dataclass(frozen=True, slots=True)
class ChildRun:
    """What one sub-agent call spent, read back from a parent's result by :func:`child_runs`."""

    tool_call_id: str
    agent: str
    stop_reason: str
    usage: RunUsage


# --- the agent, by its shape --------------------------------------------------------------------


class _State(Protocol):
    """What a sub-agent tool reads of its agent's state."""

    @property
    def system_prompt(self) -> str: ...


class _Agent(Protocol):
    """What a sub-agent tool uses of the :class:`~agentkit.Agent` it offers, named by its shape
    rather than imported: ``Agent.as_tool`` calls down into this module, and an import only ever
    points down."""

    @property
    def name(self) -> str | None: ...
    @property
    def description(self) -> str | None: ...
    @property
    def state(self) -> _State: ...
    @property
    def budgets(self) -> Budgets | None: ...
    def fresh_copy(self, session: Session | None = None) -> _Agent: ...
    def subscribe(self, listener: Listener) -> Callable[[], None]: ...
    def _prompt_here(
        self, input: Any, bind: Callable[[Run], None], **run_options: Any
    ) -> RunResult: ...
    def close(self) -> None: ...


# --- children inherit what the parent's run sets up (tracing) ----------------------------------

ChildSetup = Callable[[Any, str], Any]
"""``setup(child, name)``: ``child`` is the fresh :class:`~agentkit.Agent` a call runs."""

_child_setups: ContextVar[tuple[ChildSetup, ...]] = ContextVar("agentkit_child_setups", default=())
"""What each sub-agent started in this context applies to its fresh agent, with its name."""


def add_child_setup(setup: ChildSetup) -> Token[tuple[ChildSetup, ...]]:
    """From a listener of a parent's run (on its worker thread): apply ``setup(child, name)``
    to each sub-agent its tools start; return the token :func:`remove_child_setup` takes."""
    return _child_setups.set((*_child_setups.get(), setup))


def remove_child_setup(token: Token[tuple[ChildSetup, ...]]) -> None:
    """Undo :func:`add_child_setup` (in the same context)."""
    _child_setups.reset(token)


# --- the tool ------------------------------------------------------------------------------------


def agent_tool(
    agent: _Agent,
    *,
    name: str | None = None,
    description: str | None = None,
    input_type: type[Any] | None = None,
    session: SessionSpec = None,
) -> AgentTool:
    """``agent`` as a tool: each call runs a fresh copy of it on the task (see the module).

    ``name`` and ``description`` default to the agent's. The input is a string (``task``), or
    with ``input_type`` (a pydantic model) that model's fields, sent to the child as JSON.
    ``session`` keeps the child's transcript across calls: a
    :class:`~agentkit.sessions.Session`; a store or store URL, where the session is named
    ``"<parent's session>/<name>"`` (the parent must have a session); or a function of the
    parent's session name (``None`` when it has none) that returns one. Calls sharing a session
    run one at a time.
    """
    tool_name = name or agent.name
    if not tool_name:
        raise ValueError("a sub-agent tool needs a name: Agent(name=...) or as_tool(name=...)")
    text = description or agent.description or _describe(agent, tool_name)
    if input_type is None:
        parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"task": {"type": "string", "description": TASK_DESCRIPTION}},
            "required": ["task"],
        }
    else:
        from .tools import _clean_schema  # the schema cleaning @tool applies

        parameters = _clean_schema(input_type.model_json_schema())
    runner = _SubAgent(agent, tool_name, input_type, session)
    return AgentTool(
        name=tool_name, description=text, parameters=parameters, execute=runner.execute
    )


def _describe(agent: _Agent, name: str) -> str:
    prompt = agent.state.system_prompt.strip()
    first = prompt.splitlines()[0] if prompt else ""
    return f"Delegate a task to the {name} agent. {first}".strip()


def child_runs(result: list[Any]) -> list[ChildRun]:
    """The sub-agent calls of a run (a parent's :class:`~agentkit.RunResult` or any list of
    messages), in order, each with its own usage: the parent's ``usage`` includes them all."""
    runs = []
    for message in result:
        details = getattr(message, "details", None)
        if not isinstance(message, ToolResultMessage) or not isinstance(details, dict):
            continue
        record = details.get("sub_agent")
        if isinstance(record, dict):
            usage = RunUsage.model_validate(record["usage"])
            runs.append(
                ChildRun(message.tool_call_id, record["agent"], record["stop_reason"], usage)
            )
    return runs


class _SubAgent:
    """One sub-agent tool: the child it copies, and the sessions its calls hold."""

    def __init__(
        self, agent: _Agent, name: str, input_type: type[Any] | None, session: SessionSpec
    ) -> None:
        self.agent, self.name, self.input_type, self.session = agent, name, input_type, session
        # Guards _busy: the sessions a call is running in (calls come on several tool threads).
        self._turns = threading.Condition()
        self._busy: set[str] = set()

    def execute(
        self,
        tool_call_id: str,
        params: dict[str, Any],
        signal: AbortSignal,
        on_update: Callable[[Any], None],
    ) -> AgentToolResult:
        task = self._task(params)
        budgets = self.agent.budgets or Budgets()
        parent = current_budget()
        if parent is not None:
            cut = parent.remaining(budgets)
            if isinstance(cut, str):
                return error_result(REFUSED_TEXT.format(name=self.name, limit=cut))
            budgets = cut
        session = self._session()
        with self._hold(session, signal):
            child = _fresh_copy(self.agent, session)
            try:
                for setup in _child_setups.get():
                    setup(child, self.name)
                # The child's run sets up its own children (a traced child traces its own).
                inherited = _child_setups.set(())
                child.subscribe(lambda e: on_update(SubAgentEvent(self.name, tool_call_id, e)))
                links: list[Callable[[], None]] = []
                adopting = adopting_runs(parent) if parent is not None else contextlib.nullcontext()
                try:  # the parent's signal aborts the run from its first instant
                    bind = lambda run: links.append(signal.add_callback(run.abort))  # noqa: E731
                    with adopting:  # given up on, the child's spend still counts in the parent
                        result = child._prompt_here(task, bind, budgets=budgets)
                finally:
                    _child_setups.reset(inherited)
                    for unlink in links:
                        unlink()
            finally:
                child.close()
        return self._result(result)  # its requests and tool calls counted as it ended

    def _task(self, params: dict[str, Any]) -> str:
        if self.input_type is None:
            return str(params["task"])
        return str(self.input_type.model_validate(params).model_dump_json(indent=2))

    def _session(self) -> Session | None:
        spec = self.session
        if spec is None:
            return None
        from .sessions import Session, SessionStore

        if isinstance(spec, Session):
            return spec
        parent = _parent_session_name()
        if isinstance(spec, (SessionStore, str, os.PathLike)):
            if parent is None:
                raise ValueError(
                    f"sub-agent {self.name}: its session is named after the parent's, and the "
                    "parent agent has none (give it Agent(session=...), or pass a Session)"
                )
            return Session(f"{parent}/{self.name}", spec)
        made = spec(parent)
        if made is not None and not isinstance(made, Session):
            raise TypeError(f"sub-agent {self.name}: session() returned {type(made).__name__}")
        return made

    @contextlib.contextmanager
    def _hold(self, session: Session | None, signal: AbortSignal) -> Iterator[None]:
        """Run in ``session`` alone (calls sharing it wait, until their signal aborts)."""
        if session is None:
            yield
            return
        key = f"{session.store.url}#{session.name}"

        def wake() -> None:
            with self._turns:
                self._turns.notify_all()

        remove = signal.add_callback(wake)
        try:
            with self._turns:
                while key in self._busy:
                    if signal.aborted:
                        raise AbortError(f"sub-agent {self.name}: aborted waiting for its session")
                    wait_condition(self._turns)
                self._busy.add(key)
        finally:
            remove()
        try:
            yield
        finally:
            with self._turns:
                self._busy.discard(key)
                self._turns.notify_all()

    def _result(self, result: RunResult) -> AgentToolResult:
        """The child's run as the call's result: its output or text, its usage and a record."""
        usage = result.usage
        record = {
            "sub_agent": {
                "agent": self.name,
                "stop_reason": result.stop_reason,
                "budget": result.budget,
                "usage": usage.model_dump(mode="json"),
            }
        }
        spent = Usage.model_validate(usage.model_dump(exclude={"requests", "tool_calls"}))
        structured = None
        if result.stop_reason in ("error", "aborted"):
            why = result.error_message or result.stop_reason
            text, is_error = f"The {self.name} agent did not finish: {why}", True
        elif result.output is not None:
            data = to_serialisable(result.output)
            structured = data if isinstance(data, dict) else {"result": data}
            text, is_error = dumps(data), False
        else:
            text, is_error = result.text, False
        if result.stop_reason == "budget":
            text += (
                f"\n\n(The {self.name} agent stopped early: its budget {result.budget} ran out.)"
            )
        return AgentToolResult(
            content=[TextContent(text=text)],
            details=record,
            structured_content=structured,
            usage=spent,
            is_error=is_error,
        )


def _parent_session_name() -> str | None:
    """The session name of the agent whose tool call runs here, if it has a session."""
    parent = running_agent.get()
    writer = getattr(parent, "_session_writer", None)
    session = getattr(writer, "session", None)
    return getattr(session, "name", None)


def _fresh_copy(template: _Agent, session: Session | None) -> _Agent:
    """A new agent with ``template``'s settings and starting transcript, in ``session``."""
    return template.fresh_copy(session)
