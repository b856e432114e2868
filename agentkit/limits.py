"""Shared quotas: a :class:`RateLimiter` for requests and tokens per minute, per provider and model.

A fleet of agents shares one API quota. Give each of them the same limiter
(``Agent(rate_limiter=limiter)``) and every request, retries included, first takes a
:class:`Permit` from it: the request waits, abortably, until its bucket has room. With the
default :class:`MemoryBackend` the agents of one process share the quota; with
:class:`RedisBackend` every process that points at the same Redis does (a Celery deployment).

**The window** is a sliding log, the way providers count: a request may go when fewer than
``requests`` were admitted in the last ``per`` seconds and the tokens counted in that window leave
room for its estimate. A request keeps its place from its admission until ``per`` seconds after
it settled (its answer ended), however long the answer takes: the server counted it when it
arrived, which is never later than it answered, so the limiter's window never ends before the
server's. An answer longer than ``per`` keeps its place while it streams; a request that never
settles (its process died) gives its place up :data:`IN_FLIGHT_LEASE` seconds after ``per``.

**Tokens** are reserved before the request and settled with the usage the response reports. The
reservation is an estimate: the request body's size over four, plus ``max_tokens`` or the
limiter's ``output_tokens``, times what the bucket has learned. A request can use more than that
(an image counts far more tokens than its URL's bytes): each settled usage larger than its
reservation raises the bucket's factor at once, to the ratio seen (at most :data:`MAX_SCALE`),
and smaller ones bring it back slowly, never below 1. What a process learns stays in it; until
its first answer settles, a burst is reserved at the bare estimate.

**A 429** that says how long to wait pauses the bucket for every agent, not only for the request
that got it. What the server says is read once, in :func:`clamp_retry_after`: a number of
seconds or an HTTP date, at most :data:`MAX_RETRY_AFTER` (a day: a date a year ahead pauses for a
day); ``inf``, ``1e400``, ``nan``, a negative number or anything else is no wait at all (the
request's own backoff applies, nothing is paused), and the 429 is reported as the 429.

**Long waits fail fast and are seen.** A request never waits for a pause longer than it waits
for a ``Retry-After`` itself (the request's ``max_retry_delay_ms``), nor for any wait longer than
the limiter's ``max_wait``: it fails at once with :class:`~agentkit.errors.QuotaWaitError`,
saying how long the bucket is held and why (a model with a fallback fails over instead, see
:mod:`agentkit.failover`: a paused bucket is a model that is down). Only the wait the bucket names
now counts (the first request in line asks; those behind it judge by its answer), not a request's
place in a long line. Every wait is reported to the limiter's listeners (:meth:`RateLimiter.
subscribe`, a :class:`QuotaWait` when it begins and when it ends; tracing shows them on the
request's span), and a pause, or a wait longer than ``long_wait``, is logged as a warning on the
``agentkit.limits`` logger.

Where it plugs in: the request runner (:mod:`agentkit.providers.runner`) takes a permit before
each attempt when ``StreamOptions.rate_limiter`` is set. A wait for quota is woken by the
run's abort signal, which a run's deadline (``Budgets(timeout=...)``) also fires.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, Literal

from ._ids import unique_id
from ._quota_store import (
    IN_FLIGHT_LEASE,
    MAX_RETRY_AFTER,
    SYSTEM_CLOCK,
    Clock,
    MemoryBackend,
    Quota,
    QuotaBackend,
    RedisBackend,
    Refusal,
    clamp_retry_after,
)
from .errors import AbortError, QuotaWaitError

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .types import Model, Usage

__all__ = [
    "IN_FLIGHT_LEASE",
    "MAX_RETRY_AFTER",
    "Clock",
    "MemoryBackend",
    "Permit",
    "Quota",
    "QuotaBackend",
    "QuotaWait",
    "RateLimiter",
    "RedisBackend",
    "Refusal",
    "clamp_retry_after",
]

DEFAULT_OUTPUT_TOKENS = 1024
"""The output tokens a request is assumed to use when it sets no ``max_tokens``."""

CHARS_PER_TOKEN = 4
"""The request body's bytes per estimated input token (JSON overhead makes it an over-estimate)."""

MAX_SCALE = 100.0
"""The most a bucket's learned factor multiplies a token estimate by."""

