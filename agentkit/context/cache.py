"""Cache-aware requests: what each request read from and wrote to the provider's prompt cache,
and a warning when a request broke the cached prefix of the one before it.

A provider caches the prefix of a request (tools, system prompt, messages, in that order) and
bills what the next request reads of it at a tenth of the input price, or not at all; llama.cpp
reuses its slot's prefix and skips reading it again. A timestamp in the system prompt, tools
declared in another order, or an earlier message edited turns every later request into a
cache miss, silently: the answers stay right, the bill and the latency grow.

:class:`CacheWatch` is a run policy (:mod:`agentkit.policy`) that compares each model request
with the one before it (the previous run's last one, for a run's first) and, the first time in
a run that the prefix broke, says which part broke it and where, on the ``agentkit`` logger
and as a :class:`CacheNote` in the transcript (an entry of role ``"cache"``, which no model
reads: the run's events, its result, a session, the web page and the run's span show it). A
compaction is an expected break: it is noted, at ``INFO``, never warned about. When the
provider's cache reads fall to zero although the prefix was the same, it says so once (the
cache most likely expired). Notes name parts and positions, never a prompt's or a message's
text: at most the shape of a changed timestamp (``9999-99-99 99:99``).

:func:`cache_report` reads a run's result (or any list of messages) into a
:class:`CacheReport`: each turn's cache reads and writes, their totals, and the notes.

    from agentkit import Agent
    from agentkit.context import CacheWatch, cache_report

    agent = Agent(model=..., policies=[CacheWatch()])
    result = agent.prompt("...")
    report = cache_report(result)
    report.cache_read, report.turns[-1].cache_read, report.warning
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .._log import agentkit_logger
from ..policy import ModelRequest, RequestHandler, RunPolicy, RunScope
from ..transcript import latest_compaction
from ..types import AssistantMessage, as_model, now_ms, role_of
from ._prefix import Change, Shape, first_change, shape_of

CACHE_ROLE = "cache"
"""The role of a :class:`CacheNote` in a transcript."""

NoteKind = Literal["break", "compaction", "expired"]


class CacheNote(BaseModel):
    """What :class:`CacheWatch` noticed about a request, as the transcript keeps it.

    ``kind``: ``"break"`` (the request broke the cached prefix of the one before it: a
    warning), ``"compaction"`` (a compaction rewrote the messages: an expected break) or
    ``"expired"`` (the prefix was the same, yet the provider read nothing from its cache).
    ``part`` is what changed first (``model``, ``tools``, ``system_prompt``, ``messages``,
    ``options``; ``cache`` for an expiry), ``position`` where in it (a character of the system
    prompt, a tool's or a message's index), ``request`` which of the run's requests it was
    (from 1), ``summary`` the line the logs, the span and the web page show, ``detail`` the
    rest (tool or option names, a message's role, a hint's kind and shape, ``also``: later
    parts that changed too). No prompt or message text is ever kept here."""

    model_config = ConfigDict(extra="ignore", defer_build=True)

    role: Literal["cache"] = "cache"
    kind: NoteKind
    part: str
    summary: str
    position: int | None = None
    request: int = 0
    detail: dict[str, Any] = Field(default_factory=dict)
    timestamp: int = Field(default_factory=now_ms)


class TurnCache(BaseModel):
    """One turn's request: its ``input`` tokens (those not read from or written to the cache),
    ``cache_read`` and ``cache_write`` tokens, and ``output`` tokens, as the provider reported
    them (0 where it reported nothing)."""

    request: int
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    output: int = 0

    @property
    def prompt(self) -> int:
        """Every token of the request's prompt: input, cache reads and cache writes."""
        return self.input + self.cache_read + self.cache_write

    @property
    def hit_ratio(self) -> float:
        """The share of the prompt read from the cache (0.0 for an empty prompt)."""
        return self.cache_read / self.prompt if self.prompt else 0.0


