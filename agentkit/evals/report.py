"""What an evaluation gives back: a :class:`Report` of :class:`CaseResult` s, and the
:class:`Comparison` of two reports (a baseline and a candidate).

A report prints as a table in a terminal (``print(report)``), shows as an HTML table in Jupyter
(``_repr_html_``; every value escaped), and round-trips through JSON (:meth:`Report.to_json`,
:meth:`Report.from_json`, :meth:`Report.save`, :meth:`Report.load`), which is how a CI job keeps
the baseline that the next run is compared with.

A case's status is, in order of precedence: ``cancelled`` (the evaluation was aborted before
it ended), ``diverged`` (its replay left the recording), ``error`` (the run, the agent factory
or an evaluator failed), ``failed`` (an assertion was false) or ``passed``.
"""

from __future__ import annotations

import html
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._serialize import to_jsonable
from ..results import RunUsage
from .evaluators import Evaluation
from .recording import Divergence, ToolCallRecord

Status = Literal["passed", "failed", "diverged", "error", "cancelled"]

_RANK = {"passed": 2, "failed": 1, "diverged": 1, "error": 0}
"""How good a status is, for comparisons (a cancelled case was not run)."""

_MARK = {"passed": "✓", "failed": "✗", "diverged": "⇄", "error": "!", "cancelled": "-"}
_COLOR = {"passed": "32", "failed": "31", "diverged": "33", "error": "31", "cancelled": "90"}
_HTML_COLOR = {"passed": "#d7f5dd", "failed": "#fbdada", "diverged": "#fdf1c7",
               "error": "#fbdada", "cancelled": "#eeeeee"}  # fmt: skip


