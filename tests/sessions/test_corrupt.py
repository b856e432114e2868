"""Stored records changed or deleted behind agentkit's back: a clear session error naming the
store, the session and the position, on every store; the other sessions stay usable."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Callable

import pytest

from agentkit import Agent
from agentkit.cli.app import main
from agentkit.sessions import Session, SessionCorruptError, SessionStore
from agentkit.sessions.postgres import PostgresStore
from agentkit.sessions.redis import RedisStore
from agentkit.sessions.sqlite import SqliteStore
from agentkit.testing import ScriptedModel
from agentkit.types import AssistantMessage, TextContent, UserMessage
from tests.servers import RedisServer


def edit_record(store: SessionStore, name: str, position: int, record: str) -> None:
    """Overwrite one stored record, as a person with a database shell might."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            db.execute("UPDATE agentkit_messages SET record = ? WHERE session = ? AND seq = ?",
                       (record, name, position))  # fmt: skip
    elif isinstance(store, RedisStore):
        store._client.lset(store._key(name), position, record)
    else:
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute("UPDATE agentkit_messages SET record = %s WHERE session = %s AND seq = %s",
                         (record, name, position))  # fmt: skip


def delete_record(store: SessionStore, name: str, position: int) -> None:
    """Delete one stored record outside agentkit."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as db:
            db.execute("DELETE FROM agentkit_messages WHERE session = ? AND seq = ?",
                       (name, position))  # fmt: skip
    elif isinstance(store, RedisStore):
        key = store._key(name)
        store._client.lset(key, position, "__gone__")
        store._client.lrem(key, 1, "__gone__")
    else:
        assert isinstance(store, PostgresStore)
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as conn:
            conn.execute("DELETE FROM agentkit_messages WHERE session = %s AND seq = %s",
                         (name, position))  # fmt: skip


def three_messages(store: SessionStore, name: str) -> None:
    Session(name, store).append(
        UserMessage(content="one"),
        AssistantMessage(content=[TextContent(text="two")]),
        UserMessage(content="three"),
    )


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ("{not json", "is not a valid message (Expecting property name"),
        ('{"content": "no role"}', "is not a valid message (a message must be a JSON object"),
        ('{"role": "assistant", "content": 5}', "is not a valid message ("),
    ],
)
def test_a_corrupt_record_names_the_store_the_session_and_the_position(
    store: SessionStore, name: str, record: str, reason: str
) -> None:
    three_messages(store, name)
    three_messages(store, name + "-intact")
    edit_record(store, name, 1, record)
    with pytest.raises(SessionCorruptError) as raised:
        Session(name, store).load()
    text = str(raised.value)
    assert f"session {name!r} in {store.display_url}" in text
    assert "at position 1 " in text and reason in text
    assert raised.value.position == 1
    model = ScriptedModel(["unused"])
    with pytest.raises(SessionCorruptError, match="at position 1 "):
        Agent(model=model.model, stream_fn=model, session=Session(name, store))
    assert len(Session(name + "-intact", store).load()) == 3  # the others are fine


@pytest.mark.parametrize("store_url", ["sqlite", "redis"], indirect=True)  # PostgreSQL refuses it
def test_a_record_that_is_not_utf8_is_a_corrupt_record(store: SessionStore, name: str) -> None:
    three_messages(store, name)
    if isinstance(store, RedisStore):
        store._client.lset(store._key(name), 1, b"\xff\xfe{not utf-8")
    else:
        with sqlite3.connect(store.path) as db:  # a blob where text belongs
            db.execute("UPDATE agentkit_messages SET record = ? WHERE session = ? AND seq = 1",
                       (b"\xff\xfe{not utf-8", name))  # fmt: skip
    with pytest.raises(SessionCorruptError, match="at position 1 ") as raised:
        Session(name, store).load()
    assert raised.value.position == 1


def test_a_deleted_record_is_detected(store: SessionStore, name: str) -> None:
    three_messages(store, name)
    delete_record(store, name, 1)
    # A SQL store knows which one; a Redis list only that one is gone (its version is kept).
    where = "at position 2 .*is missing \\(the store holds 2 of its 3" if isinstance(
        store, RedisStore) else "at position 1 .*is missing"  # fmt: skip
    with pytest.raises(SessionCorruptError, match=where):
        Session(name, store).load()


def test_a_deleted_last_record_is_detected(store: SessionStore, name: str) -> None:
    three_messages(store, name)
    delete_record(store, name, 2)
    with pytest.raises(SessionCorruptError, match="at position 2 .*is missing"):
        Session(name, store).load()


def test_sessions_show_reports_a_corrupt_session(
    store_url: str, open_stores: Callable[[], SessionStore], name: str
) -> None:
    store = open_stores()
    three_messages(store, name)
    edit_record(store, name, 2, "{not json")
    out, err = io.StringIO(), io.StringIO()
    status = main(["sessions", "--store", store_url, "show", name], stdout=out, stderr=err)
    assert status != 0
    assert f"session {name!r} in " in err.getvalue() and "at position 2 " in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_display_url_never_shows_a_password() -> None:
    class Fake(SessionStore):
        def load(self, name: str) -> tuple[list[str], int]:
            return [], 0

        def append(self, name: str, records: object, expected_version: int) -> int:
            return 0

        def list(self) -> list[object]:  # type: ignore[override]
            return []

        def delete(self, name: str) -> bool:
            return False

    fake = Fake()
    fake.url = "postgresql://app:s3cret@db.internal:5432/chat?password=s3cret"
    assert fake.display_url == "postgresql://app@db.internal:5432/chat"
    fake.url = "redis://:s3cret@127.0.0.1:6379/0"
    assert fake.display_url == "redis://127.0.0.1:6379/0"


def test_a_redis_session_stored_before_versions_were_kept_still_loads(
    redis_server: RedisServer, name: str
) -> None:
    store = RedisStore(redis_server.url)
    try:
        three_messages(store, name)
        store._client.hdel(store._versions, name)  # as an older agentkit left it
        assert len(Session(name, store).load()) == 3
        session = Session(name, store)
        session.load()
        session.append(UserMessage(content="four"))  # the version is kept from now on
        delete_record(store, name, 0)
        with pytest.raises(SessionCorruptError, match="is missing"):
            Session(name, store).load()
    finally:
        store.close()