LONG_WAIT = 60.0
"""The default ``long_wait``: a wait for quota longer than this is logged as a warning."""


def _text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


# --- the limiter ------------------------------------------------------------------------------


Outcome = Literal["admitted", "aborted", "refused", "failed"]
"""How a wait for quota ended: admitted; aborted (the run's signal, its deadline); refused
(longer than the request waits); failed (the backend could not be asked)."""


@dataclass(frozen=True)
class QuotaWait:
    """A request held back by its bucket, as :meth:`RateLimiter.subscribe`'s listeners see it:
    once when the wait begins (``outcome`` ``None``) and once when it ends.

    ``seconds`` is the wait the bucket named when it began (0 when the request is behind others
    and the first in line has not been answered yet); ``paused`` says a 429's ``Retry-After``
    holds the bucket, not its quota; ``started`` is the ``time.time()`` it began; ``waited``
    the seconds it lasted and ``outcome`` how it ended (:data:`Outcome`).
    """

    bucket: str
    model: str
    seconds: float
    paused: bool
    started: float
    waited: float = 0.0
    outcome: Outcome | None = None


WaitListener = Callable[[QuotaWait], None]
"""Called on the waiting request's thread; must not block; what it raises is logged and dropped."""


@dataclass(frozen=True)
class _Patience:
    """The longest wait one request accepts: for a pause, and for room in the quota, with the
    words that say why when a wait is longer."""

    pause: float
    pause_why: str
    quota: float
    quota_why: str

    def refuses(self, seconds: float, paused: bool) -> bool:
        return seconds > (self.pause if paused else self.quota)


@dataclass(eq=False)
class _Waiter:
    """One thread in a line: what wakes it, and how long it will wait."""

    patience: _Patience
    wake: threading.Event = field(default_factory=threading.Event)


class _Line:
    """This process's threads waiting for one bucket, first come first served: only the head
    asks the backend, so a freed slot costs one backend call, not one per waiting thread. The
    head's last refusal tells those behind it how long the bucket is held (they fail at once
    when that is longer than they accept)."""

    def __init__(self) -> None:
        # Guards every field below.
        self.lock = threading.Lock()
        self.waiters: deque[_Waiter] = deque()
        self.refusal: tuple[float, bool] | None = None
        """The head's last refusal, as (the clock time room may come, paused), until admitted."""
        self.scale = 1.0
        """The learned factor of token estimates (settled usage over the estimate)."""
        self.logged_pause = 0.0
        """The end of the last pause logged (each pause is logged once)."""
        self.logged_full = -math.inf
        """When a long wait for room was last logged (once per ``long_wait`` at most)."""

    def nudge(self) -> None:
        """Make the head look again (room may have been freed, or a pause set)."""
        with self.lock:
            if self.waiters:
                self.waiters[0].wake.set()

    def should_log(self, until: float, paused: bool, long: bool, long_wait: float) -> bool:
        """Whether a wait until ``until`` is news worth a warning (under ``lock``): a pause not
        logged yet, or a long wait for room when none was logged in the last ``long_wait``."""
        if paused:
            if until <= self.logged_pause + 1.0:
                return False
            self.logged_pause = until
            return True
        if not long or until - self.logged_full < long_wait:
            return False
        self.logged_full = until
        return True

    def learn(self, ratio: float) -> None:
        """Take one settled request's usage over its estimate into the bucket's factor: up at
        once, down a tenth of the way, never below 1."""
        with self.lock:
            if ratio > self.scale:
                self.scale = min(ratio, MAX_SCALE)
            else:
                self.scale = max(1.0, self.scale + (ratio - self.scale) / 10)


@dataclass
class Permit:
    """One admitted request: settle it with the usage the response reported.

    ``tokens`` is what it reserved: ``estimate`` (what the caller asked for) times the
    bucket's learned factor."""

    limiter: RateLimiter
    bucket: str
    quota: Quota | None
    permit_id: str
    tokens: int
    estimate: int = 0
    settled: bool = False

    def settle(self, usage: Usage | int | None) -> None:
        """Count what the request used instead of its reservation (once; later calls do
        nothing). ``None`` (no answer, so nothing used) counts 0 tokens; the request itself
        still counts. A reported usage teaches the bucket how good its estimates are."""
        if self.settled:
            return
        self.settled = True
        if usage is None:
            used = 0
        elif isinstance(usage, int):
            used = usage
        else:
            used = usage.total_tokens or usage.input + usage.output
        self.limiter._settle(self, max(int(used), 0), learn=usage is not None)


