"""The page over real HTTP: who may use it (secret, host, CSRF, origin) and what it serves."""

from __future__ import annotations

import json

import requests

from agentkit.sessions import Session
from agentkit.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage, UserMessage
from agentkit.ui import UiServer
from agentkit.ui.security import COOKIE

from ..support import WAIT
from .conftest import HOSTILE, Gate


def _signed_in(server: UiServer) -> requests.Session:
    client = requests.Session()
    response = client.get(server.url, timeout=WAIT, allow_redirects=False)
    assert response.status_code == 302 and response.headers["Location"] == "/"
    assert "HttpOnly" in response.headers["Set-Cookie"]
    assert "SameSite=Strict" in response.headers["Set-Cookie"]
    return client


def _base(server: UiServer) -> str:
    return server.url.split("?")[0].rstrip("/")


def test_every_page_needs_the_launch_secret(page_server: UiServer) -> None:
    base = _base(page_server)
    for path in ("/", "/s/anything", "/static/ui.js", "/runs"):
        assert requests.get(base + path, timeout=WAIT).status_code == 403, path
    wrong = requests.get(base + "/?token=guess", timeout=WAIT, allow_redirects=False)
    assert wrong.status_code == 403 and COOKIE not in wrong.headers.get("Set-Cookie", "")
    forged = requests.get(base + "/", cookies={COOKIE: "guess"}, timeout=WAIT)
    assert forged.status_code == 403
    client = _signed_in(page_server)
    assert client.get(base + "/", timeout=WAIT).status_code == 200
    assert page_server.guard.secret not in client.get(base + "/", timeout=WAIT).text


def test_it_answers_only_as_its_own_loopback_host(page_server: UiServer) -> None:
    """A rebound name (evil.example -> 127.0.0.1) gets nothing, even with the secret."""
    client = _signed_in(page_server)
    base = _base(page_server)
    response = client.get(base + "/", headers={"Host": "evil.example"}, timeout=WAIT)
    assert response.status_code == 403
    assert page_server.guard.url().startswith("http://127.0.0.1:")


def test_writes_need_the_csrf_token_and_the_same_origin(page_server: UiServer) -> None:
    client = _signed_in(page_server)
    base = _base(page_server)
    form = {"session": "csrf-test", "text": "hello"}
    assert client.post(base + "/new", data=form, timeout=WAIT).status_code == 403
    token = page_server.guard.csrf_token
    other = {"Origin": "http://evil.example"}
    response = client.post(base + "/new", data={**form, "csrf": token}, headers=other, timeout=WAIT)
    assert response.status_code == 403
    cross = {"Sec-Fetch-Site": "cross-site"}
    response = client.post(base + "/new", data={**form, "csrf": token}, headers=cross, timeout=WAIT)
    assert response.status_code == 403
    assert page_server.store.load("csrf-test") == ([], 0)  # nothing was started
    own = {"Origin": base, "Accept": "application/json"}
    response = client.post(base + "/new", data={**form, "csrf": token}, headers=own, timeout=WAIT)
    assert response.status_code == 200, response.text


def test_security_headers(page_server: UiServer) -> None:
    response = _signed_in(page_server).get(_base(page_server) + "/", timeout=WAIT)
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"


