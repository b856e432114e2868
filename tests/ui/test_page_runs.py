"""The page's view of runs, read from the store's run logs: a live run seen from a reload and a
second tab, the run list saying how each run ended, an assistant's Markdown rendered and made
safe (XSS attempts in Chromium), long results folded, no empty boxes, and a run's timeline."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from agentkit import Agent, Approvals, runlog, tool
from agentkit.sessions import Session, SqliteStore
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import AssistantMessage, SystemMessage, TextContent, UserMessage
from agentkit.ui import UiServer
from tests.sessions.runlog_support import Gate as LogGate
from tests.sessions.runlog_support import gated_agent

from ..support import WAIT
from .browser import MS, expect, needs_browser, not_pwned, open_page, shot
from .conftest import Gate

XSS = [
    "<script>window.pwned = true</script>",
    '<img src=x onerror="window.pwned = true">',
    "[click](javascript:window.pwned=true)",
    "![pixel](javascript:window.pwned=true)",
    "<javascript:window.pwned=true>",
    '[titled](https://example.com "x\\" onmouseover=\\"window.pwned=true")',
    "[data](data:text/html,<script>window.pwned=true</script>)",
    '<a href="javascript:window.pwned=true">raw link</a>',
    "<svg onload=window.pwned=true></svg>",
    "<iframe src=javascript:window.pwned=true></iframe>",
    "<style>body{display:none}</style>",
    "```html\n<script>window.pwned = true</script>\n```",
    "&lt;script&gt;window.pwned=true&lt;/script&gt;",
]


def _signed_in(server: UiServer) -> tuple[requests.Session, str]:
    client = requests.Session()
    client.get(server.url, timeout=WAIT)
    return client, server.url.split("?")[0].rstrip("/")


@pytest.mark.browser
@needs_browser
def test_a_reload_and_a_second_tab_show_the_live_run(page_server: UiServer, gate: Gate) -> None:
    live = page_server.live.prompt("watched", "look it up")
    assert gate.started.wait(WAIT)
    with open_page() as page:
        page.goto(page_server.url)
        expect(page.locator(".running-count")).to_have_text("1 running")
        page.goto(page_server.url.split("?")[0] + "s/watched")
        expect(page.locator(".live-tools li")).to_have_count(1)
        page.reload()  # a reload follows the same run from its log
        expect(page.locator(".live-tools li")).to_have_count(1)
        expect(page.locator(".live-text")).to_contain_text("Looking it up.")
        tab = page.context.browser.new_context()  # a second tab, with the same cookie
        tab.add_cookies(page.context.cookies())
        second = tab.new_page()
        second.set_default_timeout(MS)
        second.goto(page.url)
        expect(second.locator(".live-tools li")).to_have_count(1)
        shot(second, "live-run-second-tab")
        gate.open.set()
        for tab in (page, second):  # both see the end, then the stored transcript
            tab.wait_for_selector("section.live[hidden]", state="attached")
            expect(tab.locator(".run-end .badge")).to_have_text("finished")
            expect(tab.locator(".running-count")).to_have_count(0)
            not_pwned(tab)
    assert live.run.wait(WAIT)


@pytest.mark.browser
@needs_browser
def test_a_run_of_another_agent_is_followed_and_aborted_from_the_page(
    page_server: UiServer,
) -> None:
    """A run the page did not start (a web worker's, a Celery worker's: here another agent on
    the same store) is live on the page, and its Abort reaches it through the store."""
    gate = LogGate()
    agent = gated_agent(Session("elsewhere", page_server.store), gate)
    run = agent.start("work")
    assert gate.started.wait(WAIT)
    with open_page() as page:
        page.goto(page_server.url)
        page.goto(page_server.url.split("?")[0] + f"runs/{run.id}")
        expect(page.locator(".live-tools li")).to_have_count(1)
        page.click("section.live button:has-text('Abort')")
        assert gate.aborted.wait(WAIT)
        page.wait_for_selector(".badge[data-state=aborted]")
        page.goto(page_server.url.split("?")[0] + "runs")
        expect(page.locator("tr[data-run] .badge").first).to_have_text("aborted")
        shot(page, "runs")
    assert runlog.run_info(page_server.store, run.id).stop_reason == "aborted"
    agent.close()


def test_the_run_list_says_how_each_run_ended(tmp_path: Path) -> None:
    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund."""
        return "refunded"

    store = SqliteStore(tmp_path / "s.db")

    def agent(name: str, script: list[Any], **options: Any) -> Agent:
        model = ScriptedModel(script)
        return Agent(model=model.model, stream_fn=model, tools=[refund],
                     session=Session(name, store), **options)  # fmt: skip

    agent("finished", ["done"]).prompt("x")
    agent("failed", [reply(error="the provider fell over")]).prompt("x")
    agent("waiting", [reply(tool_call("refund", {"amount": 3}))],
          approvals=Approvals(defer=True)).prompt("x")  # fmt: skip
    gate = LogGate()
    aborted = gated_agent(Session("aborted", store), gate)
    run = aborted.start("x")
    assert gate.started.wait(WAIT)
    run.abort()
    run.wait(WAIT)
    store.run_log().start("dead-run", "interrupted")
    with sqlite3.connect(tmp_path / "s.db") as db:  # its process was killed an hour ago
        db.execute("UPDATE agentkit_runs SET heartbeat_ms = heartbeat_ms - 3600000 "
                   "WHERE id = 'dead-run'")  # fmt: skip
    live_gate = LogGate()
    going = gated_agent(Session("going", store), live_gate)
    going.start("x")
    assert live_gate.started.wait(WAIT)
    Session("interrupted", store).append(UserMessage(content="hi"))
    with UiServer(store) as server:
        client, base = _signed_in(server)
        listing = client.get(base + "/runs", timeout=WAIT).text
        states = {
            session: state for session, state in _rows(listing, "data-run")
        }
        assert states == {"finished": "ok", "failed": "failed", "waiting": "waiting",
                          "aborted": "aborted", "interrupted": "failed", "going": "live"}  # fmt: skip
        assert "waiting for approval" in listing and "interrupted: its process stopped" in listing
        sessions = client.get(base + "/", timeout=WAIT).text
        assert dict(_rows(sessions, "data-session")) == states
        page = client.get(base + "/s/aborted", timeout=WAIT).text
        assert 'class="run-end run-end-aborted"' in page  # the transcript says where and how
        assert "1 running" in page
    live_gate.open.set()
    going.close()
    aborted.close()
    store.close()