class RateLimiter:
    """Requests and tokens per minute for each provider and model, shared by every agent that
    holds it (and through :class:`RedisBackend`, by every process).

    ``quotas`` maps ``"provider:model_id"`` (one model) or ``"provider"`` (every model of that
    provider together) to a :class:`Quota` or a dict of its fields; the exact name wins. A model
    with no quota is not limited, but a 429's ``Retry-After`` still pauses it for everyone.
    ``output_tokens`` is the output a request is assumed to use when it sets no ``max_tokens``.
    ``max_wait`` is the longest wait for a permit the bucket may name (``None``: any); a longer
    one fails the request at once. ``long_wait``: a longer wait is logged as a warning.
    ``clock`` is the time to count and wait in (tests give a fake one; the default backend
    uses it too). See the module for what happens on long waits, pauses and long answers.
    """

    pause_is_down = False
    """Whether any pause fails a request at once (see :meth:`failing_on_pause`)."""

    def __init__(
        self,
        quotas: Mapping[str, Quota | Mapping[str, Any]] | None = None,
        *,
        backend: QuotaBackend | None = None,
        output_tokens: int = DEFAULT_OUTPUT_TOKENS,
        max_wait: float | None = None,
        long_wait: float = LONG_WAIT,
        clock: Clock | None = None,
    ) -> None:
        self.quotas: dict[str, Quota] = {
            name: quota if isinstance(quota, Quota) else Quota.model_validate(quota)
            for name, quota in (quotas or {}).items()
        }
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.backend: QuotaBackend = backend if backend is not None else MemoryBackend(clock)
        self.output_tokens = output_tokens
        self.max_wait = max_wait
        self.long_wait = long_wait
        # Guards making a line in _lines (one per bucket, made on first use; found without it)
        # and the _listeners tuple's rebinding.
        self._lock = threading.Lock()
        self._lines: dict[str, _Line] = {}
        self._listeners: tuple[WaitListener, ...] = ()

    def bucket(self, model: Model) -> tuple[str, Quota | None]:
        """The bucket ``model``'s requests count in, and its quota (``None``: not limited)."""
        exact = f"{model.provider}:{model.id}"
        for name in (exact, model.provider):
            if name in self.quotas:
                return name, self.quotas[name]
        return exact, None

    def estimate(self, body_bytes: int, max_tokens: int | None) -> int:
        """The tokens a request whose body has ``body_bytes`` bytes is expected to use (before
        the bucket's learned factor)."""
        output = max_tokens if max_tokens is not None else self.output_tokens
        return body_bytes // CHARS_PER_TOKEN + max(output, 0)

    def subscribe(self, listener: WaitListener) -> Callable[[], None]:
        """Call ``listener`` with a :class:`QuotaWait` when any request of this limiter starts
        and ends a wait; return a function that stops it. The same listener is called once
        however often it is subscribed."""
        with self._lock:
            if listener not in self._listeners:
                self._listeners = (*self._listeners, listener)

        def unsubscribe() -> None:
            with self._lock:
                self._listeners = tuple(x for x in self._listeners if x != listener)

        return unsubscribe

    def failing_on_pause(self) -> RateLimiter:
        """This limiter (the same backend, buckets, lines and listeners) for a request that
        does not wait out a pause: it fails at once with a
        :class:`~agentkit.errors.QuotaWaitError`. What failover gives a model that has a
        fallback, since a paused model is down."""
        view = copy.copy(self)
        view.pause_is_down = True
        return view

    def _line(self, bucket: str) -> _Line:
        line = self._lines.get(bucket)  # a line, once made, stays: found without the lock
        if line is not None:
            return line
        with self._lock:
            line = self._lines.get(bucket)
            if line is None:
                line = self._lines[bucket] = _Line()
            return line

    def acquire(
        self,
        model: Model,
        tokens: int = 0,
        signal: AbortSignal | None = None,
        *,
        max_pause: float | None = None,
    ) -> Permit:
        """Wait until ``model``'s bucket has room for one request of ``tokens``, and take it.

        Raises :class:`~agentkit.AbortError` as soon as ``signal`` fires (a run's deadline fires
        it too), and :class:`~agentkit.errors.QuotaWaitError` at once when the bucket is paused
        for longer than ``max_pause`` seconds (the runner passes ``max_retry_delay_ms``) or
        holds the request longer than ``max_wait``. Threads of this process waiting on one
        bucket are served in arrival order.
        """
        bucket, quota = self.bucket(model)
        line = self._line(bucket)
        estimate = max(int(tokens), 0)
        permit = Permit(self, bucket, quota, unique_id(), estimate, estimate)
        if (signal is None or not signal.aborted) and self._at_once(line, permit):
            return permit
        waiter = _Waiter(self._patience(max_pause))
        with line.lock:
            line.waiters.append(waiter)
        unlink = signal.add_callback(waiter.wake.set) if signal is not None else None
        watch = _Watch(self, bucket, model) if self._listeners else None
        try:
            while True:
                waiter.wake.clear()  # before looking: a nudge from now on ends the wait below
                if signal is not None and signal.aborted:
                    raise AbortError(f"Gave up waiting for the {bucket} quota: the run was aborted")
                first, held = self._look(line, waiter, permit)
                if held is None:
                    if watch is not None:
                        watch.end("admitted")
                    return permit
                seconds, paused = held
                if watch is not None:
                    watch.begin(seconds, paused)
                if waiter.patience.refuses(seconds, paused):
                    raise QuotaWaitError(
                        _too_long(bucket, seconds, paused, waiter.patience),
                        retry_after=seconds,
                        retryable=False,
                    )
                # The head sleeps at most a day at a time (a quota counted per month may name a
                # longer wait than a timer takes); the others until the head leaves or wakes them.
                self.clock.wait(waiter.wake, min(seconds, MAX_RETRY_AFTER) if first else None)
        except BaseException as exc:
            if watch is not None:
                watch.end(_outcome(exc))
            raise
        finally:
            with line.lock:
                line.waiters.remove(waiter)
                if line.waiters:
                    line.waiters[0].wake.set()
            if unlink is not None:
                unlink()

    def _at_once(self, line: _Line, permit: Permit) -> bool:
        """Admit ``permit`` without joining the line when nobody waits in it and the bucket's
        last answer was room: a fleet whose quota does not bind pays one backend call per
        request, not a queue and a thread hand-off (which cost a thousand threads released
        together more than their requests). Refused, the request joins the line as any other;
        the refusal is the line's, so later arrivals queue behind it."""
        # Read without the line's lock: a thread that joins the line as this one looks arrives
        # at the same moment, and either order is arrival order.
        if line.waiters or line.refusal is not None:
            return False
        return self._ask(line, permit) is None

    def _patience(self, max_pause: float | None) -> _Patience:
        quota, quota_why = math.inf, ""
        if self.max_wait is not None:
            quota = self.max_wait
            quota_why = f"longer than the limiter's max_wait ({_text(quota)})"
        if self.pause_is_down:
            why = "a paused model is down while a fallback can answer"
            return _Patience(0.0, why, quota, quota_why)
        if max_pause is not None and max_pause < quota:
            why = f"longer than the request waits for a Retry-After ({_text(max_pause)})"
            return _Patience(max_pause, why, quota, quota_why)
        return _Patience(quota, quota_why, quota, quota_why)

    def _look(
        self, line: _Line, waiter: _Waiter, permit: Permit
    ) -> tuple[bool, tuple[float, bool] | None]:
        """Whether ``waiter`` is first in line, and how long the bucket holds it: as the backend
        answers the first (``None``: admitted), as the first was last answered for the others
        (0 when it has not been yet)."""
        with line.lock:
            first = line.waiters[0] is waiter
            known = line.refusal
        if first:
            return True, self._ask(line, permit)
        if known is None:
            return False, (0.0, False)
        return False, (max(known[0] - self.clock.now(), 0.0), known[1])

    def _ask(self, line: _Line, permit: Permit) -> tuple[float, bool] | None:
        """The head asks the backend: ``None`` when admitted, else the wait it names (which the
        threads behind learn, those it is too long for woken to leave). It reserves its estimate
        times what the bucket has learned by now (answers may have settled while it waited)."""
        quota = permit.quota
        if quota is not None and quota.tokens is not None and permit.estimate:
            with line.lock:
                permit.tokens = math.ceil(permit.estimate * line.scale)
        refusal = self.backend.try_acquire(
            permit.bucket, permit.quota, permit.permit_id, permit.tokens
        )
        if refusal is None:
            if line.refusal is not None:  # none to clear, most of the time: no lock taken
                with line.lock:
                    line.refusal = None
            return None
        seconds = clamp_retry_after(refusal.seconds) or 0.0
        paused = refusal.paused
        until = self.clock.now() + seconds
        with line.lock:
            line.refusal = (until, paused)
            for other in islice(line.waiters, 1, None):
                if other.patience.refuses(seconds, paused):
                    other.wake.set()
            log = line.should_log(until, paused, seconds > self.long_wait, self.long_wait)
        if log:
            held = "paused by a 429's Retry-After" if paused else "full"
            _logger().warning(
                "%s is %s: requests wait %s for it", permit.bucket, held, _text(seconds)
            )
        return seconds, paused

    def pause(self, model: Model, seconds: float) -> None:
        """Hold back every request of ``model``'s bucket for ``seconds`` (a 429's Retry-After,
        read by :func:`clamp_retry_after`: no usable number pauses nothing)."""
        wait = clamp_retry_after(seconds)
        if not wait:
            return
        bucket, _ = self.bucket(model)
        self.backend.pause(bucket, wait)
        line = self._line(bucket)
        with line.lock:
            log = line.should_log(self.clock.now() + wait, True, True, self.long_wait)
        if log:
            _logger().warning(
                "%s paused for %s by a 429's Retry-After: requests that do not wait so long"
                " fail at once",
                bucket,
                _text(wait),
            )
        line.nudge()

    def _settle(self, permit: Permit, tokens: int, learn: bool) -> None:
        self.backend.settle(permit.bucket, permit.quota, permit.permit_id, tokens)
        quota = permit.quota
        if quota is None or quota.tokens is None:
            return
        line = self._line(permit.bucket)
        if learn and permit.estimate:
            line.learn(tokens / permit.estimate)
        if tokens < permit.tokens:
            line.nudge()  # fewer tokens than reserved: room for the next


