"""Where a fleet's quotas are counted: the backends of :mod:`agentkit.limits` (which names
them all; import them from there), the :class:`Quota` they count against, and the clock and the
reading of a server's ``Retry-After`` they share.

A backend keeps, per bucket, a sliding log of the requests admitted in its window and a pause.
Each entry of the log is stamped with the time it leaves the window: ``per`` seconds after its
request settled, or, while the request is in flight, ``per`` plus :data:`IN_FLIGHT_LEASE` after
it was admitted (a request whose process died must not hold its place for ever).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from ._extras import needs_extra
from .waits import wait_event

MAX_RETRY_AFTER = 86_400.0
"""The longest wait a server's ``Retry-After`` is taken at (a day), and the longest pause."""

IN_FLIGHT_LEASE = 900.0
"""Seconds beyond ``per`` that an admitted request that never settles keeps its place."""


def clamp_retry_after(seconds: Any) -> float | None:
    """The wait a server asked for, as agentkit takes it: a finite number of seconds, 0 or more,
    at most :data:`MAX_RETRY_AFTER`; ``None`` for no usable wait (not a number, infinite, NaN,
    or negative). The one reading of every ``Retry-After``: the runner's, a pause's, a backend's.
    """
    try:
        value = float(seconds)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return min(value, MAX_RETRY_AFTER)


# --- time -------------------------------------------------------------------------------------


class Clock(Protocol):
    """The time a limiter and a :class:`MemoryBackend` count in (tests give a fake one)."""

    def now(self) -> float:
        """Seconds from any origin; never goes back."""

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Block until ``event`` is set (``True``) or ``timeout`` seconds passed (``False``;
        ``None``: no limit)."""


class SystemClock:
    """``time.monotonic``, and waits that Ctrl-C ends on the main thread (:mod:`agentkit.waits`)."""

    def now(self) -> float:
        return time.monotonic()

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return wait_event(event, timeout)


SYSTEM_CLOCK = SystemClock()


# --- the quota and the backends' contract -----------------------------------------------------


class Quota(BaseModel):
    """How much one bucket may use: ``requests`` and ``tokens`` per ``per`` seconds (a minute by
    default); ``None`` is no limit on that count."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int | None = Field(default=None, ge=1)
    tokens: int | None = Field(default=None, ge=1)
    per: float = Field(default=60.0, gt=0, allow_inf_nan=False)


@dataclass(frozen=True)
class Refusal:
    """A bucket's answer to a request it cannot admit now: ``seconds`` until it may have room,
    as the bucket stands; ``paused`` when a 429's ``Retry-After`` holds it, not its quota."""

    seconds: float
    paused: bool = False


class QuotaBackend(Protocol):
    """Where the buckets' counts live. Every method is atomic for all its users at once.

    ``quota`` is ``None`` for a bucket without limits, which only a pause can hold back.
    """

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> Refusal | None:
        """Admit the request (``None``: it holds its place until settled, or until its lease
        ends) or say how long to wait before asking again."""

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        """Count ``tokens`` for an admitted request instead of its estimate; it leaves the
        window ``per`` seconds from now."""

    def pause(self, bucket: str, seconds: float) -> None:
        """Admit nothing in ``bucket`` for ``seconds`` (a longer pause already set stays)."""


# --- the in-process backend -------------------------------------------------------------------


