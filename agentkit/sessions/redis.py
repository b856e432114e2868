"""Sessions in Redis (the ``redis`` extra): what Celery deployments already run.

A session is a Redis list of records under ``<prefix>session:<name>``; its version is the list's
length, also kept in the hash ``<prefix>versions`` so that a record removed outside agentkit is
detected when the session loads. An append is one Lua script (check the length, push the
records, touch the index, the version and the indexes of :mod:`agentkit.sessions.indexes`),
which Redis runs atomically, so writers never interleave. The approval index is the set
``<prefix>waiting`` of the sessions with calls waiting, and for each the set
``<prefix>waiting:<name>`` of those calls; the hash ``<prefix>markers`` counts each session's
marker records. Durability is the server's: run Redis with
``appendonly yes`` and ``appendfsync always`` for an acknowledged append to survive a crash.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._extras import needs_extra
from .base import (
    SessionConflictError,
    SessionCorruptError,
    SessionInfo,
    SessionStore,
    SessionStoreError,
    check_complete,
    check_name,
)
from .indexes import index_change
from .runlog_base import RunLogStore

_APPEND = """
local n = redis.call('LLEN', KEYS[1])
if n ~= tonumber(ARGV[1]) then return {0, n} end
local removed, added = tonumber(ARGV[5]), tonumber(ARGV[6])
local first = 8 + removed + added
for i = first, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
local version = n + #ARGV - first + 1
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], version)
if tonumber(ARGV[7]) > 0 then redis.call('HINCRBY', KEYS[6], ARGV[2], ARGV[7]) end
if ARGV[4] == '1' then redis.call('DEL', KEYS[5]) end
for i = 8, 7 + removed do redis.call('SREM', KEYS[5], ARGV[i]) end
for i = 8 + removed, first - 1 do redis.call('SADD', KEYS[5], ARGV[i]) end
if ARGV[4] == '1' or first > 8 then
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('SADD', KEYS[4], ARGV[2])
  else
    redis.call('SREM', KEYS[4], ARGV[2])
  end