def test_a_transcript_as_a_person_reads_it(page_server: UiServer) -> None:
    session = Session("read-me", page_server.store)
    call = ToolCall(id="c1", name="look_up", arguments={"topic": HOSTILE})
    session.append(
        UserMessage(content="what is it?"),
        AssistantMessage(content=[TextContent(text="checking"), call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="look_up", is_error=True,
                          content=[TextContent(text="boom")], duration_ms=12.0),
        {"role": "compaction", "summary": "earlier: the user asked twice", "first_kept": 1},
        AssistantMessage(content=[TextContent(text=HOSTILE)]),
    )  # fmt: skip
    client = _signed_in(page_server)
    html = client.get(_base(page_server) + "/s/read-me", timeout=WAIT).text
    assert "<script>window.pwned" not in html and "&lt;script&gt;window.pwned" in html
    assert "boom" in html and "12 ms" in html and 'class="call failed"' in html
    assert "earlier: the user asked twice" in html  # a record the page does not know is shown
    listing = client.get(_base(page_server) + "/?q=READ", timeout=WAIT).text
    assert "read-me" in listing
    assert "read-me" not in client.get(_base(page_server) + "/?q=nothing", timeout=WAIT).text


def test_a_corrupt_session_is_reported_and_the_rest_still_listed(page_server: UiServer) -> None:
    Session("fine", page_server.store).append(UserMessage(content="hi"))
    page_server.store.append("broken", ['{"role": "user", "content": 5}'], 0)
    client = _signed_in(page_server)
    listing = client.get(_base(page_server) + "/", timeout=WAIT)
    assert listing.status_code == 200 and "fine" in listing.text and "unreadable" in listing.text
    page = client.get(_base(page_server) + "/s/broken", timeout=WAIT)
    assert page.status_code == 200 and "problem" in page.text


def test_live_events_steer_and_abort_over_http(page_server: UiServer, gate: Gate) -> None:
    client = _signed_in(page_server)
    base = _base(page_server)
    headers = {"Origin": base, "Accept": "application/json"}
    token = page_server.guard.csrf_token
    started = client.post(base + "/new", data={"session": "live", "text": "go", "csrf": token},
                          headers=headers, timeout=WAIT)  # fmt: skip
    assert started.status_code == 200
    assert gate.started.wait(WAIT)
    busy = client.post(base + "/s/live/prompt", data={"text": "again", "csrf": token},
                       headers=headers, timeout=WAIT)  # fmt: skip
    assert busy.status_code == 409 and "already running" in busy.json()["message"]
    steered = client.post(base + "/s/live/steer", data={"text": "and more", "csrf": token},
                          headers=headers, timeout=WAIT)  # fmt: skip
    assert steered.status_code == 200
    events = client.get(base + "/s/live/events", stream=True, timeout=WAIT)
    seen: list[str] = []
    lines = events.iter_lines(decode_unicode=True)
    for line in lines:
        if line.startswith("event: "):
            seen.append(line[7:])
        if seen and seen[-1] == "tool_execution_start":
            break
    assert client.post(base + "/s/live/abort", data={"csrf": token}, headers=headers,
                       timeout=WAIT).status_code == 200  # fmt: skip
    assert gate.aborted.wait(WAIT)
    for line in lines:
        if line.startswith("event: "):
            seen.append(line[7:])
    events.close()
    assert seen[0] == "run_start" and seen[-2:] == ["run_end", "done"] and "agent_end" in seen
    assert "run_command" in seen  # the steer reached the run, through the store
    data = [json.loads(m.model_dump_json()) for m in Session("live", page_server.store).load()]
    assert [m["role"] for m in data] == ["system", "user", "assistant", "tool_result", "run_end"]
    assert data[-2]["is_error"]  # the aborted call has its result; the steer was never heard
    assert data[-1]["stop_reason"] == "aborted"  # and the session says how the run ended
    again = client.post(base + "/s/live/abort", data={"csrf": token}, headers=headers, timeout=WAIT)
    assert again.status_code == 409


def test_no_agent_means_a_read_only_page(tmp_path: object) -> None:
    from agentkit.sessions import SqliteStore

    store = SqliteStore(tmp_path / "s.db")  # type: ignore[operator]
    with UiServer(store) as server:
        client = _signed_in(server)
        base = _base(server)
        assert "New session" not in client.get(base + "/", timeout=WAIT).text
        response = client.post(base + "/new", timeout=WAIT,
                               data={"session": "x", "text": "hi", "csrf": server.guard.csrf_token},
                               headers={"Origin": base, "Accept": "application/json"})  # fmt: skip
        assert response.status_code == 400 and "--agent" in response.json()["message"]
    store.close()