@dataclass
class _Window:
    """One bucket's admitted requests: ``entries`` maps each to (when it leaves the window, its
    tokens); ``heap`` orders the same pairs for expiry (stale ones are skipped); ``used`` is the
    tokens' sum. A request in flight leaves at its lease's end, one settled ``per`` after."""

    entries: dict[str, tuple[float, int]] = field(default_factory=dict)
    heap: list[tuple[float, str]] = field(default_factory=list)
    used: int = 0
    paused_until: float = 0.0

    def expire(self, now: float) -> None:
        while self.heap and self.heap[0][0] <= now:
            leaves, permit_id = heapq.heappop(self.heap)
            entry = self.entries.get(permit_id)
            if entry is not None and entry[0] == leaves:
                del self.entries[permit_id]
                self.used -= entry[1]

    def put(self, permit_id: str, leaves: float, tokens: int) -> None:
        old = self.entries.get(permit_id)
        self.used += tokens - (old[1] if old is not None else 0)
        self.entries[permit_id] = (leaves, tokens)
        heapq.heappush(self.heap, (leaves, permit_id))

    def wait_for(self, quota: Quota, tokens: int, now: float) -> float:
        """Seconds until a request of ``tokens`` fits (0: it fits now). A request in flight
        leaves ``per`` after it settles, so ``now + per`` at the earliest."""
        horizon = now + quota.per
        wait = 0.0
        count = len(self.entries)
        if quota.requests is not None and count >= quota.requests:
            nth = heapq.nsmallest(count - quota.requests + 1, (e[0] for e in self.entries.values()))
            wait = min(nth[-1], horizon) - now
        if quota.tokens is not None and count and self.used + tokens > quota.tokens:
            # A request larger than the whole quota waits for an empty window, then goes alone.
            need = self.used + tokens - quota.tokens
            freed, until = 0, now
            for leaves, amount in sorted(self.entries.values()):
                freed, until = freed + amount, leaves
                if freed >= need:
                    break
            wait = max(wait, min(until, horizon) - now)
        return wait


class MemoryBackend:
    """The buckets in this process's memory: shared by every agent of the process.

    ``lease``: seconds beyond ``per`` that a request admitted and never settled keeps its place.
    """

    def __init__(self, clock: Clock | None = None, lease: float = IN_FLIGHT_LEASE) -> None:
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.lease = lease
        # Guards _windows and every _Window in it.
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> Refusal | None:
        now = self.clock.now()
        with self._lock:
            window = self._windows.setdefault(bucket, _Window())
            if window.paused_until > now:
                return Refusal(window.paused_until - now, paused=True)
            if quota is None or (quota.requests is None and quota.tokens is None):
                return None
            window.expire(now)
            wait = window.wait_for(quota, tokens, now)
            if wait > 0:
                return Refusal(wait)
            window.put(permit_id, now + quota.per + self.lease, tokens)
            return None

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        if quota is None:
            return
        now = self.clock.now()
        with self._lock:
            window = self._windows.get(bucket)
            if window is None:
                return
            window.expire(now)
            if permit_id in window.entries:  # else no limits, or its lease ran out
                window.put(permit_id, now + quota.per, tokens)

    def pause(self, bucket: str, seconds: float) -> None:
        wait = clamp_retry_after(seconds)
        if not wait:
            return
        until = self.clock.now() + wait
        with self._lock:
            window = self._windows.setdefault(bucket, _Window())
            window.paused_until = max(window.paused_until, until)


# --- the Redis backend ------------------------------------------------------------------------

# Each script runs atomically in Redis and takes the time from the server (TIME), so every
# process of a fleet, on any host, reads one clock. KEYS: the log (a sorted set of permit ids by
# the time each leaves the window), the tokens of each id (a hash), their sum, and the pause (an
# absolute time). Numbers go back as strings: Redis would cut a Lua number to an integer.
_EXPIRE = """
local function expire(log, amounts, used, now)
  local old = redis.call('ZRANGEBYSCORE', log, '-inf', now)
  if #old == 0 then return end
  local freed = 0
  for i = 1, #old, 500 do
    local chunk = {unpack(old, i, math.min(i + 499, #old))}
    for _, v in ipairs(redis.call('HMGET', amounts, unpack(chunk))) do
      freed = freed + (tonumber(v) or 0)
    end
    redis.call('HDEL', amounts, unpack(chunk))
  end
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now)
  redis.call('DECRBY', used, freed)
end
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
"""

