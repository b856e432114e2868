"""Shared quotas: a :class:`RateLimiter` for requests and tokens per minute, per provider and model.

A fleet of agents shares one API quota. Give each of them the same limiter
(``Agent(rate_limiter=limiter)``) and every request, retries included, first takes a
:class:`Permit` from it: the request waits, abortably, until its bucket has room. With the
default :class:`MemoryBackend` the agents of one process share the quota; with
:class:`RedisBackend` every process that points at the same Redis does (a Celery deployment).

The window is a sliding log, the way providers count: a request may go when fewer than
``requests`` were admitted in the last ``per`` seconds and the tokens counted in that window
leave room for its estimate. Tokens are reserved before the request (an estimate: the request
body's size over four, plus ``max_tokens`` or the limiter's ``output_tokens``) and settled with
the usage the response reports; a settled entry is restamped with the time it settled, which is
never earlier than the server saw the request, so the limiter's window never ends before the
server's. A 429 that says how long to wait (``Retry-After``) pauses the bucket for every agent,
not only for the request that got it.

Where it plugs in: the request runner (:mod:`agentkit.providers.runner`) takes a permit before
each attempt when ``StreamOptions.rate_limiter`` is set. A wait for quota is woken by the
run's abort signal, which a run's deadline (``Budgets(timeout=...)``) also fires.
"""

from __future__ import annotations

import heapq
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .errors import AbortError
from .waits import wait_event

if TYPE_CHECKING:
    from .abort import AbortSignal
    from .types import Model, Usage

__all__ = [
    "MemoryBackend",
    "Permit",
    "Quota",
    "QuotaBackend",
    "RateLimiter",
    "RedisBackend",
]

DEFAULT_OUTPUT_TOKENS = 1024
"""The output tokens a request is assumed to use when it sets no ``max_tokens``."""

CHARS_PER_TOKEN = 4
"""The request body's bytes per estimated input token (JSON overhead makes it an over-estimate)."""


class Quota(BaseModel):
    """How much one bucket may use: ``requests`` and ``tokens`` per ``per`` seconds (a minute by
    default); ``None`` is no limit on that count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    per: float = Field(default=60.0, gt=0)


class QuotaBackend(Protocol):
    """Where the buckets' counts live. Every method is atomic for all its users at once.

    ``quota`` is ``None`` for a bucket without limits, which only a pause can hold back.
    """

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> float | None:
        """Admit the request (``None``) or say how many seconds to wait before asking again."""

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        """Count ``tokens`` for an admitted request instead of its estimate; restamp it now."""

    def pause(self, bucket: str, seconds: float) -> None:
        """Admit nothing in ``bucket`` for ``seconds`` (a longer pause already set stays)."""


# --- the in-process backend -------------------------------------------------------------------


@dataclass
class _Window:
    """One bucket's admitted requests in the window: ``entries`` (id -> stamp, tokens), a heap
    of stamps for expiry (stale pairs are skipped), and the tokens they add up to."""

    entries: dict[str, tuple[float, int]] = field(default_factory=dict)
    stamps: list[tuple[float, str]] = field(default_factory=list)
    used: int = 0
    paused_until: float = 0.0

    def expire(self, cutoff: float) -> None:
        while self.stamps and self.stamps[0][0] <= cutoff:
            stamp, permit_id = heapq.heappop(self.stamps)
            entry = self.entries.get(permit_id)
            if entry is not None and entry[0] == stamp:
                del self.entries[permit_id]
                self.used -= entry[1]

    def wait_for(self, quota: Quota, tokens: int, now: float) -> float:
        """Seconds until a request of ``tokens`` fits (0: it fits now)."""
        wait = 0.0
        count = len(self.entries)
        if quota.requests is not None and count >= quota.requests:
            nth = heapq.nsmallest(count - quota.requests + 1, (s for s, _ in self.entries.values()))
            wait = nth[-1] + quota.per - now
        if quota.tokens is not None and count and self.used + tokens > quota.tokens:
            # A request larger than the whole quota waits for an empty window, then goes alone.
            need = self.used + tokens - quota.tokens
            freed, until = 0, now
            for stamp, amount in sorted(self.entries.values()):
                freed, until = freed + amount, stamp
                if freed >= need:
                    break
            wait = max(wait, until + quota.per - now)
        return wait


class MemoryBackend:
    """The buckets in this process's memory: shared by every agent of the process."""

    def __init__(self) -> None:
        # Guards _windows and every _Window in it.
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> float | None:
        now = time.monotonic()
        with self._lock:
            window = self._windows.setdefault(bucket, _Window())
            if window.paused_until > now:
                return window.paused_until - now
            if quota is None or (quota.requests is None and quota.tokens is None):
                return None
            window.expire(now - quota.per)
            wait = window.wait_for(quota, tokens, now)
            if wait > 0:
                return wait
            window.entries[permit_id] = (now, tokens)
            heapq.heappush(window.stamps, (now, permit_id))
            window.used += tokens
            return None

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        now = time.monotonic()
        with self._lock:
            window = self._windows.get(bucket)
            entry = window.entries.get(permit_id) if window is not None else None
            if window is None or entry is None:
                return  # no limits, or already out of the window
            stamp = max(now, entry[0])
            window.entries[permit_id] = (stamp, tokens)
            window.used += tokens - entry[1]
            heapq.heappush(window.stamps, (stamp, permit_id))

    def pause(self, bucket: str, seconds: float) -> None:
        until = time.monotonic() + seconds
        with self._lock:
            window = self._windows.setdefault(bucket, _Window())
            window.paused_until = max(window.paused_until, until)


