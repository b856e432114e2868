"""The run-envelope samples: typed output and budgets, on their scripted models."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable

import budgets
import pytest
import typed_output
from sample_helpers import SAMPLES

from agentkit import AssistantMessage, ToolCall, ToolResultMessage


def test_typed_output_sample(thread_baseline: Callable[[], None]) -> None:
    out = io.StringIO()
    result = typed_output.main([], out=out)
    assert result.output == typed_output.CityReport(
        city="Paris", country="France", population_millions=2.1,
        landmarks=["Eiffel Tower", "Louvre"],
    )
    assert result.usage.requests == 3  # tool call, invalid answer, valid answer
    text = out.getvalue()
    assert "partial: {'city': 'Paris'" in text and "report: CityReport(" in text
    thread_baseline()


def test_budget_sample(thread_baseline: Callable[[], None]) -> None:
    out = io.StringIO()
    result = budgets.main([], out=out)
    assert (result.stop_reason, result.budget) == ("budget", "max_turns")
    assert result.text.startswith("Summary:")
    calls = [c.id for m in result if isinstance(m, AssistantMessage) for c in m.content
             if isinstance(c, ToolCall)]
    assert calls == [m.tool_call_id for m in result if isinstance(m, ToolResultMessage)]
    assert "stopped: budget (max_turns)" in out.getvalue()
    thread_baseline()


@pytest.mark.processes
def test_samples_run_as_scripts() -> None:
    for name in ("typed_output.py", "budgets.py"):
        done = subprocess.run(
            [sys.executable, str(SAMPLES / name)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout
