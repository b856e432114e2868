"""Progress of an evaluation: a bar in a terminal, a live-updating display in Jupyter.

The runner calls a :class:`Progress` from the thread that started the evaluation, as each case
ends; nothing here runs on a worker thread. ``progress="auto"`` picks the notebook display in a
Jupyter kernel (IPython already imported and running a kernel: nothing is imported for it
elsewhere), the bar when standard error is a terminal, and nothing otherwise (CI logs, Celery
workers).
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any, Protocol

REFRESH = 0.1
"""Seconds between two redraws at most (the last one is always drawn)."""

_MARKS = (("passed", "✓"), ("failed", "✗"), ("diverged", "⇄"), ("error", "!"), ("cancelled", "-"))


class Progress(Protocol):
    """What the runner tells about an evaluation as it goes."""

    def start(self, name: str, total: int) -> None:
        """The evaluation of ``total`` cases begins."""

    def update(self, done: int, counts: dict[str, int]) -> None:
        """``done`` cases have ended, with these ``counts`` by status."""

    def close(self) -> None:
        """The evaluation ended (or was interrupted)."""


class Silent:
    """No progress shown."""

    def start(self, name: str, total: int) -> None:
        pass

    def update(self, done: int, counts: dict[str, int]) -> None:
        pass

    def close(self) -> None:
        pass


class _Throttled:
    """Redraws at most every :data:`REFRESH` seconds, and always for the last case."""

    def __init__(self) -> None:
        self.name, self.total = "", 0
        self.started = self.drawn = 0.0

    def start(self, name: str, total: int) -> None:
        self.name, self.total = name, total
        self.started = time.monotonic()
        self.draw(0, {})

    def update(self, done: int, counts: dict[str, int]) -> None:
        now = time.monotonic()
        if done >= self.total or now - self.drawn >= REFRESH:
            self.drawn = now
            self.draw(done, counts)

    def draw(self, done: int, counts: dict[str, int]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def counts_text(self, counts: dict[str, int]) -> str:
        return " ".join(f"{mark}{counts[s]}" for s, mark in _MARKS if counts.get(s))


class TerminalBar(_Throttled):
    """A one-line bar on ``stream`` (standard error), redrawn in place."""

    def __init__(self, stream: Any = None, width: int = 30) -> None:
        super().__init__()
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.shown = False

    def draw(self, done: int, counts: dict[str, int]) -> None:
        filled = int(self.width * done / self.total) if self.total else self.width
        bar = "█" * filled + "░" * (self.width - filled)
        elapsed = time.monotonic() - self.started
        line = f"{self.name} {bar} {done}/{self.total} {self.counts_text(counts)} {elapsed:.1f}s"
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


class NotebookDisplay(_Throttled):
    """An HTML progress bar in the running cell's output, updated in place
    (``IPython.display.display(..., display_id=True)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.handle: Any = None

    def draw(self, done: int, counts: dict[str, int]) -> None:
        from IPython.display import HTML, display

        elapsed = time.monotonic() - self.started
        body = HTML(
            f"<div><b>{html.escape(self.name)}</b> "
            f'<progress value="{done}" max="{max(self.total, 1)}" style="width:40%"></progress> '
            f"{done}/{self.total} {html.escape(self.counts_text(counts))} {elapsed:.1f}s</div>"
        )
        if self.handle is None:
            self.handle = display(body, display_id=True)
        else:
            self.handle.update(body)

    def close(self) -> None:
        pass


def in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (judged without importing IPython)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def make_progress(choice: Any = "auto", stream: Any = None) -> Progress:
    """The progress display ``choice`` names: ``"auto"`` (see the module), ``True`` (the
    bar), ``False``/``None`` (nothing), ``"bar"``, ``"notebook"``, or a :class:`Progress`."""
    if choice is None or choice is False:
        return Silent()
    if choice is True or choice == "bar":
        return TerminalBar(stream)
    if choice == "notebook":
        return NotebookDisplay()
    if choice == "auto":
        if in_notebook():
            return NotebookDisplay()
        out = stream if stream is not None else sys.stderr
        return TerminalBar(out) if getattr(out, "isatty", lambda: False)() else Silent()
    if all(hasattr(choice, name) for name in ("start", "update", "close")):
        return choice
    raise ValueError(f"progress is 'auto', True, False, 'bar', 'notebook' or a Progress, not "
                     f"{choice!r}")  # fmt: skip