end
return {1, version}
"""
"""Appends ARGV[8:] after the ids (ARGV[1]: the expected version, 2: the name, 3: the time,
4: '1' to clear the session's waiting calls, 5 and 6: how many ids to remove, then to add,
7: how many of the records are markers)."""


class RedisStore(SessionStore):
    """Sessions on the Redis server at ``url`` (``redis://host:port/db``)."""

    def __init__(self, url: str, *, prefix: str = "agentkit:", timeout: float = 10.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise ImportError(needs_extra("RedisStore (redis)", "redis")) from exc
        self._redis_errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self.url = url
        self.prefix = prefix
        self._client: Any = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._append = self._client.register_script(_APPEND)
        self._index = f"{prefix}sessions"
        self._versions = f"{prefix}versions"
        self._waiting = f"{prefix}waiting"
        self._markers = f"{prefix}markers"

    def _key(self, name: str) -> str:
        return f"{self.prefix}session:{name}"

    def _waiting_key(self, name: str) -> str:
        return f"{self._waiting}:{name}"

    def _make_indexes(self) -> None:
        """Fill the indexes from the sessions already stored, once (a server written before the
        store kept them; appends keep them from then on): each session read and written in one
        transaction (``WATCH``), so that an append meanwhile is not lost; then mark them made."""
        import redis

        for raw in self._client.hkeys(self._index):
            name = raw.decode("utf-8")
            while True:
                with self._client.pipeline(transaction=True) as pipe:
                    try:
                        pipe.watch(self._key(name))
                        records = pipe.lrange(self._key(name), 0, -1)
                        change = index_change(r.decode("utf-8", "replace") for r in records)
                        pipe.multi()
                        pipe.delete(self._waiting_key(name))
                        if change.added:
                            pipe.sadd(self._waiting_key(name), *sorted(change.added))
                            pipe.sadd(self._waiting, name)
                        else:
                            pipe.srem(self._waiting, name)
                        pipe.hset(self._markers, name, change.markers)
                        pipe.execute()
                        break
                    except redis.WatchError:
                        continue  # an append came in between: read the session again
        self._client.set(self._made, "1")

    @property
    def _made(self) -> str:
        """The key that says the indexes were made (the markers hash, too, since then)."""
        return f"{self.prefix}indexes-made"

    def _infos(self, names: list[str], updated: list[Any]) -> list[SessionInfo]:
        """The sessions ``names`` (with their ``updated`` times, as stored) as the store lists
        them: those with a record, each counting its messages (its records but markers)."""
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.llen(self._key(name))
        counts = pipe.execute() if names else []
        markers = self._client.hmget(self._markers, names) if names else []
        return [
            SessionInfo(name, int(count) - int(marked or 0), int(when))
            for name, count, marked, when in zip(names, counts, markers, updated, strict=True)
            if count and when is not None
        ]

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._redis_errors as exc:
            raise SessionStoreError(f"Redis session store {self._safe_url()}: {exc}") from exc

    def _safe_url(self) -> str:
        return self.display_url

    def load(self, name: str) -> tuple[list[str], int]:
        with self._errors():
            pipe = self._client.pipeline(transaction=True)  # one snapshot of both
            pipe.lrange(self._key(name), 0, -1)
            pipe.hget(self._versions, name)
            raw, version = pipe.execute()
        records = [_text(self, name, position, r) for position, r in enumerate(raw)]
        if version is not None:  # sessions written before the version was kept have none
            check_complete(self, name, range(len(records)), int(version))
        return records, len(records)

    def append(self, name: str, records: Sequence[str], expected_version: int) -> int:
        check_name(name)
        now = str(int(time.time() * 1000))
        change = index_change(records)
        removed, added = sorted(change.removed), sorted(change.added)
        with self._errors():
            ok, version = self._append(
                keys=[
                    self._key(name), self._index, self._versions, self._waiting,
                    self._waiting_key(name), self._markers,
                ],
                args=[
                    expected_version, name, now, "1" if change.clear else "0", len(removed),
                    len(added), change.markers, *removed, *added, *records,
                ],
            )  # fmt: skip
        if not ok:
            raise SessionConflictError(name, expected_version, int(version))
        return int(version)

    def awaiting_approval(self) -> list[SessionInfo]:
        with self._errors():
            if not self._client.exists(self._made):
                self._make_indexes()
            names = sorted(n.decode("utf-8") for n in self._client.smembers(self._waiting))
            updated = self._client.hmget(self._index, names) if names else []
            return self._infos(names, updated)

    def list(self) -> list[SessionInfo]:
        with self._errors():
            if not self._client.exists(self._made):
                self._make_indexes()
            index = self._client.hgetall(self._index)
            names = sorted(k.decode("utf-8") for k in index)
            return self._infos(names, [index[name.encode("utf-8")] for name in names])

    def delete(self, name: str) -> bool:
        with self._errors():
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._key(name))
            pipe.hdel(self._index, name)
            pipe.hdel(self._versions, name)
            pipe.delete(self._waiting_key(name))
            pipe.srem(self._waiting, name)
            pipe.hdel(self._markers, name)
            deleted, *_ = pipe.execute()
        return bool(deleted)

    def _open_run_log(self) -> RunLogStore:
        from .runlog_redis import RedisRunLog

        return RedisRunLog(self._client, self.prefix, self.display_url, self._redis_errors)

    def close(self) -> None:
        self._close_run_log()
        self._client.close()


def _text(store: RedisStore, name: str, position: int, record: bytes) -> str:
    """A stored record as text; one that is not UTF-8 (written behind agentkit's back) is a
    corrupt record, named like any other."""
    try:
        return record.decode("utf-8")
    except UnicodeDecodeError:
        raise SessionCorruptError(store.display_url, name, position, "is not UTF-8 text") from None
