"""The spend ledger in Redis (the ``redis`` extra): shared by every process that
uses the same server and prefix.

Each reserve and settle is one Lua script, atomic across processes; reservations expire by the
Redis server's clock (``TIME``). Under ``{prefix}`` (a hash tag: a Redis Cluster keeps every
key of one ledger in one slot), each period has three hashes, ``spent:<period>:usd``,
``:tokens`` and ``:requests``, whose fields are the keys; each key's live reservations are a
sorted set by expiry (``held:<key>``) with their amounts (``held:<key>:usd``, ``:tokens``); a
settled reservation leaves a marker (``settled:<id>``) for :data:`~agentkit.ledger.store.
SETTLED_KEPT` seconds. Hour periods are kept 8 days, days 400, months 5 years; the totals
always.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._extras import needs_extra
from .._pg import safe_url
from ..errors import LedgerError
from .store import SETTLED_KEPT, Check, Crossing, Reservation, Spend, window_of

KEPT = {"hour": 8 * 86_400, "day": 400 * 86_400, "month": 5 * 366 * 86_400, "total": 0}
"""Seconds a period's counts are kept after their last change (0: always)."""

_NOW = """
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function drop(held, usd, tok, ids)
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    redis.call('ZREM', held, unpack(chunk))
    redis.call('HDEL', usd, unpack(chunk))
    redis.call('HDEL', tok, unpack(chunk))
  end
end
"""

# KEYS: the set of keys that hold something, per reservation key its held set and amounts (3
# each), per check its period's usd and tokens hashes (2 each). ARGV: id, usd, tokens, hold,
# the number of keys and of checks, then per check: the index of its key, the key, its usd cap
# and its token cap ('' for none), then the keys.
_RESERVE = (
    _NOW
    + """
local t = now()
local id, usd, tokens, hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local n, m = tonumber(ARGV[5]), tonumber(ARGV[6])
local held_usd, held_tok = {}, {}
for i = 1, n do
  local held, hu, ht = KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1]
  drop(held, hu, ht, redis.call('ZRANGEBYSCORE', held, '-inf', t))
  local su, st = 0, 0
  for _, v in ipairs(redis.call('HVALS', hu)) do su = su + tonumber(v) end
  for _, v in ipairs(redis.call('HVALS', ht)) do st = st + tonumber(v) end
  held_usd[i], held_tok[i] = su, st
end
for j = 1, m do
  local a = 6 + 4 * (j - 1)
  local i, key = tonumber(ARGV[a + 1]), ARGV[a + 2]
  local cap_usd, cap_tok = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local su = tonumber(redis.call('HGET', KEYS[3 * n + 2 * j], key) or '0') + held_usd[i]
  local st = tonumber(redis.call('HGET', KEYS[3 * n + 2 * j + 1], key) or '0') + held_tok[i]
  if (cap_usd and su + usd > cap_usd) or (cap_tok and st + tokens > cap_tok) then
    return {j, tostring(su), tostring(st)}
  end
end
local ttl = math.ceil(hold * 1000) + 60000
for i = 1, n do
  redis.call('ZADD', KEYS[3 * i - 1], t + hold, id)
  redis.call('HSET', KEYS[3 * i], id, ARGV[2])
  redis.call('HSET', KEYS[3 * i + 1], id, ARGV[3])
  for k = -1, 1 do redis.call('PEXPIRE', KEYS[3 * i + k], ttl) end
  redis.call('SADD', KEYS[1], ARGV[6 + 4 * m + i])
end
return false
"""
)

# KEYS: the settled marker, per reservation key its held set and amounts (3 each), per period
# its usd, tokens and requests hashes (3 each). ARGV: usd, tokens, id, kept (seconds the marker
# lives), the number of keys and of periods, the keys, and per period how long its counts are
# kept (0: always).
_SETTLE = (
    _NOW
    + """
local usd, tokens, id = ARGV[1], ARGV[2], ARGV[3]
local n, q = tonumber(ARGV[5]), tonumber(ARGV[6])
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', tonumber(ARGV[4])) then return 0 end
for i = 1, n do
  local key = ARGV[6 + i]
  drop(KEYS[3 * i - 1], KEYS[3 * i], KEYS[3 * i + 1], {id})
  for p = 1, q do
    local base = 1 + 3 * n + 3 * (p - 1)
    redis.call('HINCRBYFLOAT', KEYS[base + 1], key, usd)
    redis.call('HINCRBY', KEYS[base + 2], key, tokens)
    redis.call('HINCRBY', KEYS[base + 3], key, 1)
  end
end
for p = 1, q do
  local kept = tonumber(ARGV[6 + n + p])
  if kept > 0 then
    for k = 1, 3 do redis.call('EXPIRE', KEYS[1 + 3 * n + 3 * (p - 1) + k], kept) end
  end
end
return 1
"""
)

