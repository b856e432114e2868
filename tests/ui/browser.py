"""A real browser for the page's tests: Debian's chromium driven by Playwright.

Tests that need it are marked :data:`needs_browser`, which skips them, saying why, where
Playwright or a chromium binary is missing (``scripts/test`` installs both where it can). Set
AGENTKIT_UI_SCREENSHOTS to a folder to keep a screenshot of each view the tests visit.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..support import WAIT

try:
    from playwright import sync_api
except ImportError:  # the test extra installs it
    sync_api = None

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_browser = pytest.mark.skipif(
    sync_api is None or CHROMIUM is None,
    reason="no browser: needs Playwright (the test extra) and chromium (Debian: apt-get install "
    "chromium)",
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


@contextmanager
def open_page() -> Iterator[Any]:
    """A fresh chromium page, closed with its browser at the end."""
    assert sync_api is not None and CHROMIUM is not None
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(MS)
            sync_api.expect.set_options(timeout=MS)
            yield page
        finally:
            browser.close()


def expect(locator: Any) -> Any:
    """Playwright's ``expect``, which waits (CSP forbids the page-side ``wait_for_function``)."""
    assert sync_api is not None
    return sync_api.expect(locator)


def shot(page: Any, name: str) -> None:
    """Keep a screenshot of the page when AGENTKIT_UI_SCREENSHOTS names a folder."""
    folder = os.environ.get("AGENTKIT_UI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def not_pwned(page: Any) -> None:
    """Nothing a model wrote ran as script."""
    assert page.evaluate("window.pwned === undefined"), "text a model wrote ran as script"
