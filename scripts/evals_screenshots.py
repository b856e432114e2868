"""Makes the screenshots of docs/evals.md: ``agentkit eval`` in a terminal (run for real in
tmux), the evaluations notebook executed on a kernel (its live progress, report and comparison
in Jupyter's output area), and the page's comparison and report (``agentkit ui --reports``)
over the reports the terminal's runs wrote.

Run: ``python scripts/evals_screenshots.py [terminal] [notebook] [page]`` (all three by
default; needs tmux, Playwright and chromium, as the page's tests do, and the samples extra for
the notebook). It writes docs/images/evals-*.png.
"""

from __future__ import annotations

import html
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "samples")]

IMAGES = ROOT / "docs" / "images"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update"]  # fmt: skip


APP = '''"""Under test: the travel desk as recorded, and as a branch changed its weather tool."""
from agentkit import Agent
from tests.evals.support import SYSTEM, colder_weather, weather


def make_agent() -> Agent:
    return Agent(tools=[weather], system_prompt=SYSTEM)


def make_agent_v2() -> Agent:
    return Agent(tools=[colder_weather], system_prompt=SYSTEM)
'''

COMMANDS = [
    ["agentkit eval desk.yaml --from-sessions --store sessions.db"],
    ["agentkit eval desk.yaml --agent app:make_agent --mode replay \\",
     "--evaluator EqualsExpected --evaluator SameToolCalls --save reports/main.json"],
    ["agentkit eval desk.yaml --agent app:make_agent_v2 --mode replay \\",
     "--evaluator EqualsExpected --evaluator SameToolCalls \\",
     "--compare reports/main.json --save reports/new-weather-api.json"],
]  # fmt: skip
"""The commands typed, each a list of the lines typed (a long one is continued with ``\\``)."""
COLUMNS = 118


def terminal_html(work: Path) -> str:
    """``agentkit eval`` run for real in a tmux pane ``COLUMNS`` wide (a suite built from three
    recorded sessions, replayed on main, then on a branch whose weather tool changed, compared
    with main), captured with its colours and rendered as a terminal shows it by rich."""
    from rich.console import Console
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    from agentkit.sessions import open_store
    from tests.evals.support import record_sessions

    with open_store(work / "sessions.db") as store:
        record_sessions(store, 3)
    (work / "app.py").write_text(APP)
    (work / "reports").mkdir()
    socket = f"agentkit-evals-{os.getpid()}"  # a tmux server of our own, ended at the end
    tmux = ["tmux", "-L", socket]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(work),
           "TERM": "xterm-256color", "PYTHONPATH": f"{ROOT}:{work}", "PS1": "$ ", "PS2": "> ",
           "PROMPT_COMMAND": f"tmux -L {socket} wait-for -S prompt", "LANG": "C.UTF-8"}  # fmt: skip
    shell = "env -i " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    subprocess.run([*tmux, "new-session", "-d", "-s", "shot", "-x", str(COLUMNS), "-y", "60",
                    "-c", str(work), f"{shell} bash --norc --noprofile"], check=True)  # fmt: skip
    try:
        for lines in COMMANDS:
            _await_prompt(tmux)
            for line in lines:
                subprocess.run([*tmux, "send-keys", "-t", "shot", "-l", "--", line], check=True)
                subprocess.run([*tmux, "send-keys", "-t", "shot", "Enter"], check=True)
        _await_prompt(tmux)
        captured = subprocess.run([*tmux, "capture-pane", "-p", "-e", "-t", "shot"],
                                  check=True, capture_output=True, text=True).stdout  # fmt: skip
    finally:
        subprocess.run([*tmux, "kill-server"], check=False)
    console = Console(record=True, width=COLUMNS, force_terminal=True, color_system="truecolor",
                      file=io.StringIO())  # fmt: skip
    console.print(Text.from_ansi(captured.rstrip() + "\n"), end="", soft_wrap=True)
    return console.export_html(inline_styles=True, theme=MONOKAI)


def _await_prompt(tmux: list[str]) -> None:
    """Wait for the shell's next prompt, drawn. Bash signals the channel before it draws the
    prompt (a signal with nobody waiting is kept for the wait), and keys typed before readline
    has the terminal are echoed twice: so then look at the pane until the prompt is there."""
    subprocess.run([*tmux, "wait-for", "prompt"], check=True, timeout=120)
    for _ in range(200):
        shown = subprocess.run([*tmux, "display-message", "-p", "-t", "shot", "#{cursor_x}"],
                               check=True, capture_output=True, text=True).stdout  # fmt: skip
        if shown.strip() == "2":  # the cursor stands after "$ "
            return
        time.sleep(0.05)
    raise TimeoutError("no prompt in the tmux pane")


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


def shoot_the_page(work: Path, browser: Any) -> None:
    """The page (``agentkit ui --reports reports``) over the reports the terminal wrote: the
    comparison of the branch with main, and the branch's report."""
    from agentkit.sessions import SqliteStore
    from agentkit.ui import UiServer

    views = {  # each page, down to the bottom of what it shows
        "evals-page-compare": ("evals/compare?baseline=main.json&candidate=new-weather-api.json",
                               "table.eval-compare"),
        "evals-page-report": ("evals/report/new-weather-api.json", "details.eval-case >> nth=0"),
    }  # fmt: skip
    with (
        SqliteStore(work / "sessions.db") as store,
        UiServer(store, reports=work / "reports") as server,
    ):
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        page.goto(server.url)
        for name, (path, last) in views.items():
            page.goto(server.url.split("?")[0] + path)
            box = page.locator(last).bounding_box()
            bottom = box["y"] + box["height"] + 6
            page.set_viewport_size({"width": 1000, "height": int(bottom)})
            page.screenshot(path=str(IMAGES / f"{name}.png"),
                            clip={"x": 0, "y": 0, "width": 1000, "height": bottom})  # fmt: skip
            print(f"wrote docs/images/{name}.png")
        page.close()


def main() -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    work = Path(tempfile.mkdtemp(prefix="agentkit-evals-shots-"))
    only = set(sys.argv[1:]) or {"terminal", "notebook", "page"}
    pages = {}
    if "terminal" in only or "page" in only:
        terminal = terminal_html(work)  # writes the reports the page shows
        if "terminal" in only:
            pages["evals-terminal"] = terminal
    if "notebook" in only:
        pages["evals-notebook"] = notebook_html()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS)
        try:
            for name, page_html in pages.items():
                shoot(page_html, name, browser)
            if "page" in only:
                shoot_the_page(work, browser)
        finally:
            browser.close()
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