@dataclass
class CaseResult:
    """How one case went: its status, what the agent answered and did, what it cost, and each
    evaluation. ``score`` is the mean of the evaluations' values (an assertion counts 1 or 0),
    ``None`` without any, and 0 for a case in ``error`` or ``diverged``."""

    name: str
    status: Status
    answer: str = ""
    output: Any = None
    evaluations: list[Evaluation] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: RunUsage = field(default_factory=RunUsage)
    judge_usage: RunUsage = field(default_factory=RunUsage)
    turns: int = 0
    duration: float = 0.0
    stop_reason: str | None = None
    error: str | None = None
    divergence: Divergence | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    messages: list[Any] = field(default_factory=list, repr=False)
    """The run's new messages (kept in memory, not in JSON)."""

    @property
    def score(self) -> float | None:
        """The mean of the evaluations' values (``None`` without any); 0 for a case in
        ``error`` or ``diverged``, which gave no answer to judge."""
        if self.status in ("error", "diverged"):
            return 0.0
        values = [float(e.value) for e in self.evaluations if e.error is None]
        return sum(values) / len(values) if values else None

    @property
    def cost(self) -> float:
        """What the agent's runs cost, in US dollars."""
        return self.usage.cost.total

    @property
    def note(self) -> str:
        """One line on what went wrong: the divergence, the error, or the failed checks."""
        if self.divergence is not None:
            return f"diverged at {self.divergence}"
        failures = [e for e in self.evaluations if not e.passed]
        parts = [self.error] if self.error else []
        for e in failures:
            why = e.error or e.reason
            parts.append(f"{e.name}: {why}" if why else e.name)
        return "; ".join(p for p in parts if p)

    def to_dict(self) -> dict[str, Any]:
        """As JSON data (the messages left out)."""
        return {
            "name": self.name,
            "status": self.status,
            "score": self.score,
            "answer": self.answer,
            "output": to_jsonable(self.output),
            "evaluations": [e.to_dict() for e in self.evaluations],
            "tool_calls": [to_jsonable(c.__dict__) for c in self.tool_calls],
            "usage": self.usage.model_dump(mode="json"),
            "judge_usage": self.judge_usage.model_dump(mode="json"),
            "turns": self.turns,
            "duration": self.duration,
            "stop_reason": self.stop_reason,
            "error": self.error,
            "divergence": self.divergence.to_dict() if self.divergence else None,
            "metadata": to_jsonable(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        """A result from :meth:`to_dict`'s data; :class:`ValueError` or :class:`TypeError`
        naming what is wrong (a report comes from a file anybody may have written)."""
        status = data["status"]
        if status not in _MARK:
            raise ValueError(f"case {data['name']!r} has an unknown status {status!r}")
        divergence = data.get("divergence")
        error = data.get("error")
        return cls(
            name=str(data["name"]),
            status=status,
            answer=str(data.get("answer") or ""),
            output=data.get("output"),
            evaluations=[_evaluation(e) for e in data.get("evaluations") or []],
            tool_calls=[ToolCallRecord(**c) for c in data.get("tool_calls") or []],
            usage=RunUsage.model_validate(data.get("usage") or {}),
            judge_usage=RunUsage.model_validate(data.get("judge_usage") or {}),
            turns=int(data.get("turns") or 0),
            duration=float(data.get("duration") or 0.0),
            stop_reason=data.get("stop_reason"),
            error=None if error is None else str(error),
            divergence=Divergence(**divergence) if divergence else None,
            metadata=dict(data.get("metadata") or {}),
        )


def _evaluation(data: dict[str, Any]) -> Evaluation:
    """An evaluation from its JSON data: its value an assertion or a number."""
    evaluation = Evaluation(**data)
    if not isinstance(evaluation.value, bool | int | float):
        raise ValueError(f"evaluation {evaluation.name!r} has the value {evaluation.value!r}")
    return evaluation


def _mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


@dataclass
class Report:
    """The results of one evaluation of a dataset: one :class:`CaseResult` per case, in the
    dataset's order. ``mode`` is ``"live"`` or ``"replay"``; ``interrupted`` says the
    evaluation was aborted (its unfinished cases are ``cancelled``)."""

    name: str
    mode: str
    cases: list[CaseResult]
    started_at: float = 0.0
    duration: float = 0.0
    interrupted: bool = False

    def __iter__(self) -> Iterator[CaseResult]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, name: str) -> CaseResult:
        for result in self.cases:
            if result.name == name:
                return result
        raise KeyError(name)

    @property
    def counts(self) -> dict[str, int]:
        """How many cases have each status."""
        counts = {status: 0 for status in _MARK}
        for result in self.cases:
            counts[result.status] += 1
        return counts

    @property
    def ran(self) -> list[CaseResult]:
        """The cases that ran (all but the cancelled ones)."""
        return [r for r in self.cases if r.status != "cancelled"]

    @property
    def pass_rate(self) -> float:
        """The share of the cases that ran which passed (0 when none ran)."""
        ran = self.ran
        return sum(r.status == "passed" for r in ran) / len(ran) if ran else 0.0

    @property
    def score(self) -> float | None:
        """The mean of the cases' scores (a case in ``error`` or ``diverged`` scores 0);
        ``None`` when no case has a score."""
        return _mean(r.score for r in self.ran)

    @property
    def cost(self) -> float:
        """What the agents' runs cost in all, in US dollars."""
        return sum(r.cost for r in self.cases)

    @property
    def judge_cost(self) -> float:
        """What the judges cost in all, in US dollars."""
        return sum(r.judge_usage.cost.total for r in self.cases)

    @property
    def tokens(self) -> int:
        """The agents' tokens in all."""
        return sum(r.usage.total_tokens for r in self.cases)

    def meets(self, min_pass_rate: float | None = None, min_score: float | None = None) -> bool:
        """Whether the report clears the thresholds: an interrupted evaluation never does."""
        if self.interrupted or not self.ran:
            return False
        if min_pass_rate is not None and self.pass_rate < min_pass_rate:
            return False
        if min_score is not None and (self.score is None or self.score < min_score):
            return False
        return True

    def compare(self, baseline: Report) -> Comparison:
        """How this report (the candidate) differs from ``baseline``, case by case."""
        return Comparison(baseline, self)

    # --- text ----------------------------------------------------------------------------------

    def summary(self) -> str:
        """One line: the counts, the pass rate, the score, the cost and the time."""
        counts = self.counts
        shown = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
        score = "-" if self.score is None else f"{self.score:.2f}"
        judge = f" (+{money(self.judge_cost)} judge)" if self.judge_cost else ""
        stopped = " · INTERRUPTED" if self.interrupted else ""
        return (
            f"{self.name} ({self.mode}): {len(self.cases)} cases: {shown} · pass rate "
            f"{self.pass_rate:.0%} · score {score} · {self.tokens} tokens · {money(self.cost)}"
            f"{judge} · {self.duration:.1f} s{stopped}"
        )

    def table(self, width: int | None = None, color: bool = False) -> str:
        """The report as a text table, its notes cut to fit ``width`` columns (not cut when
        ``None``), with ANSI colours when ``color``."""
        rows = [
            [
                f"{_MARK[r.status]} {r.status}",
                r.name,
                "-" if r.score is None else f"{r.score:.2f}",
                str(r.turns),
                str(r.usage.total_tokens),
                money(r.cost),
                f"{r.duration:.2f}s",
                r.note,
            ]
            for r in self.cases
        ]
        header = ["status", "case", "score", "turns", "tokens", "cost", "time", "notes"]
        colors = [_COLOR[r.status] for r in self.cases] if color else None
        return _text_table(header, rows, width, colors) + "\n" + self.summary()

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<Report {self.summary()}>"

    def print(self, file: Any = None) -> None:
        """Print the table (to ``file``, standard output by default), in colour on a
        terminal."""
        out = _output(file)
        out.write(self.table(terminal_width(out), color=wants_color(out)) + "\n")

    def _repr_html_(self) -> str:
        rows = []
        for r in self.cases:
            rows.append(
                _html_row(
                    _HTML_COLOR[r.status],
                    [f"{_MARK[r.status]} {r.status}", r.name,
                     "-" if r.score is None else f"{r.score:.2f}", str(r.turns),
                     str(r.usage.total_tokens), money(r.cost), f"{r.duration:.2f}s",
                     r.note or r.answer[:200]],
                )  # fmt: skip
            )
        header = ["status", "case", "score", "turns", "tokens", "cost", "time", "notes / answer"]
        return _html_table(self.summary(), header, rows)

    # --- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """As JSON data: the totals and every case."""
        return {
            "name": self.name,
            "mode": self.mode,
            "started_at": self.started_at,
            "duration": self.duration,
            "interrupted": self.interrupted,
            "counts": self.counts,
            "pass_rate": self.pass_rate,
            "score": self.score,
            "cost": self.cost,
            "judge_cost": self.judge_cost,
            "tokens": self.tokens,
            "cases": [r.to_dict() for r in self.cases],
        }

    def to_json(self, indent: int | None = 2) -> str:
        """As JSON text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """A report from :meth:`to_dict`'s data."""
        try:
            return cls(
                name=str(data["name"]),
                mode=str(data["mode"]),
                cases=[CaseResult.from_dict(c) for c in data["cases"]],
                started_at=float(data.get("started_at") or 0.0),
                duration=float(data.get("duration") or 0.0),
                interrupted=bool(data.get("interrupted", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not an evaluation report: {type(exc).__name__} {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> Report:
        """A report from :meth:`to_json`'s text."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("not an evaluation report: the JSON is not an object")
        return cls.from_dict(data)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the report as JSON to ``path`` (atomically); return the path."""
        path = Path(path)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(self.to_json() + "\n", encoding="utf-8")
        os.replace(temporary, path)
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Report:
        """A report saved with :meth:`save`."""
        path = Path(path)
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


# --- comparing two reports --------------------------------------------------------------------

Change = Literal["better", "worse", "same", "new", "gone"]


@dataclass
class CaseChange:
    """One case in two reports: how it changed, and the deltas of its score and cost."""

    name: str
    change: Change
    baseline: CaseResult | None
    candidate: CaseResult | None

    @property
    def score_delta(self) -> float | None:
        """The candidate's score minus the baseline's (``None`` unless both have one)."""
        if self.baseline is None or self.candidate is None:
            return None
        before, after = self.baseline.score, self.candidate.score
        return None if before is None or after is None else after - before

    @property
    def cost_delta(self) -> float | None:
        """The candidate's cost minus the baseline's (``None`` unless both ran)."""
        if self.baseline is None or self.candidate is None:
            return None
        return self.candidate.cost - self.baseline.cost

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "name": self.name,
            "change": self.change,
            "baseline": self.baseline.status if self.baseline else None,
            "candidate": self.candidate.status if self.candidate else None,
            "score_delta": self.score_delta,
            "cost_delta": self.cost_delta,
        }


def _change(before: CaseResult | None, after: CaseResult | None) -> Change:
    if before is None or before.status == "cancelled":
        return "new"
    if after is None or after.status == "cancelled":
        return "gone"
    rank_before, rank_after = _RANK[before.status], _RANK[after.status]
    if rank_after != rank_before:
        return "better" if rank_after > rank_before else "worse"
    score_before, score_after = before.score, after.score
    if score_before is not None and score_after is not None:
        if score_after > score_before + 1e-9:
            return "better"
        if score_after < score_before - 1e-9:
            return "worse"
    return "same"


class Comparison:
    """A candidate report against a baseline: which cases got better or worse (their status,
    else their score), and the deltas of the pass rate, the score and the cost."""

    def __init__(self, baseline: Report, candidate: Report) -> None:
        self.baseline, self.candidate = baseline, candidate
        before = {r.name: r for r in baseline.cases}
        after = {r.name: r for r in candidate.cases}
        names = list(after) + [n for n in before if n not in after]
        self.changes = [
            CaseChange(n, _change(before.get(n), after.get(n)), before.get(n), after.get(n))
            for n in names
        ]

    def of(self, change: Change) -> list[CaseChange]:
        """The cases with this change."""
        return [c for c in self.changes if c.change == change]

    @property
    def better(self) -> list[CaseChange]:
        """The cases that got better."""
        return self.of("better")

    @property
    def worse(self) -> list[CaseChange]:
        """The cases that got worse."""
        return self.of("worse")

    @property
    def pass_rate_delta(self) -> float:
        """The candidate's pass rate minus the baseline's."""
        return self.candidate.pass_rate - self.baseline.pass_rate

    @property
    def score_delta(self) -> float | None:
        """The candidate's score minus the baseline's (``None`` unless both have one)."""
        before, after = self.baseline.score, self.candidate.score
        return None if before is None or after is None else after - before

    @property
    def cost_delta(self) -> float:
        """The candidate's cost minus the baseline's."""
        return self.candidate.cost - self.baseline.cost

    @property
    def ranked(self) -> list[CaseChange]:
        """The changes in the order a reader wants them: worse, better, new, gone, same."""
        return sorted(self.changes, key=lambda c: _ORDER[c.change])

    def summary(self) -> str:
        """One line: how many cases got better and worse, and the deltas."""
        counts = {c: len(self.of(c)) for c in ("better", "worse", "same", "new", "gone")}
        shown = ", ".join(f"{n} {c}" for c, n in counts.items() if n)
        score = "-" if self.score_delta is None else f"{self.score_delta:+.2f}"
        return (
            f"{self.candidate.name} vs {self.baseline.name}: {shown} · pass rate "
            f"{self.baseline.pass_rate:.0%} → {self.candidate.pass_rate:.0%} "
            f"({self.pass_rate_delta * 100:+.0f} pts) · score {score} · cost "
            f"{money(self.baseline.cost)} → {money(self.candidate.cost)} "
            f"({money(self.cost_delta, sign=True)})"
        )

    def _rows(self) -> list[list[str]]:
        rows = []
        for c in self.ranked:
            delta, cost = c.score_delta, c.cost_delta
            rows.append([
                c.change, c.name,
                c.baseline.status if c.baseline else "-",
                c.candidate.status if c.candidate else "-",
                "-" if delta is None else f"{delta:+.2f}",
                "-" if cost is None else money(cost, sign=True),
                c.candidate.note if c.candidate and c.change == "worse" else "",
            ])  # fmt: skip
        return rows

    def table(self, width: int | None = None, color: bool = False) -> str:
        """The comparison as a text table, the cases that got worse first, with ANSI colours
        when ``color`` (worse in red, better in green)."""
        header = ["change", "case", "baseline", "candidate", "score Δ", "cost Δ", "notes"]
        rows = self._rows()
        colors = [_CHANGE_COLOR[row[0]] for row in rows] if color else None
        return _text_table(header, rows, width, colors) + "\n" + self.summary()

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        return f"<Comparison {self.summary()}>"

    def print(self, file: Any = None) -> None:
        """Print the table (to ``file``, standard output by default), in colour on a
        terminal."""
        out = _output(file)
        out.write(self.table(terminal_width(out), color=wants_color(out)) + "\n")

    def _repr_html_(self) -> str:
        colors = {"better": "#d7f5dd", "worse": "#fbdada", "same": "#ffffff",
                  "new": "#e6eefc", "gone": "#eeeeee"}  # fmt: skip
        header = ["change", "case", "baseline", "candidate", "score Δ", "cost Δ", "notes"]
        rows = [_html_row(colors[row[0]], row) for row in self._rows()]
        return _html_table(self.summary(), header, rows)

    def to_dict(self) -> dict[str, Any]:
        """As JSON data."""
        return {
            "baseline": self.baseline.name,
            "candidate": self.candidate.name,
            "pass_rate_delta": self.pass_rate_delta,
            "score_delta": self.score_delta,
            "cost_delta": self.cost_delta,
            "cases": [c.to_dict() for c in self.changes],
        }


_ORDER = {"worse": 0, "better": 1, "new": 2, "gone": 3, "same": 4}
_CHANGE_COLOR = {"worse": "31", "better": "32", "new": "34", "gone": "90", "same": "0"}


# --- tables -----------------------------------------------------------------------------------


def _text_table(
    header: list[str], rows: list[list[str]], width: int | None, colors: list[str] | None = None
) -> str:
    """A plain table; the last column is cut to fit ``width`` (when given)."""
    cells = [[_one_line(cell) for cell in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h)
              for i, h in enumerate(header)]  # fmt: skip
    if width is not None:
        fixed = sum(widths[:-1]) + 2 * (len(header) - 1)
        widths[-1] = max(10, min(widths[-1], width - fixed))
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for index, row in enumerate(cells):
        row = row[:-1] + [_cut(row[-1], widths[-1])]
        line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        if colors is not None:
            line = f"\x1b[{colors[index]}m{line}\x1b[0m"
        lines.append(line)
    return "\n".join(lines)


def money(amount: float, sign: bool = False) -> str:
    """US dollars to four places, or to six below a cent (a replayed or small run costs
    fractions of a cent, which four places would show as nothing)."""
    places = 4 if abs(amount) >= 0.01 or amount == 0 else 6
    text = f"{abs(amount):.{places}f}"
    prefix = ("+" if amount >= 0 else "-") if sign else ("-" if amount < 0 else "")
    return f"{prefix}${text}"


def _output(file: Any) -> Any:
    import sys

    return file if file is not None else sys.stdout


def _is_tty(out: Any) -> bool:
    return bool(getattr(out, "isatty", lambda: False)())


def wants_color(out: Any) -> bool:
    """Whether to colour what goes to ``out``: on a terminal, unless ``NO_COLOR`` is set."""
    return _is_tty(out) and not os.environ.get("NO_COLOR")


def terminal_width(out: Any) -> int | None:
    """The width of the terminal ``out`` writes to, ``None`` when it is not one (a log keeps
    whole lines)."""
    return shutil.get_terminal_size().columns if _is_tty(out) else None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _html_row(background: str, cells: list[str]) -> str:
    tds = "".join(f"<td>{html.escape(_one_line(c))}</td>" for c in cells)
    return f'<tr style="background:{background}">{tds}</tr>'


def _html_table(summary: str, header: list[str], rows: list[str]) -> str:
    ths = "".join(f'<th style="text-align:left">{html.escape(h)}</th>' for h in header)
    return (
        '<div class="agentkit-eval">'
        f"<p><b>{html.escape(summary)}</b></p>"
        '<table style="border-collapse:collapse;font-size:90%">'
        f"<thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )
