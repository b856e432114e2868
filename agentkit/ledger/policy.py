"""The ledger on the run seam: :class:`SpendPolicy` reserves each model request's worst case
before it is sent and settles its real cost after, and ends a run that would pass a cap."""

from __future__ import annotations

import contextvars
import math
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..compaction import estimate_tokens
from ..errors import EndRun, LedgerError, SpendCapError
from ..events import SpendEvent
from ..policy import ModelRequest, RequestHandler, RunPolicy, RunScope
from ..subagents import add_child_setup, remove_child_setup
from ..transcript import failure_message
from ..types import AssistantMessage, Model, Usage
from .core import Cap, Ledger, Reservation, check_key

if TYPE_CHECKING:
    from ..agent import Agent
    from ..results import RunResult

DEFAULT_OUTPUT = 4096
"""The output a request is assumed to be able to use when neither it nor its model says."""


def worst_case(request: ModelRequest) -> tuple[float, int]:
    """The most ``request`` can cost, in dollars and tokens, at its model's catalog prices:
    its input (an estimate from the conversation, at the dearest input price: a cache write's
    when that is dearer) and its whole ``max_tokens`` (the request's, else the model's) of
    output."""
    context = request.context
    messages = list(context.messages)
    input_tokens = estimate_tokens(messages)
    if not any(isinstance(m, AssistantMessage) and m.usage.input for m in messages):
        # Nothing reported yet counts the system prompt and the tools: estimate them too.
        tools = [tool.model_dump_json() for tool in context.tools or ()]
        input_tokens += (len(context.system_prompt or "") + sum(map(len, tools))) // 4
    output_tokens = request.options.max_tokens or request.model.max_tokens or DEFAULT_OUTPUT
    return price(request.model, input_tokens, output_tokens), input_tokens + output_tokens


def price(model: Model, input_tokens: int, output_tokens: int) -> float:
    """Dollars for ``input_tokens`` at the model's dearest input price and ``output_tokens``
    at its output price (USD per million tokens, from the catalog)."""
    prices = model.cost
    dearest = max(prices.input, prices.cache_write, prices.cache_read)
    total = (input_tokens * dearest + output_tokens * prices.output) / 1_000_000
    return total if math.isfinite(total) and total > 0 else 0.0


def refusal_detail(exc: SpendCapError) -> dict[str, Any]:
    """The ending's ``detail`` of a request a cap refused: the cap, what was spent and asked."""
    return {
        "key": exc.key, "window": exc.window, "period": exc.period, "cap_usd": exc.cap_usd,
        "cap_tokens": exc.cap_tokens, "usd": exc.usd, "tokens": exc.tokens,
        "asked_usd": exc.asked_usd, "asked_tokens": exc.asked_tokens,
    }  # fmt: skip


def settled_cost(usage: Usage) -> tuple[float, int]:
    """What a finished request cost, in dollars and tokens, as its usage says: the cost the
    provider layer priced from the catalog (cache reads and writes at their own prices), and
    every token it counted (input, output, cache reads and writes)."""
    tokens = usage.input + usage.output + usage.cache_read + usage.cache_write
    return usage.cost.total, max(tokens, usage.total_tokens)


class SpendPolicy(RunPolicy):
    """Spend under ``keys`` in ``ledger`` (``Agent(policies=[SpendPolicy(...)])``).

    Each model request of a run reserves its :func:`worst_case` under ``keys`` (and
    ``model:<provider>:<id>`` with ``by_model``) before it is sent, and settles what it really
    cost when it ends, however it ends. When the reservation would pass a cap (the ledger's, or
    ``caps``), the request is not sent: the run ends with ``stop_reason="budget"`` and
    ``RunResult.budget == "spend"``, its transcript whole, the refusal in ``error_message`` and
    in ``RunResult.ending.detail``. The sub-agents its tools start spend under the same keys.
    A ledger that cannot be reached fails the request unsent (a cap cannot be checked); one
    that cannot settle is logged, and the reservation counts until it expires.
    """

    name = "spend"

    def __init__(
        self,
        ledger: Ledger,
        keys: Sequence[str],
        *,
        caps: Sequence[Cap] = (),
        by_model: bool = True,
    ) -> None:
        self.ledger = ledger
        self.keys = [check_key(key) for key in keys]
        self.caps = list(caps)
        self.by_model = by_model

    def for_run(self, run: RunScope) -> RunPolicy:
        return _SpendRun(self)