# --- the Redis backend ------------------------------------------------------------------------

# Each script runs atomically in Redis and takes the time from the server (TIME), so every
# process of a fleet, on any host, reads one clock. KEYS: the log (a sorted set of permit ids
# by stamp), the tokens of each id (a hash), their sum, and the pause (an absolute time).
# Numbers go back as strings: Redis would cut a Lua number to an integer.
_EXPIRE = """
local function expire(log, amounts, used, cutoff)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
  if #old == 0 then return end
  local freed = 0
  for i = 1, #old, 500 do
    local chunk = {unpack(old, i, math.min(i + 499, #old))}
    for _, v in ipairs(redis.call('HMGET', amounts, unpack(chunk))) do
      freed = freed + (tonumber(v) or 0)
    end
    redis.call('HDEL', amounts, unpack(chunk))
  end
  redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
  redis.call('DECRBY', used, freed)
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
"""

_ACQUIRE = (
    _EXPIRE
    + """
local log, amounts, used_key, pause_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, max_requests, max_tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local per, tokens = tonumber(ARGV[4]), tonumber(ARGV[5])
local t = now()
local paused = tonumber(redis.call('GET', pause_key) or '0')
if paused > t then return tostring(paused - t) end
if max_requests < 0 and max_tokens < 0 then return false end
expire(log, amounts, used_key, t - per)
local count = redis.call('ZCARD', log)
local used = tonumber(redis.call('GET', used_key) or '0')
local wait = 0
if max_requests >= 0 and count >= max_requests then
  local nth = redis.call('ZRANGE', log, count - max_requests, count - max_requests, 'WITHSCORES')
  wait = tonumber(nth[2]) + per - t
end
if max_tokens >= 0 and count > 0 and used + tokens > max_tokens then
  local need, freed, until_ = used + tokens - max_tokens, 0, t
  local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(redis.call('HGET', amounts, entries[i])) or 0)
    until_ = tonumber(entries[i + 1])
    if freed >= need then break end
  end
  wait = math.max(wait, until_ + per - t)
end
if wait > 0 then return tostring(wait) end
redis.call('ZADD', log, t, id)
redis.call('HSET', amounts, id, tokens)
redis.call('INCRBY', used_key, tokens)
local ttl = math.ceil(per * 2000) + 1000
redis.call('PEXPIRE', log, ttl)
redis.call('PEXPIRE', amounts, ttl)
redis.call('PEXPIRE', used_key, ttl)
return false
"""
)

