"""``agentkit eval``: build a dataset from sessions, run it against ``module:factory``, print
the report, compare it with a saved one, and exit non-zero under the threshold."""

from __future__ import annotations

import io
import json
import signal
import threading
from pathlib import Path

import pytest

from agentkit.cli import main
from tests.evals.support import record_sessions

APP = "tests.evals.desk_app"


def agentkit(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path / 'sessions.db'}"
    record_sessions(url, 3)
    return url


def test_build_run_save_and_compare(tmp_path: Path, store: str) -> None:
    cases = tmp_path / "cases.yaml"
    code, out, err = agentkit("eval", str(cases), "--from-sessions", "--store", store,
                              "--tool", "weather")  # fmt: skip
    assert code == 0 and out == ""
    assert f"wrote 3 cases to {cases}" in err

    baseline = tmp_path / "baseline.json"
    code, out, err = agentkit("eval", str(cases), "--agent", f"{APP}:make_agent", "--mode",
                              "replay", "--evaluator", "EqualsExpected", "--evaluator",
                              '{"ToolCalled": "weather"}', "--save", str(baseline),
                              "--name", "desk v1")  # fmt: skip
    assert code == 0, err
    assert "desk v1 (replay): 3 cases: 3 passed" in out
    assert json.loads(baseline.read_text())["pass_rate"] == 1.0

    code, out, err = agentkit("eval", str(cases), "--agent", f"{APP}:make_colder_agent",
                              "--mode", "replay", "--compare", str(baseline))  # fmt: skip
    assert code == 1
    assert "cases vs desk v1" in out  # unnamed, a report is named after its dataset
    assert "3 diverged" in out and "now returns 'freezing, -20 C'" in out
    assert "3 worse" in out and "pass rate 100% → 0%" in out
    assert "below the threshold: pass rate 0% (needs 100%)" in err

    code, out, _ = agentkit("eval", str(cases), "--agent", f"{APP}:make_colder_agent",
                            "--mode", "replay", "--min-pass-rate", "0", "--json")  # fmt: skip
    assert code == 0
    assert json.loads(out)["counts"]["diverged"] == 3


def test_build_and_run_in_one_go_with_a_judge(tmp_path: Path, store: str) -> None:
    cases = tmp_path / "cases.json"
    code, out, err = agentkit(
        "eval", str(cases), "--from-sessions", "--store", store, "--per", "session",
        "--agent", f"{APP}:make_agent", "--mode", "replay", "--judge", f"{APP}:make_judge",
        "--evaluator", '{"LLMJudge": "The answers are polite."}', "--min-score", "0.9",
    )  # fmt: skip
    assert code == 0, err
    assert "3 passed" in out and json.loads(cases.read_text())["name"] == "cases"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--mode", "replay"], "--agent MODULE:FACTORY is needed"),
        (["--agent", "nowhere_at_all:make"], "cannot import nowhere_at_all"),
        (["--agent", f"{APP}:missing"], "has no missing"),
        (["--agent", "no-colon"], "MODULE:NAME"),
        (["--agent", f"{APP}:make_agent", "--evaluator", "Frobnicate"], "unknown evaluator"),
        (["--agent", f"{APP}:make_agent", "--compare", "/no/such/report.json"], "No such file"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, argv: list[str], problem: str) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("cases: [{name: a, inputs: hi}]\n", encoding="utf-8")
    code, _, err = agentkit("eval", str(cases), *argv)
    assert code == 2 and problem in err, err


def test_a_bad_dataset_file_exits_2(tmp_path: Path) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text("cases: [{inputs: hi, oops: 1}]\n", encoding="utf-8")
    code, _, err = agentkit("eval", str(cases), "--agent", f"{APP}:make_agent")
    assert code == 2 and "unknown field(s) oops" in err and str(cases) in err
    code, _, err = agentkit("eval", str(tmp_path / "missing.yaml"), "--agent", f"{APP}:make_agent")
    assert code == 2 and "missing.yaml" in err


def test_ctrl_c_prints_what_finished_and_exits_130(tmp_path: Path, store: str, ctrl_c: None) -> None:
    from tests.evals import desk_app

    cases = tmp_path / "cases.yaml"
    assert agentkit("eval", str(cases), "--from-sessions", "--store", store)[0] == 0
    desk_app.ENTERED.clear()
    main_thread = threading.main_thread().ident
    assert main_thread is not None

    def press_ctrl_c() -> None:
        if desk_app.ENTERED.wait(30):
            signal.pthread_kill(main_thread, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, name="test-ctrl-c")
    presser.start()
    try:
        code, out, err = agentkit("eval", str(cases), "--agent", f"{APP}:make_blocking_agent",
                                  "--mode", "replay", "--concurrency", "1")  # fmt: skip
    finally:
        presser.join(30)
    assert code == 130 and "agentkit: interrupted" in err
    assert "INTERRUPTED" in out and "- cancelled" in out


class _Terminal(io.StringIO):
    """Standard output as a terminal would be."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_report_and_the_comparison_are_in_colour(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = tmp_path / "cases.yaml"
    assert agentkit("eval", str(cases), "--from-sessions", "--store", store)[0] == 0
    baseline = tmp_path / "baseline.json"
    run = ["eval", str(cases), "--mode", "replay", "--evaluator", "EqualsExpected"]
    assert agentkit(*run, "--agent", f"{APP}:make_agent", "--save", str(baseline))[0] == 0
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = _Terminal()
    code = main([*run, "--agent", f"{APP}:make_colder_agent", "--compare", str(baseline)],
                stdout=out, stderr=io.StringIO())  # fmt: skip
    assert code == 1
    assert "\x1b[33m⇄ diverged" in out.getvalue() and "\x1b[32m✓ passed" in out.getvalue()
    assert "\x1b[31mworse" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Terminal()
    main([*run, "--agent", f"{APP}:make_colder_agent", "--compare", str(baseline)],
         stdout=plain, stderr=io.StringIO())  # fmt: skip
    assert "\x1b[" not in plain.getvalue() and "worse" in plain.getvalue()