def _outcome(exc: BaseException) -> Outcome:
    if isinstance(exc, QuotaWaitError):
        return "refused"
    if isinstance(exc, AbortError) or not isinstance(exc, Exception):
        return "aborted"
    return "failed"  # the backend could not be asked (its store unreachable, say)


def _too_long(bucket: str, seconds: float, paused: bool, patience: _Patience) -> str:
    if paused:
        return f"{bucket} is paused for {_text(seconds)} more by a 429's Retry-After: " + (
            patience.pause_why
        )
    return f"{bucket} has no room for {_text(seconds)}, {patience.quota_why}"


class _Watch:
    """One request's wait as the limiter's listeners see it: begun once, ended once if begun."""

    def __init__(self, limiter: RateLimiter, bucket: str, model: Model) -> None:
        self.limiter = limiter
        self.bucket = bucket
        self.model = f"{model.provider}:{model.id}"
        self.begun: QuotaWait | None = None
        self.since = 0.0

    def begin(self, seconds: float, paused: bool) -> None:
        if self.begun is None:
            self.since = self.limiter.clock.now()
            self.begun = QuotaWait(self.bucket, self.model, seconds, paused, time.time())
            self._tell(self.begun)

    def end(self, outcome: Outcome) -> None:
        if self.begun is not None:
            waited = max(self.limiter.clock.now() - self.since, 0.0)
            self._tell(dataclasses.replace(self.begun, waited=waited, outcome=outcome))

    def _tell(self, wait: QuotaWait) -> None:
        for listener in self.limiter._listeners:
            try:
                listener(wait)
            except Exception:  # a listener must never fail the request it watches
                _logger().exception("a rate limiter's wait listener failed")


def _logger() -> Any:
    """The ``agentkit.limits`` logger (``logging`` is imported at the first record, as
    :func:`agentkit._log.agentkit_logger` does, to keep it out of ``import agentkit``)."""
    import logging

    return logging.getLogger("agentkit.limits")