class _SpendRun(RunPolicy):
    """One run's side of a :class:`SpendPolicy`: the requests' reservations, and the setup
    that gives its sub-agents the policy."""

    name = "spend"

    def __init__(self, policy: SpendPolicy) -> None:
        self.policy = policy
        self._children: contextvars.Token[Any] | None = None
        self._aside: list[SpendEvent] = []  # spend of requests made aside, to emit
        self._lock = threading.Lock()  # guards _aside: a judge's thread adds, the run's takes

    def start(self, run: RunScope) -> None:
        self._children = add_child_setup(self._adopt)

    def _adopt(self, child: Agent, name: str) -> None:
        if not any(p is self.policy for p in child.policies):
            child.policies = [*child.policies, self.policy]

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        self._emit_aside(run)
        keys = self._keys(request)
        try:
            reservation = self._reserve(keys, request)
        except SpendCapError as exc:
            raise EndRun("budget", f"Spend cap reached: {exc}", budget="spend",
                         detail=refusal_detail(exc)) from None  # fmt: skip
        return self._sent(reservation, keys, request, call_next, run.emit)

    def wrap_side_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        """A request made aside (a guardrail's judge), on its own thread: reserved and settled
        as the run's own are; one that would pass a cap is not sent, and ends the run as its
        own would. What it cost reaches the listeners at the run's next request or its end
        (they hear the run's thread only)."""
        keys = self._keys(request)
        try:
            reservation = self._reserve(keys, request)
        except SpendCapError as exc:
            text = f"Spend cap reached: {exc}"
            run.end("budget", text, budget="spend", detail=refusal_detail(exc))
            return failure_message("error", text, request.model)
        return self._sent(reservation, keys, request, call_next, self._keep)

    def _sent(
        self,
        reservation: Reservation,
        keys: list[str],
        request: ModelRequest,
        call_next: RequestHandler,
        tell: Callable[[SpendEvent], None],
    ) -> AssistantMessage:
        """Send ``request``, settle its reservation however it ends, and ``tell`` what it
        cost when an answer came (the listeners learn it: tracing counts it)."""
        message: AssistantMessage | None = None
        try:
            message = call_next(request)
            return message
        finally:
            settled = self._settle(reservation, message)
            if message is not None:
                tell(SpendEvent(tuple(keys), *settled))

    def _keep(self, event: SpendEvent) -> None:
        """Keep a request made aside's spend event for the run's thread to emit."""
        with self._lock:
            self._aside.append(event)

    def _keys(self, request: ModelRequest) -> list[str]:
        """The keys ``request`` spends under: the policy's, and its model's with ``by_model``."""
        keys = list(self.policy.keys)
        if self.policy.by_model:
            keys.append(f"model:{request.model.provider}:{request.model.id}")
        return keys

    def _reserve(self, keys: list[str], request: ModelRequest) -> Reservation:
        """Hold ``request``'s worst case under ``keys`` (``SpendCapError`` past a cap)."""
        usd, tokens = worst_case(request)
        return self.policy.ledger.reserve(keys, usd, tokens, caps=self.policy.caps)

    def _emit_aside(self, run: RunScope) -> None:
        """Tell the listeners what the requests made aside since cost (on the run's thread)."""
        with self._lock:
            events, self._aside = self._aside, []
        for event in events:
            run.emit(event)

    def _settle(
        self, reservation: Reservation, message: AssistantMessage | None
    ) -> tuple[float, int, bool]:
        """Settle ``reservation`` with what ``message`` cost (nothing when no answer came);
        return that cost and whether the ledger recorded it."""
        usd, tokens = settled_cost(message.usage) if message is not None else (0.0, 0)
        try:
            self.policy.ledger.settle(reservation, usd, tokens)
        except LedgerError as exc:
            import logging  # at the first failure only (logging stays out of import agentkit)

            logging.getLogger("agentkit.ledger").warning(
                "a request's spend could not be settled (its reservation counts until it "
                "expires): %s",
                exc,
            )
            return usd, tokens, False
        return usd, tokens, True

    def end(self, run: RunScope, result: RunResult) -> None:
        self._emit_aside(run)
        if self._children is not None:
            remove_child_setup(self._children)
            self._children = None
