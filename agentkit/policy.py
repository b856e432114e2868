"""The run seam: policies put behaviour around a run at the loop's named points.

A *policy* is an object with optional hooks at the points where the loop calls out. A run has an
ordered chain of them: agentkit's built-ins first (the interrupt lane, typed output, budgets,
compaction, approvals, made by the :class:`~agentkit.Agent` from its options), then the user's
(``Agent(policies=[...])``, or the run option of the same name). The first policy is the
outermost: its ``wrap_*`` hooks see a request, batch or call first and its answer last; a
policy with ``outermost = True`` goes before the built-ins. The loop imports no policy: it
calls the chain.

The named points, in the order a run meets them (each hook's contract is on
:class:`RunPolicy`):

======================  =========================================================================
``for_run``             the policy's object for one run (its per-run state)
``start``               the run starts (after ``agent_start`` and the prompt's messages)
``before_turn``         before each turn after the first
``wrap_request``        around each model request: change it, retry it, replace its answer
``review_calls``        a batch's prepared calls: allow, deny or defer each
``wrap_batch``          around each tool batch
``wrap_tool_call``      around each tool call's execution, on the thread that executes it
``at_final_answer``     the model answered without tool calls: accept it or ask another turn
``end``                 the run ends, however it ends (in reverse order)
======================  =========================================================================

Every hook but ``wrap_tool_call`` runs on the run's loop thread (an Agent's worker thread), one
at a time, in the order above. A hook that raises fails the run (the Agent records the failure
as the run's last message), except where its contract says otherwise; a hook that raises
:class:`EndRun` ends the run with that ending instead. How a run ended is one value,
:class:`Ending`, which policies ask for with :meth:`RunScope.end`; the loop settles the run's
``stop_reason`` from it in one place.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import EndRun
from .types import AgentTool, AgentToolResult, FieldsEqRepr, ToolCall, ToolResultMessage

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .events import AgentEvent
    from .results import RunResult
    from .types import AgentContext, AssistantMessage, Context, Model, StreamOptions
    from .waits import Deadline

__all__ = [
    "BatchOutcome",
    "EndRun",
    "Ending",
    "ModelRequest",
    "PreparedCall",
    "RunPolicy",
    "RunScope",
    "ToolBatchRun",
    "ToolCallRun",
    "overrides",
]


# --- how a run ends ---------------------------------------------------------------------------


@dataclass(eq=False, repr=False)
class Ending(FieldsEqRepr):
    """How a run asked to end: ``reason`` becomes its ``stop_reason`` (``"budget"``,
    ``"approval"``, ``"error"``, ``"guardrail"`` or a policy's own word), ``message`` its
    ``error_message``, ``error`` its ``error``; ``budget`` names the limit or rule that ended it
    (``RunResult.budget``); ``pending_approvals`` lists the calls that wait for a decision;
    ``detail`` is the policy's own JSON data (kept in ``RunResult.ending``)."""

    reason: str
    message: str | None = None
    error: BaseException | None = None
    budget: str | None = None
    pending_approvals: list[Any] = field(default_factory=list)
    detail: dict[str, Any] | None = None


def ending_of(stop: EndRun) -> Ending:
    """The :class:`Ending` an :class:`~agentkit.errors.EndRun` asks for."""
    return Ending(stop.reason, stop.message, budget=stop.budget, detail=stop.detail)


# --- what the hooks are given -----------------------------------------------------------------


@dataclass(eq=False, repr=False)
class ModelRequest(FieldsEqRepr):
    """One model request as it is about to be sent: what ``wrap_request`` may change.

    ``context`` holds the messages the model sees (after ``transform_context`` and
    ``convert_to_llm``); ``options`` the request's options (``api_key``, ``signal``,
    ``output_schema``, ``tool_choice``, ...); ``stream_fn`` the function that makes it (wrap it
    to see or gate the response's events as they stream, as an httpx transport wraps
    ``send``); ``signal`` aborts it. Change a request with ``dataclasses.replace`` (or in place)
    and pass it on."""

    model: Model
    context: Context
    options: StreamOptions
    stream_fn: Callable[[Model, Context, Any], Any]
    signal: AbortSignal
    purpose: str = "turn"
    """``"turn"`` for the turn loop's requests (their responses stream into the transcript);
    another word (``"summary"``, ``"judge"``) for a request a policy makes with
    :meth:`RunScope.complete`, which passes the chain too but leaves no message and no event.
    A policy about the conversation (a compaction, an input check) lets those through."""

    def with_signal(self, signal: AbortSignal) -> ModelRequest:
        """This request under another signal (a child of the run's), its options too."""
        options = copy.copy(self.options)  # pydantic's shallow copy: once per request, cheap
        options.__dict__["signal"] = signal
        return dataclasses.replace(self, options=options, signal=signal)


@dataclass(eq=False, repr=False)
class PreparedCall(FieldsEqRepr):
    """A call of a batch after its preflight (lookup, arguments, ``before_tool_call``), for
    ``review_calls``: its ``tool_call`` (with the arguments it would run with), ``tool`` and
    validated ``args``. A reviewer decides with :meth:`allow`, :meth:`deny` or :meth:`defer`;
    a call nobody decided runs, unless its tool ``requires_approval`` (then it is refused:
    nothing approved it)."""

    tool_call: ToolCall
    tool: AgentTool
    args: Any
    verdict: str | None = None
    """``None`` (undecided), ``"allow"``, ``"deny"`` or ``"defer"``."""
    reason: str | None = None
    arguments: dict[str, Any] | None = None
    """Arguments an approver edited (validated again before the call runs)."""

    @property
    def needs_review(self) -> bool:
        """Whether the call may run only once a reviewer allowed it."""
        return self.tool.requires_approval

    def allow(self, arguments: dict[str, Any] | None = None) -> None:
        """Let the call run (with ``arguments`` edited, if given; else with those an earlier
        reviewer set, a guardrail's redaction say)."""
        self.verdict = "allow"
        if arguments is not None:
            self.arguments = arguments

    def deny(self, reason: str) -> None:
        """Refuse the call: the model reads ``reason`` as its error result."""
        self.verdict, self.reason = "deny", reason

    def defer(self) -> None:
        """Let the call wait for a decision recorded later (it waits in the session); the run
        ends after this batch with stop reason ``"approval"``."""
        self.verdict = "defer"


@dataclass(eq=False, repr=False)
class ToolBatchRun(FieldsEqRepr):
    """One turn's tool batch, for ``wrap_batch``: the assistant ``message``, the ``calls`` to
    run (drop some to refuse them: :meth:`RunScope.refuse_call` gives their results) and the
    ``signal`` the batch runs under."""

    message: AssistantMessage
    calls: list[ToolCall]
    signal: AbortSignal


@dataclass(eq=False, repr=False)
class BatchOutcome(FieldsEqRepr):
    """What a batch gave: its result ``messages`` in call order, and whether every result
    asked the run to stop (``terminate``)."""

    messages: list[ToolResultMessage]
    terminate: bool = False


@dataclass(eq=False, repr=False)
class ToolCallRun(FieldsEqRepr):
    """One call about to execute, for ``wrap_tool_call``: the ``tool_call``, its ``tool``, the
    validated ``args``, the call's ``signal`` and ``on_update`` for partial results."""

    tool_call: ToolCall
    tool: AgentTool
    args: Any
    signal: AbortSignal
    on_update: Callable[[Any], None]


RequestHandler = Callable[[ModelRequest], "AssistantMessage"]
BatchHandler = Callable[[ToolBatchRun], BatchOutcome]
CallHandler = Callable[[ToolCallRun], AgentToolResult]


# --- the run, as policies see it ---------------------------------------------------------------


class RunScope(ABC):
    """One run, as its policies see it (the loop makes one per run). Read its state; act on the
    run only through these methods, from the loop's thread (``wrap_tool_call`` aside, which
    may read but not act)."""

    context: AgentContext
    """The live transcript (``messages``) and ``tools`` of the run."""
    result: RunResult
    """The run's new messages and envelope so far (``usage``, ``output``)."""
    emit: Callable[[AgentEvent], None]
    """Emit an event to the run's listeners (on the loop's thread)."""
    model: Model
    """The model of the next request."""
    options: StreamOptions
    """The request options of the next requests; replace them to change every later request."""
    signal: AbortSignal
    """The run's abort signal (a child of the caller's once a deadline owns it)."""
    deadline: Deadline | None
    """What ends the run's waits early (a budget's deadline), or ``None``."""
    state: dict[str, Any]
    """Scratch space that lives for this run."""
    turn_start: int
    """Where this turn's own messages begin in ``context.messages`` (a compaction keeps them)."""
    wrapping_up: bool
    """The run is in its last turn, without tools (a budget's summary): typed output is not
    asked of it."""
    interrupted: bool
    """The last response was cut short by an abort that keeps the run going (an interrupt)."""

    @abstractmethod
    def append(self, messages: Sequence[Any]) -> None:
        """Add messages to the transcript and the run's new messages, with their events."""

    @abstractmethod
    def end(
        self,
        reason: str,
        message: str | None = None,
        *,
        error: BaseException | None = None,
        budget: str | None = None,
        pending_approvals: Sequence[Any] = (),
        detail: dict[str, Any] | None = None,
        at_once: bool = True,
    ) -> None:
        """Ask the run to end with this :class:`Ending`. The first ending asked for is the one
        kept; ``end("stop")`` ends the run as it stands (its last message says how). ``at_once``: the loop stops at its next point (after the request or batch under
        way); ``False`` records how the run will have ended while it goes on (a budget's
        summary turn)."""

    @property
    @abstractmethod
    def ending(self) -> Ending | None:
        """The ending asked for so far, if any."""

    @abstractmethod
    def set_signal(self, signal: AbortSignal, deadline: Deadline | None = None) -> None:
        """Run under ``signal`` from now on (a child of :attr:`signal`), with ``deadline``
        ending the run's waits (``start`` only: a budget's deadline)."""

    @abstractmethod
    def view(self) -> Context:
        """The messages the next request would send, from the transcript as it is now (after
        ``transform_context`` and ``convert_to_llm``): a policy that changed the transcript, a
        compaction say, passes ``dataclasses.replace(request, context=run.view())`` on."""

    @abstractmethod
    def complete(
        self, messages: list[Any], *, max_tokens: int | None = None, purpose: str = "summary"
    ) -> AssistantMessage:
        """One request of the run's own, without tools and without message events (a summary,
        a judge): the run's one request path, through the policies' ``wrap_request`` chain
        (the request's ``purpose`` says what it is for), with the run's abort, deadline and
        usage (counted in the run's). Returns the final message: an ``error`` or ``aborted``
        one when the request failed."""

    @abstractmethod
    def send_aside(self, request: ModelRequest, grace: float | None = None) -> AssistantMessage:
        """A request a policy makes off the turn loop, **from any thread** (a guardrail's
        judge, beside the run's first request): through the policies' ``wrap_side_request``
        chain (the request's ``purpose`` says what it is for), then read to its end without
        events, ended at the run's deadline and given up ``grace`` seconds (default: the
        run's ``tool_abort_grace``) after its signal aborts. Its usage is the caller's to
        count in the run's, on the run's thread. Returns the final message: an ``error`` or
        ``aborted`` one when the request failed."""

    @abstractmethod
    def run_tools(self, message: AssistantMessage, calls: list[ToolCall]) -> BatchOutcome:
        """Run ``calls`` of ``message`` as a batch of this run (events, hooks, review, wrap),
        appending their results to the transcript (a resumed batch: ``start`` only)."""

    @abstractmethod
    def refuse_call(self, call: ToolCall, text: str) -> ToolResultMessage:
        """A call that will not run: its start and end events and its error result message
        (not added to the transcript: return it from ``wrap_batch``)."""


# --- the policy ---------------------------------------------------------------------------------


class RunPolicy:
    """Behaviour around a run. Subclass and override the hooks you need; each default does
    nothing (or passes the call on). The contracts:

    - ``for_run(run)``: called as each run starts, before ``start``; returns the object whose
      hooks serve this run. Return ``self`` (the default) for a stateless policy, a fresh copy
      to keep state for one run. Raising fails the run before it starts.
    - ``start(run)``: the run starts, after ``agent_start``, ``turn_start`` and the prompt's
      messages. May end the run (``run.end``) before its first request.
    - ``before_turn(run, pending)``: before each turn after the first, with the messages the
      turn will start with (append to add some). ``run.end`` ends the run here; ``pending``
      stays in the transcript.
    - ``wrap_request(run, request, call_next)``: around each model request of the turn loop;
      returns the final assistant message. Call ``call_next(request)`` (perhaps with a changed
      request, perhaps again to retry), or return a message of your own; raise :class:`EndRun`
      to end the run without a response. Each call of ``call_next`` is one request, counted in
      the run's usage, its message in the transcript.
    - ``wrap_side_request(run, request, call_next)``: around each request made with
      :meth:`RunScope.send_aside` (a guardrail's judge): as ``wrap_request``, but **on the
      thread that makes it**, perhaps beside the run's own request: touch no run state but
      what you guard yourself (no events, no transcript; ``run.end`` may be called). Return
      a message of your own (an ``error`` one) to refuse it unsent.
    - ``review_calls(run, calls)``: a batch's prepared calls (:class:`PreparedCall`), once each
      has passed its preflight; decide each with ``allow``/``deny``/``defer``. Later policies
      see the earlier ones' verdicts and may overrule them. Raising refuses the batch's
      undecided calls with the message.
    - ``wrap_batch(run, batch, call_next)``: around each tool batch; returns its
      :class:`BatchOutcome`. Drop calls from ``batch.calls`` and add their
      ``run.refuse_call`` results to refuse them, change ``batch.signal`` to run it under
      another signal.
    - ``wrap_tool_call(run, call, call_next)``: around each call's execution, **on the thread
      that executes it** (a tool thread, or the run's own with ``tool_execution="inline"``),
      several at once in a parallel batch; returns the call's result. Raising makes the call
      an error result carrying the message. Touch no run state but what you guard yourself.
    - ``at_final_answer(run, message)``: the model answered without calling a tool. Return
      messages to send back (another turn), or ``None`` to accept; ``run.end`` ends the run.
    - ``end(run, result)``: the run ended (its ``stop_reason`` is settled), however it ended,
      a failure included; in reverse order (the outermost last). Release what ``start`` took.
      Raising fails the run, once every policy's ``end`` ran.
    """

    name: str = ""
    """Names the policy in errors and traces (default: the class name)."""
    outermost: bool = False
    """Go before the built-in policies instead of after them."""

    def for_run(self, run: RunScope) -> RunPolicy:
        """The object that serves one run (see the class)."""
        return self

    def start(self, run: RunScope) -> None:
        """The run starts (see the class)."""

    def before_turn(self, run: RunScope, pending: list[Any]) -> None:
        """Before each turn after the first (see the class)."""

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """Around each model request (see the class)."""
        return call_next(request)

    def wrap_side_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """Around a request made aside, on its own thread (see the class)."""
        return call_next(request)

    def review_calls(self, run: RunScope, calls: list[PreparedCall]) -> None:
        """A batch's prepared calls (see the class)."""

    def wrap_batch(
        self, run: RunScope, batch: ToolBatchRun, call_next: BatchHandler
    ) -> BatchOutcome:
        """Around each tool batch (see the class)."""
        return call_next(batch)

    def wrap_tool_call(
        self, run: RunScope, call: ToolCallRun, call_next: CallHandler
    ) -> AgentToolResult:
        """Around each tool call, on its thread (see the class)."""
        return call_next(call)

    def at_final_answer(self, run: RunScope, message: AssistantMessage) -> list[Any] | None:
        """At the final answer (see the class)."""
        return None

    def end(self, run: RunScope, result: RunResult) -> None:
        """The run ended (see the class)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name or ''}>".replace(" >", ">")


def overrides(policy: RunPolicy, hook: str) -> bool:
    """Whether ``policy`` has its own ``hook`` (the loop calls only those: a chain of policies
    that do not wrap requests costs a request nothing). Known once per class and hook."""
    key = (type(policy), hook)
    known = _OVERRIDES.get(key)
    if known is None:
        known = _OVERRIDES[key] = getattr(type(policy), hook) is not getattr(RunPolicy, hook)
    return known


_OVERRIDES: dict[tuple[type, str], bool] = {}
""":func:`overrides`'s answers (a class's methods are fixed once it is made)."""


def chain(
    policies: Sequence[RunPolicy], hook: str, run: RunScope, innermost: Callable[[Any], Any]
) -> Callable[[Any], Any]:
    """``innermost`` wrapped by each policy's ``hook`` (``wrap_request``, ``wrap_batch``,
    ``wrap_tool_call`` or ``wrap_side_request``), the first policy outermost."""
    handler = innermost
    for policy in reversed([p for p in policies if overrides(p, hook)]):
        handler = functools.partial(_step, getattr(policy, hook), run, handler)
    return handler


def _step(hook: Callable[..., Any], run: RunScope, call_next: Any, item: Any) -> Any:
    return hook(run, item, call_next)


def ordered(builtins: Sequence[RunPolicy], users: Sequence[RunPolicy]) -> list[RunPolicy]:
    """A run's chain: the user's ``outermost`` policies, the built-ins, the user's others."""
    outer = [p for p in users if p.outermost]
    return [*outer, *builtins, *(p for p in users if not p.outermost)]


def check_policies(value: Any) -> list[RunPolicy]:
    """``value`` (``None``, one policy or a sequence of them) as a list of policies; anything
    else raises ``TypeError`` where it is given."""
    if value is None:
        return []
    items = [value] if isinstance(value, RunPolicy) else list(value)
    for item in items:
        if not isinstance(item, RunPolicy):
            raise TypeError(
                f"a policy must be a RunPolicy (subclass agentkit.RunPolicy); got "
                f"{type(item).__name__}"
            )
    return items
