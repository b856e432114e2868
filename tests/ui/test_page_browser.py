"""The page in a real browser (Debian's chromium, driven by Playwright): open a session, watch a
live run stream in, steer it, abort another, and check that nothing a model wrote runs.

Skipped, saying why, where Playwright or a chromium binary is missing (``scripts/test`` installs
both where it can). Set AGENTKIT_UI_SCREENSHOTS to a folder to keep screenshots of each view.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit.sessions import Session
from agentkit.ui import UiServer

from ..support import WAIT
from .conftest import HOSTILE, Gate

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (Debian: apt-get install chromium)"
)
FLAGS = [
    "--headless=new",
    "--no-sandbox",  # root in a container has no user namespace for chromium's own sandbox
    "--disable-gpu",
    "--disable-background-networking",  # this machine's network is closed: no calls home
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MS = int(WAIT * 1000)
expect = sync_api.expect


@pytest.fixture
def browser_page() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(MS)
            expect.set_options(timeout=MS)
            yield page
        finally:
            browser.close()


def _shot(page: Any, name: str) -> None:
    folder = os.environ.get("AGENTKIT_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def _not_pwned(page: Any) -> None:
    assert page.evaluate("window.pwned === undefined"), "text a model wrote ran as script"


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
    _shot(page, "live-run")
    page.fill("section.live input[name=text]", "also check the date")
    page.click("section.live button:has-text('Steer')")
    expect(page.locator(".live-status")).to_have_text("steered")
    gate.open.set()
    # The run ends; the page reloads into the stored transcript.
    page.wait_for_selector(".call .badge.ok")
    page.wait_for_selector("section.live[hidden]", state="attached")
    texts = page.locator(".role-assistant .text").all_inner_texts()
    assert texts == ["Looking it up.", f"Here it is: {HOSTILE}"]
    assert "also check the date" in page.locator(".role-user .text").all_inner_texts()
    _not_pwned(page)
    _shot(page, "transcript")
    page.goto(page_server.url.split("?")[0])
    row = page.locator("tr[data-session='browser-run']")
    assert row.locator("td").nth(1).inner_text() == str(
        len(Session("browser-run", page_server.store).load())
    )
    _shot(page, "sessions")


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
    _not_pwned(page)
    roles = [m.role for m in Session("to-abort", page_server.store).load()]
    assert roles == ["system", "user", "assistant", "tool_result"]
