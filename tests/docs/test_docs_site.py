"""The documentation site as people see it: built with MkDocs, served over HTTP and read in a
real browser (chromium through Playwright). Each hand-written page must show the headings and
the code blocks its Markdown source has, no more and no fewer, and no stray fence; a fence the
renderer does not recognise turns a code comment into a heading and the text after it into code,
which ``mkdocs build --strict`` lets pass. Set AGENTKIT_UI_SCREENSHOTS to a folder to keep a
screenshot of each page."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.site_build import built_site
from tests.ui.browser import needs_browser, open_page, shot

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
WRITTEN = [p for p in PAGES if not p.startswith("reference/")]
"""Pages written by hand; the reference pages are made from docstrings (``::: name``)."""

pytestmark = [
    pytest.mark.browser,
    needs_browser,
    # One worker runs the whole module (pytest-xdist), so its browser starts once.
    pytest.mark.xdist_group("docs-site"),
    pytest.mark.skipif(
        importlib.util.find_spec("mkdocs") is None,
        reason="the docs extra is not installed (pip install -e '.[docs]')",
    ),
]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_HEADING = re.compile(r"^#{1,6}[ \t]+(?P<text>.+?)[ \t]*#*[ \t]*$")


def source_outline(text: str) -> tuple[list[str], list[str]]:
    """The headings and the code blocks' contents of a Markdown page, in order, as a reader
    expects to see them (inline markup dropped from headings)."""
    headings: list[str] = []
    blocks: list[str] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE.match(line)
        if opening is not None:
            fence, indent = opening.group("fence"), len(opening.group("indent"))
            body: list[str] = []
            index += 1
            while index < len(lines) and not re.match(
                rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", lines[index]
            ):
                body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
                index += 1
            blocks.append("\n".join(body).strip())
        else:
            heading = _HEADING.match(line)
            if heading is not None:
                headings.append(plain(heading.group("text")))
        index += 1
    return headings, blocks


def plain(markdown: str) -> str:
    """Heading text without its inline markup: links, code spans, emphasis."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return " ".join(re.sub(r"[`*]", "", text).split())


def test_the_outline_parser() -> None:
    text = (
        "# Title\n\n```python {.no-run}\n# a comment, not a heading\nx = 1\n```\n\n"
        "## A `code` [link](x.md)\n\n- item\n\n    ```bash\n    ls\n    ```\n"
    )
    assert source_outline(text) == (
        ["Title", "A code link"],
        ["# a comment, not a heading\nx = 1", "ls"],
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site, built strictly from this tree (once for the run) and served on 127.0.0.1; its
    root URL."""
    folder, code, stderr = built_site(tmp_path_factory)
    assert code == 0, stderr
    handler = functools.partial(_QuietHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, name="docs-site", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            thread.join()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Any]:
    with open_page() as page:
        # The theme's search builds its index in a worker on every page a reader opens; these
        # tests read the pages, not the search, and without it a page costs about half the time.
        page.route("**/search/search_index.json", lambda route: route.abort())
        yield page


def url_of(site: str, page: str) -> str:
    """Where MkDocs puts a page (``use_directory_urls``: ``cli.md`` at ``cli/``)."""
    stem = page.removesuffix(".md")
    if stem == "index":
        return site
    return site + stem.removesuffix("/index") + "/"


def visit(page: Any, url: str) -> None:
    """Open ``url`` and wait for its document, not for every resource: the theme asks for web
    fonts, and this machine has no network."""
    page.goto(url, wait_until="domcontentloaded", timeout=60_000)


def seen(page: Any) -> tuple[list[str], list[str], str]:
    """The article's headings, code blocks and text as the browser renders them."""
    article = page.locator("article").first
    headings = [
        " ".join(text.replace("¶", "").split())
        for text in article.locator("h1, h2, h3, h4, h5, h6").all_inner_texts()
    ]
    blocks = [text.strip() for text in article.locator("pre > code").all_inner_texts()]
    return headings, blocks, article.inner_text()


def stray_fences(text: str) -> list[str]:
    """Lines of rendered text that begin with a fence: a fence the renderer did not take."""
    return [line for line in text.splitlines() if line.strip().startswith(("```", "~~~"))]


@pytest.mark.parametrize("name", WRITTEN)
def test_a_written_page_shows_its_headings_and_code_blocks(
    site: str, browser_page: Any, name: str
) -> None:
    want_headings, want_blocks = source_outline((DOCS / name).read_text(encoding="utf-8"))
    visit(browser_page, url_of(site, name))
    shot(browser_page, "docs-" + name.removesuffix(".md").replace("/", "-"))
    headings, blocks, text = seen(browser_page)
    assert not stray_fences(text), f"{name}: a fence shows as text"
    assert headings == want_headings, f"{name}: the headings differ from the source's"
    assert len(blocks) == len(want_blocks), f"{name}: {len(blocks)} code blocks shown"
    for shown, wanted in zip(blocks, want_blocks, strict=True):
        assert " ".join(shown.split()) == " ".join(wanted.split()), f"{name}: a block differs"


@pytest.mark.parametrize("name", [p for p in PAGES if p not in WRITTEN])
def test_a_reference_page_has_one_title_and_no_stray_fence(
    site: str, browser_page: Any, name: str
) -> None:
    visit(browser_page, url_of(site, name))
    headings = browser_page.locator("article h1")
    assert headings.count() == 1, f"{name}: {headings.all_inner_texts()}"
    assert not stray_fences(browser_page.locator("article").first.inner_text())


def test_the_navigation_starts_where_the_readme_starts(site: str, browser_page: Any) -> None:
    """Install and the main job, the first agent in Python, then the command line."""
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]
    first = nav[0]
    assert isinstance(first, dict)
    (section, entries), = first.items()
    assert [next(iter(e.values())) for e in entries[:3]] == [
        "index.md", "quickstart.md", "cli.md"
    ]  # fmt: skip
    visit(browser_page, site)
    home = browser_page.locator("article h2").all_inner_texts()
    assert [" ".join(h.replace("¶", "").split()) for h in home[:3]] == [
        "Install",
        "The main job: an agent at work, offline",
        "Your first agent in Python",
    ]
    visit(browser_page, url_of(site, "api.md"))  # a page whose own contents are not in the way
    sidebar = browser_page.locator("nav.md-nav--primary .md-nav__link").all_inner_texts()
    shown = [" ".join(text.split()) for text in sidebar if text.strip()]
    assert shown[:4] == [
        "Get started",
        "Install, the main job, a first agent",
        "Quickstart: an agent step by step",
        "The command line",
    ], shown
