"""Runs on Celery workers in the page: a session whose run holds its lease links to the run, and
the run's page relays what the worker publishes (a real redis-server, the real RunChannel)."""

from __future__ import annotations

import uuid
from pathlib import Path

import requests

from agentkit.integrations.celery import RunChannel, SessionLease
from agentkit.sessions import Session, SqliteStore
from agentkit.types import UserMessage
from agentkit.ui import UiServer
from tests.servers import RedisServer

from ..support import WAIT


def test_a_celery_run_is_found_followed_and_aborted(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    import redis

    store = SqliteStore(tmp_path / "s.db")
    Session("support-42", store).append(UserMessage(content="where is my parcel?"))
    run_id = str(uuid.uuid4())
    client = redis.Redis.from_url(redis_server.url)
    lease = SessionLease(client, "support-42", run_id)
    channel = RunChannel(redis_server.url, run_id)
    with UiServer(store, redis_url=redis_server.url) as page:
        browser = requests.Session()
        browser.get(page.url, timeout=WAIT)
        base = page.url.split("?")[0].rstrip("/")
        assert "/runs/" not in browser.get(base + "/s/support-42", timeout=WAIT).text
        lease.acquire()
        try:
            html = browser.get(base + "/s/support-42", timeout=WAIT).text
            assert f'href="/runs/{run_id}"' in html
            channel.publish({"type": "agent_start"})
            channel.publish({"type": "message_update", "update": {"type": "text_delta",
                                                                  "delta": "Checking."}})  # fmt: skip
            channel.publish({"type": "run_end"})
            events = browser.get(f"{base}/runs/{run_id}/events", timeout=WAIT).text
            assert events.index("event: agent_start") < events.index("Checking.")
            assert "event: run_end" in events
            aborted = browser.post(
                f"{base}/runs/{run_id}/abort",
                data={"csrf": page.guard.csrf_token},
                headers={"Origin": base, "Accept": "application/json"},
                timeout=WAIT,
            )
            assert aborted.status_code == 200
            commands = [f[b"command"] for _id, f in client.xrange(channel.commands_key)]
            assert commands == [b'{"type":"abort"}']
        finally:
            lease.release()
    channel.close()
    client.close()
    store.close()