def _rows(html: str, key: str) -> Iterator[tuple[str, str]]:
    """``(session, state)`` of each table row of a runs or sessions listing."""
    for row in html.split("<tr ")[1:]:
        if f"{key}=" not in row:
            continue
        session = row.split('href="/s/')[1].split('"')[0] if key == "data-run" else (
            row.split('data-session="')[1].split('"')[0])  # fmt: skip
        state = row.split('data-state="')[1].split('"')[0] if "data-state" in row else ""
        yield session, state


@pytest.mark.browser
@needs_browser
def test_markdown_is_rendered_and_nothing_a_model_wrote_runs(page_server: UiServer) -> None:
    text = "# Report\n\nSome **bold**, a [link](https://example.com), `code`.\n\n" + "\n\n".join(
        XSS
    )
    Session("markdown", page_server.store).append(
        UserMessage(content="\n".join(XSS)),
        AssistantMessage(content=[TextContent(text=text)]),
    )
    with open_page() as page:
        page.goto(page_server.url)
        page.goto(page_server.url.split("?")[0] + "s/markdown")
        md = page.locator(".role-assistant .md")
        expect(md.locator("h1")).to_have_text("Report")
        expect(md.locator("strong")).to_have_text("bold")
        link = md.get_by_role("link", name="link", exact=True)
        expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
        assert md.locator("script, img, iframe, svg, style").count() == 0
        hrefs = md.locator("a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
        assert all(h is None or h.startswith(("https:", "http:")) for h in hrefs), hrefs
        for element in md.locator("*").all():  # no event handler attribute anywhere
            names = element.evaluate("e => e.getAttributeNames()")
            assert not [n for n in names if n.startswith("on")], names
        page.mouse.move(10, 10)
        for anchor in md.locator("a").all():
            anchor.hover()
        expect(page.locator(".role-user .text")).to_contain_text("<script>")  # the user's: text
        not_pwned(page)
        shot(page, "markdown")


def test_a_long_result_is_folded_with_its_size_and_no_box_is_empty(page_server: UiServer) -> None:
    from agentkit.types import ToolCall, ToolResultMessage

    long = "line of a very long page\n" * 4800  # 120,000 characters
    Session("long", page_server.store).append(
        SystemMessage(content=""),
        UserMessage(content="fetch it"),
        AssistantMessage(content=[ToolCall(id="c1", name="fetch", arguments={"u": "x"})],
                         stop_reason="tool_use"),  # fmt: skip
        ToolResultMessage(tool_call_id="c1", tool_name="fetch",
                          content=[TextContent(text=long)]),  # fmt: skip
    )
    client, base = _signed_in(page_server)
    html = client.get(base + "/s/long", timeout=WAIT).text
    assert "show all · 120,000 characters, 117.2 KB" in html
    assert len(html) < 40_000  # folded, and at most a part of it in the page
    assert "100,000 more characters are not shown here" in html
    assert "role-system" not in html  # an empty system message is no box


def test_a_run_timeline_shows_requests_calls_and_gaps(tmp_path: Path) -> None:
    import threading

    from agentkit.types import Cost, Usage

    @tool
    def slow() -> str:
        """Take a while."""
        threading.Event().wait(0.3)
        return "done"

    usage = Usage(input=1000, output=200, cost=Cost(total=0.5))
    model = ScriptedModel([reply(tool_call("slow", {}), usage=usage), reply("ok", usage=usage)])
    store = SqliteStore(tmp_path / "s.db")
    agent = Agent(model=model.model, stream_fn=model, tools=[slow], session=Session("t", store),
                  before_tool_call=lambda ctx: threading.Event().wait(0.4) and None)  # fmt: skip
    run = agent.start("x")
    run.wait(WAIT)
    with UiServer(store) as server:
        client, base = _signed_in(server)
        html = client.get(f"{base}/runs/{run.id}", timeout=WAIT).text
    steps = html.split('<li class="step ')[1:]
    kinds = [s.split('"')[0].split()[0] for s in steps]
    assert kinds.count("step-model") == 2 and kinds.count("step-tool") == 1
    assert "step-gap" in kinds  # the hook's 0.4 s, when neither a request nor a call went on
    tool_row = steps[kinds.index("step-tool")]
    assert "slow" in tool_row and "width=" in tool_row
    assert "1000 in · 200 out" in html and "2000 tokens in" in html
    widths = [float(s.split('width="')[1].split('"')[0]) for s in steps]
    assert all(0 < w <= 100 for w in widths)
    events = runlog.logged(store, run.id)
    assert json.dumps(events[-1].data).count("run_end") == 1
    agent.close()
    store.close()


@pytest.fixture(autouse=True)
def _no_leftover_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTKIT_SESSIONS", raising=False)
