"""Run logs in the session store's Redis: keys of their own beside the sessions'.

A run is a hash ``<prefix>runlog:<id>`` (its session, whether it is live, its heartbeat, its
last sequence number, its end), a stream ``...:events`` whose entry ids are the events'
sequence numbers (``<seq>-0``), and a stream ``...:commands``. A wait is a blocking ``XREAD``,
which any client's ``XADD`` ends at once, in any process. Writes that must not interleave (an
append, the end) are Lua scripts, which Redis runs atomically, on the server's clock. An ended
run's keys expire after :attr:`~RunLogStore.keep` seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .runlog_base import Command, Entry, RunInfo, RunLogStore, check_run_id, parse_end

_NOW = "local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)\n"

_START = _NOW + """
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'live', '1', 'heartbeat_ms', now)
  redis.call('HDEL', KEYS[1], 'ended_ms', 'end')
else
  redis.call('HSET', KEYS[1], 'session', ARGV[2], 'live', '1', 'started_ms', now,
             'heartbeat_ms', now, 'last_seq', 0, 'applied', '0')
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  redis.call('ZADD', KEYS[3], now, ARGV[1])
end
for _, i in ipairs({1, 5, 6, 7}) do redis.call('PERSIST', KEYS[i]) end
redis.call('SADD', KEYS[4], ARGV[1])
return now
"""

_APPEND = _NOW + """
if redis.call('HGET', KEYS[1], 'live') ~= '1' then return 0 end
for i = 1, #ARGV, 2 do redis.call('XADD', KEYS[2], ARGV[i] .. '-0', 'r', ARGV[i + 1]) end
if #ARGV > 0 then redis.call('HSET', KEYS[1], 'last_seq', ARGV[#ARGV - 1]) end
redis.call('HSET', KEYS[1], 'heartbeat_ms', now)
return 1
"""

_END = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'live', 'heartbeat_ms', 'last_seq')
if h[1] ~= '1' then return -1 end
if ARGV[2] ~= '' and now - tonumber(h[2]) < tonumber(ARGV[2]) then return -1 end
local seq = tonumber(h[3]) + 1
redis.call('XADD', KEYS[2], seq .. '-0', 'r', ARGV[1])
redis.call('HSET', KEYS[1], 'live', '0', 'last_seq', seq, 'ended_ms', now, 'end', ARGV[1])
redis.call('SREM', KEYS[3], ARGV[4])
for i = 1, #KEYS do if i ~= 3 then redis.call('PEXPIRE', KEYS[i], ARGV[3]) end end
return seq
"""

BLOCK_SLICE = 5.0
"""Longest single blocking ``XREAD`` (seconds), well inside the client's socket timeout."""


