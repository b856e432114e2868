"""Where a run's time and tokens went: its model requests and tool calls on a time axis, read
from its run log (:mod:`agentkit.runlog`), with the gaps in which neither was going on, and how
its runs are named on the page (live, waiting for approval, ended and how).

A model request lasts from its reply's ``message_start`` to its ``message_end`` (which carries
the reply's usage and cost); a tool call from its ``tool_execution_start`` to its
``tool_execution_end``. Calls of one batch may overlap: each has its own row. A gap is a stretch
of the run covered by no step (hooks, an approval waited for, a compaction, the store); the
page shows those longer than :data:`GAP_MS` or a fiftieth of the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..runlog import RunEvent
from ..sessions.runlog_base import RunInfo

GAP_MS = 100
"""Shortest gap the timeline shows (milliseconds), unless it is a fiftieth of the run."""

_ENDED = {
    "stop": ("ok", "finished"),
    "approval": ("waiting", "waiting for approval"),
    "aborted": ("aborted", "aborted"),
    "error": ("failed", "failed"),
    "interrupted": ("failed", "interrupted: its process stopped"),
    "budget": ("ended", "ended by its budget"),
    "length": ("ended", "cut off at the token limit"),
}


def run_state(info: RunInfo) -> tuple[str, str]:
    """A run's state on the page: a CSS class and the words (``live``, ``waiting for
    approval``, ``finished``, ``aborted``, ``failed``, ...)."""
    if info.live:
        return "live", "live"
    reason = info.stop_reason or "error"
    return _ENDED.get(reason, ("ended", f"ended: {reason}"))


@dataclass
class Step:
    """One bar: a model request (``kind="model"``), a tool call (``"tool"``) or a gap."""

    kind: str
    label: str
    start: int
    end: int
    open: bool = False
    """Still going on (its end is the last moment the log knows)."""
    error: bool = False
    input: int = 0
    output: int = 0
    cost: float = 0.0
    left: float = 0.0
    """Where the bar starts and how wide it is, in percent of the run (set by :func:`layout`)."""
    width: float = 0.0

    @property
    def ms(self) -> int:
        """How long it lasted (milliseconds)."""
        return self.end - self.start


@dataclass
class Timeline:
    """A run's steps in order of their start, its gaps among them, and its totals."""

    start: int
    end: int
    steps: list[Step] = field(default_factory=list)
    model_ms: int = 0
    tool_ms: int = 0
    idle_ms: int = 0
    input: int = 0
    output: int = 0
    cost: float = 0.0

    @property
    def ms(self) -> int:
        """How long the run lasted (so far, for a live one)."""
        return self.end - self.start


def timeline(events: list[RunEvent]) -> Timeline | None:
    """The timeline of a run's logged ``events`` (``None`` without timed events)."""
    timed = [e for e in events if e.time_ms is not None]
    if not timed:
        return None
    start = min(e.time_ms or 0 for e in timed)
    end = max(e.time_ms or 0 for e in timed)
    line = Timeline(start, end)
    models: dict[int, Step] = {}  # the request under way (one at a time)
    tools: dict[str, Step] = {}
    for event in timed:
        _take(line, event, models, tools)
    for step in [*models.values(), *tools.values()]:
        step.end, step.open = end, True
    line.steps.sort(key=lambda s: (s.start, s.kind != "model"))
    _gaps(line)
    layout(line)
    return line


def _take(line: Timeline, event: RunEvent, models: dict[int, Step], tools: dict[str, Step]
          ) -> None:  # fmt: skip
    t, data = event.time_ms or 0, event.data
    found = data.get("message")
    message: dict[str, Any] = found if isinstance(found, dict) else {}
    if event.type == "message_start" and message.get("role") == "assistant":
        label = "model " + str(message.get("model") or "")
        models[0] = Step("model", label.strip(), t, t)
        line.steps.append(models[0])
    elif event.type == "message_end" and message.get("role") == "assistant" and 0 in models:
        step = models.pop(0)
        step.end = t
        usage = message.get("usage") or {}
        step.input, step.output = int(usage.get("input", 0)), int(usage.get("output", 0))
        step.cost = float((usage.get("cost") or {}).get("total", 0.0))
        step.error = message.get("stop_reason") in ("error", "aborted")
        line.model_ms += step.ms
        line.input, line.output, line.cost = (line.input + step.input,
                                              line.output + step.output, line.cost + step.cost)
    elif event.type == "tool_execution_start":
        step = Step("tool", str(data.get("tool_name", "tool")), t, t)
        tools[str(data.get("tool_call_id"))] = step
        line.steps.append(step)
    elif event.type == "tool_execution_end" and str(data.get("tool_call_id")) in tools:
        step = tools.pop(str(data.get("tool_call_id")))
        step.end, step.error = t, bool(data.get("is_error"))
        line.tool_ms += step.ms


def _gaps(line: Timeline) -> None:
    """Add the stretches covered by no step, longer than :data:`GAP_MS` or a fiftieth of the
    run, as gap steps; count all of them as idle time."""
    least = min(GAP_MS, max(1, line.ms // 50))
    covered_to, gaps = line.start, []
    for step in line.steps:
        if step.start > covered_to:
            gaps.append(Step("gap", "idle", covered_to, step.start))
        covered_to = max(covered_to, step.end)
    if line.end > covered_to:
        gaps.append(Step("gap", "idle", covered_to, line.end))
    line.idle_ms = sum(g.ms for g in gaps)
    line.steps = sorted([*line.steps, *(g for g in gaps if g.ms >= least)],
                        key=lambda s: (s.start, s.kind == "gap"))  # fmt: skip


def layout(line: Timeline) -> None:
    """Place each step's bar in percent of the run (at least a sliver, so it can be seen)."""
    total = max(1, line.ms)
    for step in line.steps:
        step.left = round(100 * (step.start - line.start) / total, 3)
        step.width = round(max(0.4, 100 * step.ms / total), 3)
        step.left = min(step.left, 100 - step.width)


def seconds(ms: int | float) -> str:
    """A duration as a person reads it (``850 ms``, ``12.4 s``, ``3 min 05 s``)."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, rest = divmod(int(ms // 1000), 60)
    return f"{minutes} min {rest:02d} s"


def summary(info: RunInfo) -> dict[str, Any]:
    """What the run list says of a run: its id, session, state and when."""
    css, words = run_state(info)
    return {"info": info, "css": css, "state": words}
