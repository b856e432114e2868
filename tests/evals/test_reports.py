"""Reports: the terminal table, the notebook's HTML (escaped), JSON that round-trips, and the
comparison of a baseline with a candidate."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from agentkit.evals import CaseResult, Evaluation, Report
from agentkit.evals.replay import Divergence
from agentkit.results import RunUsage
from agentkit.types import Cost


def result(name: str, status: str, score: float | None = None, cost: float = 0.0,
           **extra: object) -> CaseResult:  # fmt: skip
    value = score if score not in (0.0, 1.0) else bool(score)  # an assertion, or a score
    evaluations = [] if score is None else [Evaluation("check", value, "because")]
    usage = RunUsage(total_tokens=100, cost=Cost(total=cost))
    return CaseResult(name, status, evaluations=evaluations, usage=usage, **extra)  # type: ignore[arg-type]


def baseline() -> Report:
    return Report("baseline", "replay", [
        result("steady", "passed", 1.0, 0.01),
        result("fixed", "failed", 0.0, 0.02),
        result("broken", "passed", 1.0, 0.01),
        result("gone", "passed", 1.0),
        result("scored", "passed", 0.5),
    ], duration=2.0)  # fmt: skip


def candidate() -> Report:
    return Report("candidate", "replay", [
        result("steady", "passed", 1.0, 0.005),
        result("fixed", "passed", 1.0, 0.02),
        result("broken", "diverged", None, 0.01,
               divergence=Divergence(2, "tool_result", "weather now returns 'x'")),
        result("scored", "passed", 0.75),
        result("new", "error", None, error="RuntimeError: boom"),
    ], duration=1.0)  # fmt: skip


def test_the_table_shows_every_case_and_a_summary() -> None:
    text = candidate().table(width=120)
    lines = text.splitlines()
    assert lines[0].split() == ["status", "case", "score", "turns", "tokens", "cost", "time",
                                "notes"]  # fmt: skip
    assert "⇄ diverged  broken" in text and "diverged at request 2: weather now returns 'x'" in text
    assert "! error     new" in text and "RuntimeError: boom" in text
    assert lines[-1].startswith("candidate (replay): 5 cases: 3 passed, 1 diverged, 1 error")
    assert "pass rate 60%" in lines[-1] and "$0.0350" in lines[-1]
    narrow = candidate().table(width=75)  # the notes are cut to fit
    assert all(len(line) <= 75 for line in narrow.splitlines()[:-1])
    assert "…" in narrow
    assert "\x1b[32m" in candidate().table(color=True)


def test_the_html_is_escaped() -> None:
    report = Report("<b>bold</b>", "live", [
        result("<script>alert(1)</script>", "failed", 0.0, answer="<img src=x onerror=alert(1)>"),
    ])  # fmt: skip
    page = report._repr_html_()
    assert "<script>" not in page and "<img" not in page and "<b>bold" not in page
    assert html.escape("<script>alert(1)</script>") in page
    assert "because" in page  # the failed check's reason


def test_json_round_trips(tmp_path: Path) -> None:
    report = candidate()
    again = Report.load(report.save(tmp_path / "report.json"))
    assert again.to_dict() == report.to_dict()
    assert again["broken"].divergence == Divergence(2, "tool_result", "weather now returns 'x'")
    data = json.loads(report.to_json())
    assert data["counts"]["passed"] == 3 and data["pass_rate"] == 0.6
    with pytest.raises(ValueError, match="not an evaluation report"):
        Report.from_json('{"name": "x"}')
    with pytest.raises(ValueError, match="not JSON"):
        Report.from_json("{")


def test_a_comparison_names_what_got_better_and_worse() -> None:
    comparison = candidate().compare(baseline())
    changes = {c.name: c.change for c in comparison.changes}
    assert changes == {"steady": "same", "fixed": "better", "broken": "worse", "scored": "better",
                       "new": "new", "gone": "gone"}  # fmt: skip
    assert [c.name for c in comparison.worse] == ["broken"]
    steady = next(c for c in comparison.changes if c.name == "steady")
    assert steady.cost_delta == pytest.approx(-0.005) and steady.score_delta == 0.0
    assert comparison.pass_rate_delta == pytest.approx(0.6 - 0.8)
    assert comparison.cost_delta == pytest.approx(0.035 - 0.04)
    table = comparison.table(width=120).splitlines()
    assert table[2].split()[:2] == ["worse", "broken"]  # the regressions first
    assert "1 worse" in table[-1] and "pass rate 80% → 60% (-20 pts)" in table[-1]
    assert "worse" in comparison._repr_html_()
    assert comparison.to_dict()["cases"][0]["name"] == "steady"


def test_thresholds() -> None:
    report = candidate()
    assert report.meets(0.6) and not report.meets(0.61)
    assert report.score == pytest.approx((1 + 1 + 0 + 0.75 + 0) / 5)  # errors score 0
    assert report.meets(min_score=0.55) and not report.meets(min_score=0.56)
    assert not Report("empty", "live", []).meets(0.0)
    interrupted = candidate()
    interrupted.interrupted = True
    assert not interrupted.meets(0.0)