class RedisRunLog(RunLogStore):
    """The run logs on the Redis server of a :class:`~agentkit.sessions.redis.RedisStore`,
    through its client (a pool: each wait holds a connection of it while it blocks)."""

    def __init__(self, client: Any, prefix: str, url: str, errors: tuple[type[BaseException], ...]
                 ) -> None:  # fmt: skip
        self._client = client
        self._prefix = f"{prefix}runlog:"
        self.url = url
        self._errors = errors
        self._start = client.register_script(_START)
        self._append = client.register_script(_APPEND)
        self._end = client.register_script(_END)
        self._all = f"{self._prefix}all"
        self._live = f"{self._prefix}live"
        # Guards _woken: the last wake-up entry each run's command wait has seen.
        self._lock = threading.Lock()
        self._woken: dict[str, str] = {}

    def _keys(self, run_id: str) -> dict[str, str]:
        base = f"{self._prefix}{run_id}"
        return {"run": base, "events": f"{base}:events", "commands": f"{base}:commands",
                "wake": f"{base}:wake"}  # fmt: skip

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from ..errors import SessionStoreError

        try:
            return fn(*args, **kwargs)
        except self._errors as exc:
            raise SessionStoreError(f"Redis run log {self.url}: {exc}") from exc

    def start(self, run_id: str, session: str) -> RunInfo:
        check_run_id(run_id)
        keys = self._keys(run_id)
        by_session = f"{self._prefix}session:{session}"
        self._call(
            self._start,
            keys=[keys["run"], self._all, by_session, self._live, keys["events"],
                  keys["commands"], keys["wake"]],
            args=[run_id, session],
        )  # fmt: skip
        if self.prune_due():
            self._prune(by_session)
        info = self.info(run_id)
        assert info is not None
        return info

    def _prune(self, by_session: str) -> None:
        """Drop from the indexes the runs whose keys expired (a few at each start)."""
        for index in (self._all, by_session):
            oldest = self._call(self._client.zrange, index, 0, 99)
            if not oldest:
                continue
            pipe = self._client.pipeline(transaction=False)
            for member in oldest:
                pipe.exists(f"{self._prefix}{member.decode()}")
            gone = [m for m, there in zip(oldest, self._call(pipe.execute), strict=True)
                    if not there]  # fmt: skip
            if gone:
                self._call(self._client.zrem, index, *gone)

    def append(self, run_id: str, entries: Sequence[Entry]) -> bool:
        keys = self._keys(run_id)
        args: list[Any] = []
        for seq, record in entries:
            args += [seq, record]
        return bool(self._call(self._append, keys=[keys["run"], keys["events"]], args=args))

    def beat(self, run_id: str) -> bool:
        return self.append(run_id, [])

    def end(self, run_id: str, record: str, stale_ms: int | None = None) -> int | None:
        keys = self._keys(run_id)
        seq = self._call(
            self._end,
            keys=[keys["run"], keys["events"], self._live, keys["commands"], keys["wake"]],
            args=[record, "" if stale_ms is None else stale_ms, int(self.keep * 1000), run_id],
        )
        return None if int(seq) < 0 else int(seq)

    def read(self, run_id: str, after: int, limit: int, wait: float = 0.0) -> list[Entry]:
        key = self._keys(run_id)["events"]
        block = _block_ms(wait)
        batches = self._call(
            self._client.xread, {key: f"{after}-0"}, count=limit, block=block
        )
        return [
            (int(entry_id.split(b"-", 1)[0]), fields[b"r"].decode("utf-8"))
            for _key, entries in batches or []
            for entry_id, fields in entries
        ]

    def info(self, run_id: str) -> RunInfo | None:
        pipe = self._client.pipeline(transaction=False)
        pipe.hgetall(self._keys(run_id)["run"])
        pipe.time()
        data, (seconds, micros) = self._call(pipe.execute)
        return _info(run_id, data, seconds * 1000 + micros // 1000)

    def runs(self, session: str | None = None, *, live: bool = False, limit: int = 100
             ) -> list[RunInfo]:  # fmt: skip
        if live and session is None:
            ids = [m.decode() for m in self._call(self._client.smembers, self._live)]
        else:
            index = self._all if session is None else f"{self._prefix}session:{session}"
            count = limit if not live else max(limit, 1000)
            ids = [m.decode() for m in self._call(self._client.zrevrange, index, 0, count - 1)]
        pipe = self._client.pipeline(transaction=False)
        for run_id in ids:
            pipe.hgetall(self._keys(run_id)["run"])
        pipe.time()
        *rows, (seconds, micros) = self._call(pipe.execute)
        now = seconds * 1000 + micros // 1000
        found = [_info(run_id, data, now) for run_id, data in zip(ids, rows, strict=True)]
        runs = [r for r in found if r is not None and (r.live or not live)]
        runs.sort(key=lambda r: (-r.started_ms, r.id))
        return runs[:limit]

    def send(self, run_id: str, command: str) -> str:
        entry_id = self._call(self._client.xadd, self._keys(run_id)["commands"], {"c": command})
        return str(entry_id.decode())

    def commands(self, run_id: str, after: str, wait: float = 0.0) -> list[Command]:
        keys = self._keys(run_id)
        with self._lock:
            woken = self._woken.get(run_id, "0-0")
        streams = {keys["commands"]: "0-0" if after == "0" else after, keys["wake"]: woken}
        batches = self._call(self._client.xread, streams, block=_block_ms(wait))
        found: list[Command] = []
        for key, entries in batches or []:
            if key.decode() == keys["wake"]:
                with self._lock:
                    self._woken[run_id] = entries[-1][0].decode()
                continue
            found += [(i.decode(), fields[b"c"].decode("utf-8")) for i, fields in entries]
        return found

    def applied(self, run_id: str, command_id: str) -> None:
        self._call(self._client.hset, self._keys(run_id)["run"], "applied", command_id)

    def wake(self, run_id: str) -> None:
        key = self._keys(run_id)["wake"]
        pipe = self._client.pipeline(transaction=False)
        pipe.xadd(key, {"w": "1"}, maxlen=1)
        pipe.pexpire(key, int(self.keep * 1000))
        self._call(pipe.execute)

    def replace(self, run_id: str, first: int, last: int, entries: Sequence[Entry]) -> None:
        key = self._keys(run_id)["events"]
        old = self._call(self._client.xrange, key)
        kept = [(int(i.split(b"-", 1)[0]), f[b"r"].decode("utf-8")) for i, f in old]
        merged = sorted([e for e in kept if not first <= e[0] <= last] + list(entries))
        temporary = f"{key}:rewrite"
        ttl = self._call(self._client.pttl, key)
        pipe = self._client.pipeline(transaction=True)  # readers see the old stream or the new
        pipe.delete(temporary)
        for seq, record in merged:
            pipe.xadd(temporary, {"r": record}, id=f"{seq}-0")
        pipe.rename(temporary, key)
        if ttl and ttl > 0:
            pipe.pexpire(key, ttl)
        self._call(pipe.execute)


def _block_ms(wait: float) -> int | None:
    """``XREAD``'s ``block`` for a wait of ``wait`` seconds (``None``: do not block)."""
    if wait <= 0:
        return None
    return max(1, int(min(wait, BLOCK_SLICE) * 1000))


def _info(run_id: str, data: dict[bytes, bytes], now: int) -> RunInfo | None:
    if not data:
        return None
    text = {k.decode(): v.decode("utf-8") for k, v in data.items()}
    ended = text.get("ended_ms")
    return RunInfo(
        id=run_id, session=text["session"], live=text.get("live") == "1",
        started_ms=int(text["started_ms"]), last_seq=int(text.get("last_seq", 0)),
        heartbeat_age_ms=max(0, now - int(text.get("heartbeat_ms", now))),
        ended_ms=int(ended) if ended else None, end=parse_end(text.get("end")),
        applied=text.get("applied", "0"),
    )  # fmt: skip
