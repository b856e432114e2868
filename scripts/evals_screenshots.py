"""Makes the screenshots of docs/evals.md: a report and a comparison in a terminal, and the
evaluations notebook's live progress, report and comparison in Jupyter's output area.

Run: ``python scripts/evals_screenshots.py`` (needs Playwright and chromium, as the page's
tests do, and the samples extra for the notebook). It writes docs/images/evals-*.png.
"""

from __future__ import annotations

import html
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

IMAGES = ROOT / "docs" / "images"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update"]  # fmt: skip


def terminal_html() -> str:
    """A replayed suite, then the same suite with a changed tool compared with it, as a
    112-column terminal shows them (colours included), rendered by rich."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    from agentkit import Agent
    from agentkit.evals import Dataset, EqualsExpected, SameToolCalls
    from agentkit.sessions import open_store
    from tests.evals.support import SYSTEM, colder_weather, desk, record_sessions

    store = open_store(Path(tempfile.mkdtemp()) / "sessions.db")
    record_sessions(store, 3)
    dataset = Dataset.from_sessions(store, evaluators=[EqualsExpected(), SameToolCalls()])
    baseline = dataset.run(desk(), mode="replay", progress=False, name="main")
    candidate = dataset.run(lambda: Agent(tools=[colder_weather], system_prompt=SYSTEM),
                            mode="replay", progress=False, name="new-weather-api")  # fmt: skip
    console = Console(record=True, width=112, force_terminal=True, color_system="truecolor")
    console.print("$ agentkit eval desk.yaml --agent app:make_agent --mode replay --save main.json",
                  style="bold", highlight=False)  # fmt: skip
    console.print(Text.from_ansi(baseline.table(112, color=True)))
    console.print()
    console.print("$ agentkit eval desk.yaml --agent app:make_agent --mode replay "
                  "--compare main.json", style="bold", highlight=False)  # fmt: skip
    console.print(Text.from_ansi(candidate.table(112, color=True)))
    console.print()
    console.print(Text.from_ansi(candidate.compare(baseline).table(112)))
    console.print("agentkit: below the threshold: pass rate 50% (needs 100%)", style="red",
                  highlight=False)  # fmt: skip
    return console.export_html(inline_styles=True, theme=MONOKAI)


def notebook_html() -> str:
    """The notebook executed on a kernel; its replay cell and its comparison cell, input and
    outputs, laid out as Jupyter shows them."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "samples" / "evals.ipynb", as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=120,
                   resources={"metadata": {"path": str(ROOT / "samples")}}).execute()  # fmt: skip
    code = [c for c in nb.cells if c.cell_type == "code"]
    parts = []
    for number in (3, 5):
        cell = code[number]
        outputs = "".join(
            f'<div class="output">{o["data"]["text/html"]}</div>'
            for o in cell.outputs
            if "text/html" in o.get("data", {})
        )
        parts.append(
            f'<div class="cell"><div class="prompt">In [{number + 1}]:</div>'
            f'<pre class="input">{html.escape(cell.source)}</pre></div>'
            f'<div class="cell"><div class="prompt"></div><div>{outputs}</div></div>'
        )
    style = (
        "body{font-family:system-ui,sans-serif;font-size:14px;margin:16px;width:1080px}"
        ".cell{display:flex;margin:6px 0}.prompt{width:70px;color:#303f9f;font-family:monospace}"
        ".input{flex:1;background:#f5f5f5;border:1px solid #e0e0e0;padding:8px;margin:0}"
        ".output{margin:4px 0}td,th{padding:3px 8px;border-bottom:1px solid #ddd}"
    )
    return f"<html><head><style>{style}</style></head><body>{''.join(parts)}</body></html>"


def shoot(page_html: str, name: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1120, "height": 400})
    page.set_content(page_html)
    page.screenshot(path=str(IMAGES / f"{name}.png"), full_page=True)
    page.close()
    print(f"wrote docs/images/{name}.png")


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    pages = {"evals-terminal": terminal_html(), "evals-notebook": notebook_html()}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        try:
            for name, page_html in pages.items():
                shoot(page_html, name, browser)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
