"""Sessions in Redis (``pip install 'agentkit[redis]'``): what Celery deployments already run.

A session is a Redis list of records under ``<prefix>session:<name>``; its version is the list's
length, also kept in the hash ``<prefix>versions`` so that a record removed outside agentkit is
detected when the session loads. An append is one Lua script (check the length, push the
records, touch the index and the version), which Redis runs atomically, so writers never
interleave. Durability is the server's: run Redis with
``appendonly yes`` and ``appendfsync always`` for an acknowledged append to survive a crash.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .base import (
    SessionConflictError,
    SessionCorruptError,
    SessionInfo,
    SessionStore,
    SessionStoreError,
    check_complete,
    check_name,
)

_APPEND = """
local n = redis.call('LLEN', KEYS[1])
if n ~= tonumber(ARGV[1]) then return {0, n} end
for i = 4, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[2], n + #ARGV - 3)
return {1, n + #ARGV - 3}
"""


class RedisStore(SessionStore):
    """Sessions on the Redis server at ``url`` (``redis://host:port/db``)."""

    def __init__(self, url: str, *, prefix: str = "agentkit:", timeout: float = 10.0) -> None:
        try:
            import redis
        except ImportError as exc:
            raise ImportError("RedisStore needs redis: pip install 'agentkit[redis]'") from exc
        self._redis_errors: tuple[type[BaseException], ...] = (redis.RedisError,)
        self.url = url
        self.prefix = prefix
        self._client: Any = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._append = self._client.register_script(_APPEND)
        self._index = f"{prefix}sessions"
        self._versions = f"{prefix}versions"

    def _key(self, name: str) -> str:
        return f"{self.prefix}session:{name}"

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
        with self._errors():
            ok, version = self._append(
                keys=[self._key(name), self._index, self._versions],
                args=[expected_version, name, now, *records],
            )
        if not ok:
            raise SessionConflictError(name, expected_version, int(version))
        return int(version)

    def list(self) -> list[SessionInfo]:
        with self._errors():
            index = self._client.hgetall(self._index)
            names = sorted(k.decode("utf-8") for k in index)
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                pipe.llen(self._key(name))
            counts = pipe.execute()
        return [
            SessionInfo(name, int(count), int(index[name.encode("utf-8")]))
            for name, count in zip(names, counts, strict=True)
            if count
        ]

    def delete(self, name: str) -> bool:
        with self._errors():
            pipe = self._client.pipeline(transaction=True)
            pipe.delete(self._key(name))
            pipe.hdel(self._index, name)
            pipe.hdel(self._versions, name)
            deleted, _, _ = pipe.execute()
        return bool(deleted)

    def close(self) -> None:
        self._client.close()


def _text(store: RedisStore, name: str, position: int, record: bytes) -> str:
    """A stored record as text; one that is not UTF-8 (written behind agentkit's back) is a
    corrupt record, named like any other."""
    try:
        return record.decode("utf-8")
    except UnicodeDecodeError:
        raise SessionCorruptError(store.display_url, name, position, "is not UTF-8 text") from None