# KEYS: the period's usd, tokens and requests hashes, the set of keys that hold something. ARGV:
# the prefix of the held sets' names. What every key spent in the period and what its live
# reservations hold (a key found holding nothing leaves the set).
_SPEND = (
    _NOW
    + """
local t = now()
local rows = {}
local keys = redis.call('HKEYS', KEYS[1])
for _, key in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  if redis.call('HEXISTS', KEYS[1], key) == 0 then table.insert(keys, key) end
end
for _, key in ipairs(keys) do
  local held = ARGV[1] .. key
  local su, st = 0, 0
  local live = redis.call('ZRANGEBYSCORE', held, '(' .. t, '+inf')
  if #live == 0 then redis.call('SREM', KEYS[4], key) end
  if #live > 0 then
    for _, v in ipairs(redis.call('HMGET', held .. ':usd', unpack(live))) do
      su = su + (tonumber(v) or 0)
    end
    for _, v in ipairs(redis.call('HMGET', held .. ':tokens', unpack(live))) do
      st = st + (tonumber(v) or 0)
    end
  end
  local usd = redis.call('HGET', KEYS[1], key)
  if usd or su > 0 or st > 0 then
    table.insert(rows, {key, usd or '0', redis.call('HGET', KEYS[2], key) or '0',
      redis.call('HGET', KEYS[3], key) or '0', tostring(su), tostring(st)})
  end
end
return rows
"""
)


class RedisLedgerStore:
    """The ledger's counts on the Redis server at ``url`` (or a ``redis.Redis`` client),
    under ``prefix``."""

    def __init__(self, url: Any, *, prefix: str = "agentkit:ledger", timeout: float = 10.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise ImportError(needs_extra("RedisLedgerStore (redis)", "redis")) from exc
        self._redis_errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        if isinstance(url, str):
            self.url = url
            self._client: Any = redis.Redis.from_url(
                url, socket_timeout=timeout, socket_connect_timeout=timeout
            )
        else:
            self.url, self._client = "redis (a client)", url
        self._base = f"{{{prefix}}}:"
        self._holding = f"{self._base}holding"
        self._reserve = self._client.register_script(_RESERVE)
        self._settle = self._client.register_script(_SETTLE)
        self._spend = self._client.register_script(_SPEND)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._redis_errors as exc:
            raise LedgerError(f"Redis ledger store {safe_url(self.url)}: {exc}") from exc

    def _held(self, key: str) -> list[str]:
        held = f"{self._base}held:{key}"
        return [held, f"{held}:usd", f"{held}:tokens"]

    def _counts(self, period: str) -> list[str]:
        spent = f"{self._base}spent:{period}"
        return [f"{spent}:usd", f"{spent}:tokens", f"{spent}:requests"]

    def reserve(
        self, reservation: Reservation, checks: Sequence[Check], hold: float
    ) -> Crossing | None:
        keys = [self._holding, *(name for key in reservation.keys for name in self._held(key))]
        args: list[Any] = [
            reservation.id, repr(reservation.usd), reservation.tokens, repr(float(hold)),
            len(reservation.keys), len(checks),
        ]  # fmt: skip
        for check in checks:
            keys.extend(self._counts(check.period)[:2])
            args.extend([
                reservation.keys.index(check.key) + 1, check.key,
                "" if check.usd is None else repr(check.usd),
                "" if check.tokens is None else check.tokens,
            ])  # fmt: skip
        args.extend(reservation.keys)
        with self._errors():
            reply = self._reserve(keys=keys, args=args)
        if not reply:
            return None
        index, usd, tokens = reply
        return Crossing(checks[int(index) - 1], float(usd), int(float(tokens)))

    def settle(self, reservation: Reservation, usd: float, tokens: int) -> bool:
        keys = [f"{self._base}settled:{reservation.id}"]
        for key in reservation.keys:
            keys.extend(self._held(key))
        for period in reservation.periods:
            keys.extend(self._counts(period))
        args: list[Any] = [
            repr(float(usd)), int(tokens), reservation.id, int(SETTLED_KEPT),
            len(reservation.keys), len(reservation.periods), *reservation.keys,
            *(KEPT[window_of(period)] for period in reservation.periods),
        ]  # fmt: skip
        with self._errors():
            return bool(self._settle(keys=keys, args=args))

    def spend(self, period: str, prefix: str | None = None) -> list[Spend]:
        keys = [*self._counts(period), self._holding]
        with self._errors():
            rows = self._spend(keys=keys, args=[f"{self._base}held:"])
        window = window_of(period)
        found = []
        for raw in rows:
            key, usd, tokens, requests, held_usd, held_tokens = (
                v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in raw
            )
            if prefix is None or key.startswith(prefix):
                held = float(held_usd), int(float(held_tokens))
                found.append(
                    Spend(key, window, period, float(usd), int(tokens), int(requests), *held)
                )
        return sorted(found, key=lambda row: row.key)

    def close(self) -> None:
        self._client.close()