class CacheReport(BaseModel):
    """A run's cache use: each turn's request (:class:`TurnCache`, in order), the totals of
    their ``input``, ``cache_read`` and ``cache_write`` tokens, and the :class:`CacheNote`
    entries of the run. (A compaction's summary requests are not turns: ``result.usage`` counts
    them too.)"""

    turns: list[TurnCache] = Field(default_factory=list)
    input: int = 0
    cache_read: int = 0
    cache_write: int = 0
    notes: list[CacheNote] = Field(default_factory=list)

    @property
    def hit_ratio(self) -> float:
        """The share of every turn's prompt read from the cache."""
        prompt = self.input + self.cache_read + self.cache_write
        return self.cache_read / prompt if prompt else 0.0

    @property
    def warning(self) -> str | None:
        """The first warning's line (a break or an expiry; a compaction is none), or ``None``."""
        return next((n.summary for n in self.notes if n.kind != "compaction"), None)


def _count(value: Any) -> int:
    """A reported token count as a non-negative int (a stream function of one's own may report
    anything: a negative, a float, nothing)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(number, 0)


def turn_cache(request: int, message: Any) -> TurnCache:
    """The :class:`TurnCache` of an assistant message (its ``usage``, however incomplete)."""
    usage = getattr(message, "usage", None)
    return TurnCache(
        request=request,
        input=_count(getattr(usage, "input", 0)),
        cache_read=_count(getattr(usage, "cache_read", 0)),
        cache_write=_count(getattr(usage, "cache_write", 0)),
        output=_count(getattr(usage, "output", 0)),
    )


def cache_report(messages: Iterable[Any]) -> CacheReport:
    """The :class:`CacheReport` of a run's result (or of any transcript, a session's say):
    its assistant messages are the turns, its ``"cache"`` entries the notes."""
    report = CacheReport()
    for message in messages:
        role = role_of(message)
        if role == "assistant":
            turn = turn_cache(len(report.turns) + 1, message)
            report.turns.append(turn)
            report.input += turn.input
            report.cache_read += turn.cache_read
            report.cache_write += turn.cache_write
        elif role == CACHE_ROLE:
            report.notes.append(as_model(CacheNote, message))
    return report


class CacheWatch(RunPolicy):
    """Watches each model request's cached prefix (see the module). Give one to an agent
    (``Agent(policies=[CacheWatch()])``): it remembers the agent's last request across runs,
    so that a run's first request is compared with the previous run's last (a system prompt
    that carries the time shows there). One per agent: two agents' requests have nothing to
    compare.

    ``record``: add a :class:`CacheNote` to the transcript for each warning and compaction
    (default); ``False`` logs only. ``logger``: where to log (the ``agentkit`` logger).
    ``clock``: seconds for the gap an expiry note gives (``time.monotonic``)."""

    name = "cache"

    def __init__(
        self,
        *,
        record: bool = True,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.record = record
        self.logger = logger
        self.clock = clock
        self._lock = threading.Lock()  # guards _last: runs of an agent follow each other, but
        # one watch given to agents that run at once must not tear it
        self._last: Shape | None = None

    @property
    def last(self) -> Shape | None:
        """The last request seen (its :class:`~agentkit.context._prefix.Shape`), if any."""
        with self._lock:
            return self._last

    def remember(self, shape: Shape) -> Shape | None:
        """Keep ``shape`` as the last request; return the one it replaces."""
        with self._lock:
            previous, self._last = self._last, shape
        return previous

    def for_run(self, run: RunScope) -> RunPolicy:
        return _WatchRun(self)


class _WatchRun(RunPolicy):
    """One run's side of a :class:`CacheWatch`: counts its requests and says each warning
    once."""

    name = "cache"

    def __init__(self, watch: CacheWatch) -> None:
        self.watch = watch
        self.requests = 0
        self.said: set[str] = set()  # the kinds of note said at WARNING in this run

    def wrap_request(
        self, run: RunScope, request: ModelRequest, call_next: RequestHandler
    ) -> AssistantMessage:
        if request.purpose != "turn":
            return call_next(request)  # a summary or a judge: a prefix of its own
        self.requests += 1
        try:
            shape = shape_of(request.model, request.context, request.options, self.watch.clock())
            shape.compaction = _compaction_key(run.context.messages)
            previous = self.watch.remember(shape)
            change = first_change(previous, shape) if previous is not None else None
            if change is not None and previous is not None:
                self._broke(run, change, compacted=shape.compaction != previous.compaction)
        except Exception as exc:  # a watch must never fail the run it watches
            self._failed("read", exc)
            return call_next(request)
        message = call_next(request)
        try:
            self._answered(run, shape, previous if change is None else None, message)
        except Exception as exc:
            self._failed("check", exc)
        return message

    def _failed(self, what: str, exc: Exception) -> None:
        """Log that the watch could not do its work on this request: the exception's type
        only, as its text may quote a message."""
        logger = self.watch.logger or agentkit_logger()
        logger.warning("agentkit cache: could not %s request %d (%s); the run goes on",
                       what, self.requests, type(exc).__name__)  # fmt: skip

    def _broke(self, run: RunScope, change: Change, *, compacted: bool) -> None:
        detail = dict(change.detail, also=change.also) if change.also else dict(change.detail)
        if compacted and change.part == "messages":
            summary = (f"request {self.requests}: a compaction rewrote the messages (from "
                       f"message {change.position}): an expected break of the cached prefix")  # fmt: skip
            self._note(run, "compaction", change.part, summary, change.position, detail)
            return
        also = f" (also changed: {', '.join(change.also)})" if change.also else ""
        summary = (f"request {self.requests} broke the cached prefix of the request before "
                   f"it: {change.text}{also}")  # fmt: skip
        self._note(run, "break", change.part, summary, change.position, detail)

    def _answered(
        self, run: RunScope, shape: Shape, kept: Shape | None, message: AssistantMessage
    ) -> None:
        """Keep what the provider reported for ``shape``; note an expiry when the prefix of
        ``kept`` (the request before, its prefix unbroken) was cached and nothing was read."""
        if message.stop_reason in ("error", "aborted"):
            return
        turn = turn_cache(self.requests, message)
        shape.cache_read, shape.cache_write, shape.answered = (
            turn.cache_read, turn.cache_write, True,
        )  # fmt: skip
        if kept is None or not kept.answered or kept.cache_read + kept.cache_write == 0:
            return
        if turn.cache_read > 0 or turn.input + turn.output == 0:
            return  # read from the cache, or reported no usage at all
        gap = max(shape.at - kept.at, 0.0)
        summary = (f"request {self.requests} read nothing from the cache although its prefix "
                   f"was the same as the request before it, {gap:.0f} s earlier, which "
                   f"{'read' if kept.cache_read else 'wrote'} "
                   f"{kept.cache_read or kept.cache_write} tokens: the cache likely expired")  # fmt: skip
        detail = {"gap_s": round(gap, 3), "cache_read_before": kept.cache_read,
                  "cache_write_before": kept.cache_write}  # fmt: skip
        self._note(run, "expired", "cache", summary, None, detail)

    def _note(
        self,
        run: RunScope,
        kind: NoteKind,
        part: str,
        summary: str,
        position: int | None,
        detail: dict[str, Any],
    ) -> None:
        """Log the note (a warning once per run and kind; a compaction at ``INFO``) and add it
        to the transcript when the watch records."""
        logger = self.watch.logger or agentkit_logger()
        first = kind not in self.said
        if kind == "compaction":
            logger.info("agentkit cache: %s", summary)
        elif first:
            self.said.add(kind)
            logger.warning("agentkit cache: %s", summary)
        else:
            logger.debug("agentkit cache: %s", summary)
            return  # said once this run: later ones are not recorded again
        if self.watch.record:
            note = CacheNote(kind=kind, part=part, summary=summary, position=position,
                             request=self.requests, detail=detail)  # fmt: skip
            run.append([note])


def _compaction_key(messages: list[Any]) -> tuple[int, int] | None:
    """Which compaction the transcript's view stands on (its record's place and time), or
    ``None``: a request after another compaction has its messages rewritten on purpose."""
    found = latest_compaction(messages)
    if found is None:
        return None
    return found[1].index, found[1].timestamp
