"""The notebook, executed by nbclient on a real IPython kernel, and interrupted twice."""

from __future__ import annotations

import threading
import time
from typing import Any

import nbformat
import pytest
from jupyter_core.utils import run_sync
from sample_helpers import SAMPLES, client_for, text_of, wait_until

pytestmark = pytest.mark.processes

NOTEBOOK = SAMPLES / "notebook.ipynb"


ABORTED = "[test] Run.abort() called"

ABORT_PROBE = f"""
import agentkit.agent

_original_run_abort = agentkit.agent.Run.abort


def _reported_run_abort(self):
    _original_run_abort(self)
    print({ABORTED!r}, flush=True)


agentkit.agent.Run.abort = _reported_run_abort
"""
"""Run in the kernel before the interrupted cell: each ``Run.abort()`` (what ``prompt()`` calls
on each ``KeyboardInterrupt`` it catches) prints :data:`ABORTED` into the running cell's output,
the only sign outside the kernel that an interrupt has been handled."""


def test_notebook_runs_top_to_bottom(kernel_name: str) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client_for(nb, kernel_name).execute()
    out = [text_of(c) for c in nb.cells if c.cell_type == "code"]
    assert "asyncio.run() would fail" in out[0]
    assert "🔧 search_hotels({'city': 'Lisbon', 'nights': 2})" in out[2]
    assert "Hotel in Lisbon: 2 nights for 190 EUR" in out[2]
    assert "Shall I book?" in out[2]
    assert "stop_reason: aborted" in out[3]
    assert "idle: True; last message: assistant" in out[4]
    assert "Day 1: Alfama" in out[4]
    assert "Yes, still here and ready." in out[5]


def test_cell_interrupted_twice_leaves_the_agent_idle_and_usable(kernel_name: str) -> None:
    """Press ■ twice while ``agent.prompt()`` runs: real SIGINTs to the kernel process."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = client_for(nb, kernel_name)
    interrupts: list[float] = []

    def press_stop_twice(cell: Any) -> None:
        # First while the uncancellable tool runs, again while prompt() waits for it to end.
        if not wait_until(lambda: "🔧 draft_itinerary" in text_of(cell), timeout=30):
            return
        interrupt = run_sync(client.km.interrupt_kernel)  # what the ■ button does
        interrupt()
        interrupts.append(time.monotonic())
        # Only once prompt() has caught the first KeyboardInterrupt and aborted the run: two
        # SIGINTs before the kernel looks would be seen as one.
        if not wait_until(lambda: text_of(cell).count(ABORTED) == 1, timeout=30):
            return
        interrupt()
        interrupts.append(time.monotonic())

    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if "interrupt-me" in cell.metadata.get("tags", []):
                client.execute_cell(nbformat.v4.new_code_cell(ABORT_PROBE), index)
                presser = threading.Thread(target=press_stop_twice, args=(cell,))
                presser.start()
                client.execute_cell(cell, index)
                ended = time.monotonic()
                presser.join()
                interrupted = cell
            else:
                client.execute_cell(cell, index)
        out = text_of(interrupted)
        assert len(interrupts) == 2
        assert ended > interrupts[1], "the second interrupt came after the cell had ended"
        # Both were handled by prompt(), the second while it waited for the run to wind down,
        # and only then did it raise.
        assert out.count(ABORTED) == 2, out
        assert out.rindex(ABORTED) < out.index("Interrupted.")
        # The tool ignored the abort and finished within the grace period: its result is kept,
        # and the aborted run made no further request (no answer streamed after it).
        assert "idle: True; last message: tool_result" in out
        assert "Day 1" not in out
        # The cells after it ran normally: the agent was idle and took a new prompt.
        after = [text_of(c) for c in nb.cells[nb.cells.index(interrupted) + 1 :]]
        assert any("Yes, still here and ready." in text for text in after)