# A request in flight leaves the window per seconds after it settles: t + per at the earliest,
# so each wait is measured to min(leaves, t + per).
_ACQUIRE = (
    _EXPIRE
    + """
local log, amounts, used_key, pause_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id, max_requests, max_tokens = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local per, tokens, lease = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local t = now()
local paused = tonumber(redis.call('GET', pause_key) or '0') or 0
if paused > t then return {tostring(paused - t), 1} end
if max_requests < 0 and max_tokens < 0 then return false end
expire(log, amounts, used_key, t)
local horizon = t + per
local count = redis.call('ZCARD', log)
local used = tonumber(redis.call('GET', used_key) or '0')
local wait = 0
if max_requests >= 0 and count >= max_requests then
  local nth = redis.call('ZRANGE', log, count - max_requests, count - max_requests, 'WITHSCORES')
  wait = math.min(tonumber(nth[2]), horizon) - t
end
if max_tokens >= 0 and count > 0 and used + tokens > max_tokens then
  local need, freed, until_ = used + tokens - max_tokens, 0, t
  local entries = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(redis.call('HGET', amounts, entries[i])) or 0)
    until_ = tonumber(entries[i + 1])
    if freed >= need then break end
  end
  wait = math.max(wait, math.min(until_, horizon) - t)
end
if wait > 0 then return {tostring(wait), 0} end
redis.call('ZADD', log, t + per + lease, id)
redis.call('HSET', amounts, id, tokens)
redis.call('INCRBY', used_key, tokens)
local ttl = math.ceil((per + lease) * 1000) + 1000
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
local id, tokens, per = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local t = now()
expire(log, amounts, used_key, t)
if not redis.call('ZSCORE', log, id) then return 0 end
local old = tonumber(redis.call('HGET', amounts, id) or '0')
redis.call('HSET', amounts, id, tokens)
redis.call('INCRBY', used_key, tokens - old)
redis.call('ZADD', log, t + per, id)
return 1
"""
)

_PAUSE = (
    _EXPIRE
    + """
local pause_key, seconds = KEYS[1], tonumber(ARGV[1])
local until_ = now() + seconds
local current = tonumber(redis.call('GET', pause_key) or '0') or 0
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
    timed by the Redis server's clock. Needs the ``redis`` extra and Redis 5 or later. Idle buckets expire on their own; ``lease`` is as
    for :class:`MemoryBackend` (here it frees the places of a worker that died mid-request).
    """

    def __init__(
        self, client: Any, prefix: str = "agentkit:quota", lease: float = IN_FLIGHT_LEASE
    ) -> None:
        if isinstance(client, str):
            try:
                import redis  # the optional dependency, loaded only for this backend
            except ImportError as exc:
                raise ImportError(needs_extra("RedisBackend (redis)", "redis")) from exc

            client = redis.Redis.from_url(client)
        self.client = client
        self.prefix = prefix
        self.lease = lease
        self._acquire = client.register_script(_ACQUIRE)
        self._settle = client.register_script(_SETTLE)
        self._pause = client.register_script(_PAUSE)

    def _keys(self, bucket: str) -> list[str]:
        # The braces keep a bucket's keys in one slot of a Redis Cluster.
        base = f"{self.prefix}:{{{bucket}}}"
        return [f"{base}:log", f"{base}:tokens", f"{base}:used", f"{base}:pause"]

    def try_acquire(
        self, bucket: str, quota: Quota | None, permit_id: str, tokens: int
    ) -> Refusal | None:
        requests = -1 if quota is None or quota.requests is None else quota.requests
        max_tokens = -1 if quota is None or quota.tokens is None else quota.tokens
        per = 60.0 if quota is None else quota.per
        args = [permit_id, requests, max_tokens, repr(per), tokens, repr(float(self.lease))]
        reply = self._acquire(keys=self._keys(bucket), args=args)
        return None if reply is None else Refusal(float(reply[0]), paused=bool(int(reply[1])))

    def settle(self, bucket: str, quota: Quota | None, permit_id: str, tokens: int) -> None:
        if quota is None or (quota.requests is None and quota.tokens is None):
            return
        self._settle(keys=self._keys(bucket)[:3], args=[permit_id, tokens, repr(quota.per)])

    def pause(self, bucket: str, seconds: float) -> None:
        wait = clamp_retry_after(seconds)
        if wait:
            self._pause(keys=self._keys(bucket)[3:], args=[repr(wait)])
