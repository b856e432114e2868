"""The page in a real browser (see ``browser.py``): open a session, watch a live run stream in,
steer it, abort another, and check that nothing a model wrote runs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from agentkit.sessions import Session
from agentkit.ui import UiServer

from ..support import WAIT
from .browser import expect, needs_browser, not_pwned, open_page, shot
from .conftest import HOSTILE, Gate

pytestmark = [pytest.mark.browser, needs_browser]


@pytest.fixture
def browser_page() -> Iterator[Any]:
    with open_page() as page:
        yield page


def test_watch_a_live_run_steer_it_and_read_its_transcript(
    page_server: UiServer, gate: Gate, browser_page: Any
) -> None:
    page = browser_page
    page.goto(page_server.url)
    assert page.url.endswith("/") and "token=" not in page.url  # the secret left the URL
    page.fill("input[name=session]", "browser-run")
    page.fill("textarea[name=text]", "Find out about <b>tags</b>")
    page.click("form.chat button")
    page.wait_for_url("**/s/browser-run")
    assert gate.started.wait(WAIT)
    tool_line = page.wait_for_selector(".live-tools li")
    assert tool_line.inner_text().startswith("→ look_up")
    assert "<script>window.pwned = true</script>" in tool_line.inner_text()  # shown as text
    expect(page.locator(".live-text")).to_contain_text("Looking it up.")
    shot(page, "live-run")
    page.fill("section.live input[name=text]", "also check the date")
    page.click("section.live button:has-text('Steer')")
    # The post's answer, or the run's own word that the steer reached it (whichever came last).
    expect(page.locator(".live-status")).to_have_text(re.compile("^(steered|steer received)$"))
    gate.open.set()
    # The run ends; the page reloads into the stored transcript.
    page.wait_for_selector(".call .badge.ok")
    page.wait_for_selector("section.live[hidden]", state="attached")
    texts = [t.strip() for t in page.locator(".role-assistant .text").all_inner_texts()]
    assert texts == ["Looking it up.", f"Here it is: {HOSTILE}"]  # Markdown, shown as text
    assert "also check the date" in page.locator(".role-user .text").all_inner_texts()
    not_pwned(page)
    shot(page, "transcript")
    page.goto(page_server.url.split("?")[0])
    row = page.locator("tr[data-session='browser-run']")
    assert row.locator("td").nth(1).inner_text() == str(
        len(Session("browser-run", page_server.store).load())
    )
    shot(page, "sessions")


def test_abort_from_the_page(page_server: UiServer, gate: Gate, browser_page: Any) -> None:
    page = browser_page
    page.goto(page_server.url)
    page.fill("input[name=session]", "to-abort")
    page.fill("textarea[name=text]", "start something long")
    page.click("form.chat button")
    page.wait_for_selector(".live-tools li")
    page.click("section.live button:has-text('Abort')")
    assert gate.aborted.wait(WAIT)
    page.wait_for_selector(".call .badge.error")  # reloaded: the aborted call has its result
    not_pwned(page)
    stored = Session("to-abort", page_server.store).load()
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool_result", "run_end"]
    assert stored[-1].stop_reason == "aborted"  # the session says the run was aborted