_SETTLE = (
    _EXPIRE
    + """
local log, amounts, used_key = KEYS[1], KEYS[2], KEYS[3]
local id, tokens = ARGV[1], tonumber(ARGV[2])
local stamp = redis.call('ZSCORE', log, id)
if not stamp then return 0 end
local t = now()
local old = tonumber(redis.call('HGET', amounts, id) or '0')
redis.call('HSET', amounts, id, tokens)
redis.call('INCRBY', used_key, tokens - old)
if t > tonumber(stamp) then redis.call('ZADD', log, t, id) end
return 1
"""
)

_PAUSE = (
    _EXPIRE
    + """
local pause_key, seconds = KEYS[1], tonumber(ARGV[1])
local until_ = now() + seconds
local current = tonumber(redis.call('GET', pause_key) or '0')
if until_ > current then
  redis.call('SET', pause_key, tostring(until_), 'PX', math.ceil(seconds * 1000) + 1000)
end
return 1
"""
)


class RedisBackend:
    """The buckets in Redis: shared by every process that uses the same server and ``prefix``.

    ``client`` is a ``redis.Redis`` (thread-safe; it reconnects after a fork) or a URL such as
    ``redis://localhost:6379/0``. Each operation is one Lua script, atomic across processes,
    timed by the Redis server's clock. Needs the ``redis`` extra (``pip install
    agentkit[redis]``) and Redis 5 or later. Idle buckets expire on their own.
    """

    def __init__(self, client: Any, prefix: str = "agentkit:quota") -> None:
        if isinstance(client, str):
            import redis  # the optional dependency, loaded only for this backend

            client = redis.Redis.from_url(client)
        self.client = client
        self.prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)
        self._settle = client.register_script(_SETTLE)
        self._pause = client.register_script(_PAUSE)

    def _keys(self, bucket: str) -> list[str]:
        # The braces keep a bucket's keys in one slot of a Redis Cluster.
        base = f"{self.prefix}:{{{bucket}}}"
        return [f"{base}:log", f"{base}:tokens", f"{base}:used", f"{base}:pause"]

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> float | None:
        requests = -1 if quota is None or quota.requests is None else quota.requests
        max_tokens = -1 if quota is None or quota.tokens is None else quota.tokens
        per = 60.0 if quota is None else quota.per
        wait = self._acquire(
            keys=self._keys(bucket), args=[permit_id, requests, max_tokens, repr(per), tokens]
        )
        return None if wait is None else float(wait)

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        if quota is None or (quota.requests is None and quota.tokens is None):
            return
        self._settle(keys=self._keys(bucket)[:3], args=[permit_id, tokens])

    def pause(self, bucket: str, seconds: float) -> None:
        self._pause(keys=self._keys(bucket)[3:], args=[repr(max(seconds, 0.0))])


# --- the limiter ------------------------------------------------------------------------------


class _Line:
    """This process's threads waiting for one bucket, first come first served: only the head
    asks the backend, so a freed slot costs one backend call, not one per waiting thread."""

    def __init__(self) -> None:
        # Guards waiters: each waiting thread's wake-up event, in arrival order.
        self.lock = threading.Lock()
        self.waiters: deque[threading.Event] = deque()

    def nudge(self) -> None:
        """Make the head look again (room may have been freed, or a pause set)."""
        with self.lock:
            if self.waiters:
                self.waiters[0].set()


@dataclass
class Permit:
    """One admitted request: settle it with the usage the response reported."""

    limiter: RateLimiter
    bucket: str
    quota: Quota | None
    permit_id: str
    tokens: int
    settled: bool = False

    def settle(self, usage: Usage | int | None) -> None:
        """Count what the request used instead of its estimate (once; later calls do nothing).
        ``None`` (no answer, so nothing used) counts 0 tokens; the request itself still counts."""
        if self.settled:
            return
        self.settled = True
        if usage is None:
            used = 0
        elif isinstance(usage, int):
            used = usage
        else:
            used = usage.total_tokens or usage.input + usage.output
        self.limiter._settle(self, max(int(used), 0))


