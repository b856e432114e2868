"""The evaluations notebook, executed by nbclient on a real IPython kernel: a dataset from
recorded sessions, replayed (with the live progress display), a changed tool caught as a
divergence, and two system prompts compared live."""

from __future__ import annotations

from typing import Any

import nbformat
import pytest
from sample_helpers import SAMPLES, client_for, text_of

NOTEBOOK = SAMPLES / "evals.ipynb"


def html_of(cell: Any) -> list[str]:
    return [o["data"]["text/html"] for o in cell.get("outputs", []) if "text/html" in o.get("data", {})]


@pytest.mark.processes  # a real IPython kernel
def test_the_evals_notebook_runs_top_to_bottom(kernel_name: str) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client_for(nb, kernel_name).execute()
    cells = [c for c in nb.cells if c.cell_type == "code"]
    assert "runs an event loop" in text_of(cells[0])
    assert "['chat-Lisbon', 'chat-Oslo', 'chat-Rome']" in text_of(cells[1])
    assert "Dataset('sessions', 6 cases, 2 evaluators)" in text_of(cells[2])

    progress, report = html_of(cells[3])  # the live display, then the report's rich display
    assert '<progress value="6" max="6"' in progress and "✓6" in progress
    assert "sessions (replay): 6 cases: 6 passed" in report and "<table" in report

    divergences = text_of(cells[4])
    assert "chat-Oslo#1: request 2: weather (call_1) now returns 'snowy, 27 F'; the recording " \
        "had 'snowy, -3 C'" in divergences  # fmt: skip
    assert "3 worse, 3 same" in html_of(cells[4])[-1]

    compared = html_of(cells[5])[-1]
    assert "look it up vs answer at once: 3 better" in compared
    assert "pass rate 0% → 100%" in compared
    assert "look it up (live): 3 cases: 3 passed" in text_of(cells[6])