class RateLimiter:
    """Requests and tokens per minute for each provider and model, shared by every agent that
    holds it (and through :class:`RedisBackend`, by every process).

    ``quotas`` maps ``"provider:model_id"`` (one model) or ``"provider"`` (every model of that
    provider together) to a :class:`Quota` or a dict of its fields; the exact name wins. A model
    with no quota is not limited, but a 429's ``Retry-After`` still pauses it for everyone.
    ``output_tokens`` is the output a request is assumed to use when it sets no ``max_tokens``.
    """

    def __init__(
        self,
        quotas: Mapping[str, Quota | Mapping[str, Any]] | None = None,
        *,
        backend: QuotaBackend | None = None,
        output_tokens: int = DEFAULT_OUTPUT_TOKENS,
    ) -> None:
        self.quotas: dict[str, Quota] = {
            name: quota if isinstance(quota, Quota) else Quota.model_validate(quota)
            for name, quota in (quotas or {}).items()
        }
        self.backend: QuotaBackend = backend if backend is not None else MemoryBackend()
        self.output_tokens = output_tokens
        # Guards _lines (one per bucket, made on first use).
        self._lines_lock = threading.Lock()
        self._lines: dict[str, _Line] = {}

    def bucket(self, model: Model) -> tuple[str, Quota | None]:
        """The bucket ``model``'s requests count in, and its quota (``None``: not limited)."""
        exact = f"{model.provider}:{model.id}"
        for name in (exact, model.provider):
            if name in self.quotas:
                return name, self.quotas[name]
        return exact, None

    def estimate(self, body_bytes: int, max_tokens: int | None) -> int:
        """The tokens reserved for a request whose body has ``body_bytes`` bytes."""
        output = max_tokens if max_tokens is not None else self.output_tokens
        return body_bytes // CHARS_PER_TOKEN + max(output, 0)

    def _line(self, bucket: str) -> _Line:
        with self._lines_lock:
            line = self._lines.get(bucket)
            if line is None:
                line = self._lines[bucket] = _Line()
            return line

    def acquire(self, model: Model, tokens: int = 0, signal: AbortSignal | None = None) -> Permit:
        """Wait until ``model``'s bucket has room for one request of ``tokens``, and take it.

        Raises :class:`~agentkit.AbortError` as soon as ``signal`` fires (a run's deadline fires
        it too). Threads of this process waiting on one bucket are served in arrival order.
        """
        bucket, quota = self.bucket(model)
        permit = Permit(self, bucket, quota, uuid.uuid4().hex, max(int(tokens), 0))
        line = self._line(bucket)
        wake = threading.Event()
        with line.lock:
            line.waiters.append(wake)
        unlink = signal.add_callback(wake.set) if signal is not None else None
        try:
            while True:
                wake.clear()  # before looking: a nudge from now on ends the wait below
                if signal is not None and signal.aborted:
                    raise AbortError(f"Gave up waiting for the {bucket} quota: the run was aborted")
                with line.lock:
                    first = line.waiters[0] is wake
                if not first:
                    wait_event(wake)  # the thread ahead leaves, or the abort
                    continue
                wait = self.backend.try_acquire(bucket, quota, permit.permit_id, permit.tokens)
                if wait is None:
                    return permit
                wait_event(wake, wait)
        finally:
            with line.lock:
                line.waiters.remove(wake)
                if line.waiters:
                    line.waiters[0].set()
            if unlink is not None:
                unlink()

    def pause(self, model: Model, seconds: float) -> None:
        """Hold back every request of ``model``'s bucket for ``seconds`` (a 429's Retry-After)."""
        bucket, _ = self.bucket(model)
        self.backend.pause(bucket, seconds)
        self._line(bucket).nudge()

    def _settle(self, permit: Permit, tokens: int) -> None:
        self.backend.settle(permit.bucket, permit.quota, permit.permit_id, tokens)
        quota = permit.quota
        if quota is not None and quota.tokens is not None and tokens < permit.tokens:
            self._line(permit.bucket).nudge()  # fewer tokens than reserved: room for the next
