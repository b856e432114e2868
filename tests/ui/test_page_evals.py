"""The page's evaluation reports over real HTTP and in chromium: the reports of a folder (as
``agentkit eval --save`` and ``--json`` write them), one report case by case, and a baseline
against a candidate; reports written by real replayed runs, a case made to diverge by changing a
tool, hostile text from a model shown as text, and no file read outside the folder."""

from __future__ import annotations

import html
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from agentkit import Agent
from agentkit.evals import CaseResult, Dataset, EqualsExpected, Evaluation, Report, SameToolCalls
from agentkit.sessions import SqliteStore
from agentkit.ui import UiServer
from tests.evals.support import SYSTEM, colder_weather, desk, record_sessions
from tests.support import foreground_sigint

from ..support import WAIT
from .browser import expect, needs_browser, not_pwned, open_page, shot
from .test_page_runs import XSS

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = '<script>window.pwned = true</script><img src=x onerror="window.pwned = true">'


def _reports(folder: Path, store_path: Path) -> tuple[Report, Report]:
    """A replayed suite on the recorded tool (``main.json``), then on a changed tool whose
    first turns diverge (``branch/candidate.json``, saved a second later)."""
    with SqliteStore(store_path) as store:
        record_sessions(store, 3)
        dataset = Dataset.from_sessions(store, evaluators=[EqualsExpected(), SameToolCalls()])
    baseline = dataset.run(desk(), mode="replay", progress=False, name="main")
    candidate = dataset.run(lambda: Agent(tools=[colder_weather], system_prompt=SYSTEM),
                            mode="replay", progress=False, name="new-weather-api")  # fmt: skip
    candidate.started_at = baseline.started_at + 1
    baseline.save(folder / "main.json")
    (folder / "branch").mkdir()
    candidate.save(folder / "branch" / "candidate.json")
    return baseline, candidate


def _hostile_report() -> Report:
    """A report whose every text came from a model or a user: names, answers, reasons."""
    cases = [
        CaseResult(name=f"case {index} {text}", status="failed", answer=text,
                   evaluations=[Evaluation("judge " + text, False, reason=text)],
                   error=None, metadata={"note": text})  # fmt: skip
        for index, text in enumerate(XSS)
    ]
    return Report(name=HOSTILE, mode="live", cases=cases, started_at=time.time() - 3600)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    reports.mkdir()
    return reports


@pytest.fixture
def evals_server(tmp_path: Path, folder: Path) -> Iterator[UiServer]:
    _reports(folder, tmp_path / "sessions.db")
    with SqliteStore(tmp_path / "page.db") as store, UiServer(store, reports=folder) as server:
        yield server


def _signed_in(server: UiServer) -> tuple[requests.Session, str]:
    client = requests.Session()
    assert client.get(server.url, timeout=WAIT).status_code == 200
    return client, server.url.split("?")[0].rstrip("/")


def _attributes(page: str, name: str) -> list[str]:
    """The values of attribute ``name`` in ``page``, in order."""
    return [part.split('"')[0] for part in page.split(f'{name}="')[1:]]


# --- over HTTP ----------------------------------------------------------------------------------


def test_the_list_shows_each_report_newest_first_and_skips_other_json(
    evals_server: UiServer, folder: Path
) -> None:
    (folder / "package.json").write_text('{"name": "not a report"}')
    (folder / "broken.json").write_text('{"mode": "replay", "cases": [{"status": "passed"}]}')
    (folder / "cut.json").write_text('{"mode": "replay", "cas')
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "old.json").write_text((folder / "main.json").read_text())
    client, base = _signed_in(evals_server)
    page = client.get(base + "/evals", timeout=WAIT).text
    rows = _attributes(page, "data-report")
    assert rows == ["branch/candidate.json", "main.json"]  # newest first, none hidden
    assert "new-weather-api" in page and "50%" in page and "3 diverged" in page
    assert 'data-problem="broken.json"' in page and "not an evaluation report" in page
    assert 'data-problem="cut.json"' in page and "not JSON" in page
    assert "package.json" not in page
    # the comparison offered first: the newest against the one before it
    assert '<option value="main.json" selected>' in page
    assert '<option value="branch/candidate.json" selected>' in page
    assert ">Evaluations</a>" in client.get(base + "/", timeout=WAIT).text  # in the nav


def test_a_report_shows_its_cases_verdicts_divergences_and_figures(
    evals_server: UiServer,
) -> None:
    client, base = _signed_in(evals_server)
    page = client.get(base + "/evals/report/branch/candidate.json", timeout=WAIT).text
    assert page.count('data-case="') == 6
    assert page.count('<span class="badge eval-diverged" data-status="diverged">') == 3 * 2
    assert "Diverged at request 2" in page and "tool_result" in page
    assert "weather (call_1) now returns &#39;freezing, -20 C&#39;" in page
    assert "the recording had &#39;snowy, -3 C&#39;" in page
    assert "$0.000084" in page and "105" in page  # the report's cost and tokens
    assert "<code>EqualsExpected</code>" in page and "<code>SameToolCalls</code>" in page
    assert "It is sunny, 21 C in Lisbon.</pre>" not in page  # the divergence stopped the run
    assert "You&#39;re welcome!" in page  # the second turns passed and answered
    diverged = client.get(base + "/evals/report/branch/candidate.json?status=diverged",
                          timeout=WAIT).text  # fmt: skip
    assert diverged.count('data-case="') == 3 and "#2" not in diverged.split("<h2>Cases")[0]


def test_a_failed_case_shows_each_evaluators_reason(evals_server: UiServer, folder: Path) -> None:
    result = CaseResult(
        name="rubric", status="failed", answer="It rains.",
        evaluations=[Evaluation("Contains", True),
                     Evaluation("LLMJudge", False, reason="It does not name the city."),
                     Evaluation("MaxCost", False, error="JudgeError: no verdict")],
    )  # fmt: skip
    Report(name="judged", mode="live", cases=[result]).save(folder / "judged.json")
    client, base = _signed_in(evals_server)
    page = client.get(base + "/evals/report/judged.json", timeout=WAIT).text
    assert "It does not name the city." in page and "JudgeError: no verdict" in page
    assert '<tr class="failed"><td><code>LLMJudge</code></td><td>fail</td>' in page
    assert '<tr class="ok"><td><code>Contains</code></td><td>pass</td>' in page
    assert '<tr class="failed"><td><code>MaxCost</code></td><td>error</td>' in page


def test_the_comparison_puts_the_cases_that_got_worse_first_with_the_deltas(
    evals_server: UiServer,
) -> None:
    client, base = _signed_in(evals_server)
    page = client.get(
        base + "/evals/compare",
        params={"baseline": "main.json", "candidate": "branch/candidate.json"},
        timeout=WAIT,
    ).text
    changes = _attributes(page, "data-change")
    assert changes[:2] == ["worse", "same"]  # the counts: 3 worse, 3 same
    rows = changes[2:]
    assert rows == ["worse"] * 3 + ["same"] * 3
    assert "100% → 50%" in page and "-50 pts" in page
    assert '<span class="delta down">-0.50</span>' in page  # the score fell
    assert '<span class="delta up">-$0.000068</span>' in page  # the cost fell: better
    assert "diverged at request 2" in page  # what happened to a case that got worse
    assert 'href="/evals/report/main.json#case-0"' in page
    back = client.get(
        base + "/evals/compare",
        params={"baseline": "branch/candidate.json", "candidate": "main.json"},
        timeout=WAIT,
    ).text
    assert _attributes(back, "data-change")[2:] == ["better"] * 3 + ["same"] * 3
    assert "was:" in back  # a case that got better says what was wrong before


BROKEN = {
    "a-case-is-a-number": {"cases": [1]},
    "no-status": {"cases": [{"name": "x"}]},
    "unknown-status": {"cases": [{"name": "x", "status": "great"}]},
    "slow": {"cases": [{"name": "x", "status": "passed", "duration": "slow"}]},
    "bad-usage": {"cases": [{"name": "x", "status": "passed", "usage": {"input": "many"}}]},
    "bad-verdict": {"cases": [{"name": "x", "status": "failed",
                               "evaluations": [{"name": "j", "value": "yes"}]}]},
    "odd-verdict": {"cases": [{"name": "x", "status": "failed",
                               "evaluations": [{"name": "j", "value": 0, "colour": "red"}]}]},
    "bad-call": {"cases": [{"name": "x", "status": "passed", "tool_calls": [{"id": "1"}]}]},
    "bad-divergence": {"cases": [{"name": "x", "status": "diverged", "divergence": "here"}]},
    "cases-not-a-list": {"cases": 7},
    "started-when": {"cases": [], "started_at": "yesterday"},
}  # fmt: skip
"""Reports as a hand or another tool might have written them: each is listed as a problem."""


def test_a_malformed_report_is_listed_with_its_problem_and_the_others_still_show(
    evals_server: UiServer, folder: Path
) -> None:
    for name, fields in BROKEN.items():
        (folder / f"{name}.json").write_text(json.dumps({"name": name, "mode": "live"} | fields))
    client, base = _signed_in(evals_server)
    listing = client.get(base + "/evals", timeout=WAIT)
    assert listing.status_code == 200
    assert sorted(_attributes(listing.text, "data-problem")) == sorted(f"{n}.json" for n in BROKEN)
    assert _attributes(listing.text, "data-report") == ["branch/candidate.json", "main.json"]
    for name in BROKEN:
        page = client.get(base + f"/evals/report/{name}.json", timeout=WAIT)
        assert page.status_code == 404 and "not an evaluation report" in page.text, name
        assert Path(folder / f"{name}.json").exists()  # nothing is lost


def test_a_report_saved_as_agentkit_eval_json_prints_it_is_read(
    evals_server: UiServer, folder: Path
) -> None:
    main = Report.load(folder / "main.json")
    data = main.to_dict() | {"comparison": main.compare(main).to_dict()}
    (folder / "printed.json").write_text(json.dumps(data))
    client, base = _signed_in(evals_server)
    assert 'data-report="printed.json"' in client.get(base + "/evals", timeout=WAIT).text


def test_a_rewritten_report_is_read_again(evals_server: UiServer, folder: Path) -> None:
    client, base = _signed_in(evals_server)
    assert "main" in client.get(base + "/evals/report/main.json", timeout=WAIT).text
    report = Report.load(folder / "main.json")
    report.name = "main-rerun"
    report.cases = report.cases[:1]
    report.save(folder / "main.json")
    os.utime(folder / "main.json", ns=(time.time_ns(), time.time_ns() + 10**9))
    page = client.get(base + "/evals/report/main.json", timeout=WAIT).text
    assert "main-rerun" in page and page.count('data-case="') == 1


def test_no_file_outside_the_folder_is_read(
    evals_server: UiServer, folder: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.json"
    Report.load(folder / "main.json").save(secret)  # a report, but outside the folder
    (folder / "link.json").symlink_to(secret)
    client, base = _signed_in(evals_server)
    for path in ("/evals/report/../secret.json", "/evals/report/%2e%2e/secret.json",
                 "/evals/report/..%2fsecret.json", f"/evals/report/{secret}",
                 "/evals/report/link.json", "/evals/report/main", "/evals/report/nothing.json",
                 "/evals/report/%00.json"):  # fmt: skip
        response = client.get(base + path, timeout=WAIT)
        assert response.status_code == 404, path
    assert 'data-report="link.json"' not in client.get(base + "/evals", timeout=WAIT).text
    compare = client.get(base + "/evals/compare", params={"baseline": "../secret.json",
                         "candidate": "main.json"}, timeout=WAIT)  # fmt: skip
    assert compare.status_code == 404
    assert client.get(base + "/evals/compare?baseline=main.json", timeout=WAIT).status_code == 400


def test_the_reports_need_the_launch_secret_and_the_own_host(evals_server: UiServer) -> None:
    base = evals_server.url.split("?")[0].rstrip("/")
    for path in ("/evals", "/evals/report/main.json", "/static/evals.css",
                 "/evals/compare?baseline=main.json&candidate=main.json"):  # fmt: skip
        assert requests.get(base + path, timeout=WAIT).status_code == 403, path
    client, _ = _signed_in(evals_server)
    rebound = client.get(base + "/evals", headers={"Host": "attacker.example"}, timeout=WAIT)
    assert rebound.status_code == 403
    page = client.get(base + "/evals/report/main.json", timeout=WAIT)
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]


def test_hostile_text_in_a_report_is_escaped(evals_server: UiServer, folder: Path) -> None:
    _hostile_report().save(folder / "hostile.json")
    client, base = _signed_in(evals_server)
    for path in ("/evals", "/evals/report/hostile.json",
                 "/evals/compare?baseline=main.json&candidate=hostile.json"):  # fmt: skip
        page = client.get(base + path, timeout=WAIT).text
        assert "<script>window.pwned" not in page and "<img src=x" not in page, path
        assert "<svg" not in page and "<iframe" not in page, path
    assert "&lt;script&gt;window.pwned = true&lt;/script&gt;" in page


def test_without_a_folder_the_page_says_how_to_give_one(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "page.db") as store, UiServer(store) as server:
        client, base = _signed_in(server)
        page = client.get(base + "/evals", timeout=WAIT)
        assert page.status_code == 200 and "agentkit ui --reports DIR" in page.text
        assert client.get(base + "/evals/report/main.json", timeout=WAIT).status_code == 404


# --- in chromium ----------------------------------------------------------------------------------


@pytest.mark.browser
@needs_browser
def test_a_reader_goes_from_the_list_to_a_report_and_to_the_comparison(
    evals_server: UiServer, folder: Path
) -> None:
    _hostile_report().save(folder / "hostile.json")
    with open_page() as page:
        page.goto(evals_server.url)
        page.get_by_role("link", name="Evaluations").click()
        expect(page.locator("tr[data-report]")).to_have_count(3)
        shot(page, "evals-list")
        page.get_by_role("link", name="branch/candidate.json").click()
        expect(page.locator("h1")).to_contain_text("new-weather-api")
        expect(page.locator("tr[data-case]")).to_have_count(6)
        first = page.locator("details.eval-case").first
        expect(first.locator(".divergence")).to_be_visible()  # a failure opens by itself
        expect(first.locator(".divergence")).to_contain_text("now returns 'freezing, -20 C'")
        expect(page.locator("details.eval-case-passed .answer").first).to_be_hidden()
        page.get_by_role("link", name="3 diverged").click()
        expect(page.locator("tr[data-case]")).to_have_count(3)
        shot(page, "evals-report")
        page.select_option("select[name=baseline]", "main.json")
        page.get_by_role("button", name="Compare").click()
        expect(page.locator("h1")).to_contain_text("branch/candidate.json vs main.json")
        expect(page.locator("tr[data-change=worse]")).to_have_count(3)
        expect(page.locator("tr[data-change]").first).to_have_attribute("data-change", "worse")
        expect(page.locator(".delta.down").first).to_have_text("-50 pts")
        shot(page, "evals-compare")
        page.locator("tr[data-change=worse] td:nth-child(3) a").first.click()
        expect(page).to_have_url(f"{evals_server.url.split('?')[0]}evals/report/main.json#case-0")
        page.goto(evals_server.url.split("?")[0] + "evals/report/hostile.json")
        expect(page.locator("details.eval-case")).to_have_count(len(XSS))
        expect(page.locator("pre.answer").first).to_have_text(XSS[0])
        expect(page.locator("h1")).to_contain_text(HOSTILE)
        not_pwned(page)
        page.goto(evals_server.url.split("?")[0] + "evals/compare?baseline=main.json"
                  "&candidate=hostile.json")  # fmt: skip
        expect(page.locator("tr[data-change=new]")).to_have_count(len(XSS))
        not_pwned(page)


# --- the command ------------------------------------------------------------------------------


def test_the_command_refuses_a_reports_folder_that_is_not_there(tmp_path: Path) -> None:
    from agentkit import cli

    err = io.StringIO()
    store = tmp_path / "sessions.db"
    code = cli.main(["ui", "--store", str(store), "--reports", str(tmp_path / "typo")],
                    stdout=io.StringIO(), stderr=err)  # fmt: skip
    assert code == 2 and "--reports: no folder" in err.getvalue() and "typo" in err.getvalue()
    assert not store.exists()  # nothing opened


@pytest.mark.processes
def test_the_command_serves_the_reports_of_its_folder(tmp_path: Path, folder: Path) -> None:
    _reports(folder, tmp_path / "sessions.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    main = "from agentkit.cli import console_main; console_main()"
    command = [sys.executable, "-c", main, "ui", "--store", str(tmp_path / "page.db"),
               "--agent", "tests.ui.factory:build", "--reports", str(folder)]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=foreground_sigint,  # Ctrl-C reaches it even under `pytest &`
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(4)]
        assert f"evaluation reports in {folder}" in "".join(lines)
        url = next(word for line in lines for word in line.split() if word.startswith("http://"))
        client = requests.Session()
        assert client.get(url, timeout=WAIT).status_code == 200
        page = client.get(url.split("?")[0] + "evals", timeout=WAIT).text
        assert _attributes(page, "data-report") == ["branch/candidate.json", "main.json"]
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=WAIT * 4)
    assert process.returncode == 0, err


def test_reports_with_odd_file_names_are_linked_and_escaped(
    evals_server: UiServer, folder: Path
) -> None:
    odd = ["we ird #1?.json", "<b onclick=x>bold.json", "100% done.json", "é&ü.json"]
    for name in odd:
        Report.load(folder / "main.json").save(folder / name)
    client, base = _signed_in(evals_server)
    listing = client.get(base + "/evals", timeout=WAIT).text
    assert "<b onclick" not in listing and "&lt;b onclick=x&gt;bold.json" in listing
    for name in odd:
        href = listing.split(f'">{html.escape(name)}</a>')[0].rsplit('href="', 1)[1]
        page = client.get(base + html.unescape(href), timeout=WAIT)
        assert page.status_code == 200 and page.text.count('data-case="') == 6, name
        compared = client.get(base + "/evals/compare", timeout=WAIT,
                              params={"baseline": name, "candidate": "main.json"})  # fmt: skip
        assert compared.status_code == 200 and compared.text.count('data-change="same"') == 7


def test_a_long_answer_and_a_long_tool_result_are_folded(
    evals_server: UiServer, folder: Path
) -> None:
    from agentkit.evals import ToolCallRecord
    from agentkit.ui.render import PREVIEW_CHARS, SHOWN_CHARS

    long = "".join(f"line {n}\n" for n in range(30_000))
    result = CaseResult(name="long", status="passed", answer=long,
                        tool_calls=[ToolCallRecord("c1", "read", {"path": "big"}, long)])  # fmt: skip
    Report(name="long", mode="live", cases=[result]).save(folder / "long.json")
    client, base = _signed_in(evals_server)
    page = client.get(base + "/evals/report/long.json", timeout=WAIT).text
    assert page.count(f"show all · {len(long):,} characters") == 2
    assert page.count("more characters are not shown here; the report's file keeps") == 2
    assert long[:PREVIEW_CHARS] in page and long[:SHOWN_CHARS] in page
    assert long[SHOWN_CHARS:][:50] not in page  # the file keeps the rest
    assert len(page) < 4 * SHOWN_CHARS + 20_000


def test_a_pipe_or_a_folder_named_like_a_report_is_not_read(
    evals_server: UiServer, folder: Path
) -> None:
    os.mkfifo(folder / "pipe.json")  # reading it would wait for a writer forever
    (folder / "folder.json").mkdir()
    client, base = _signed_in(evals_server)
    listing = client.get(base + "/evals", timeout=WAIT)
    assert listing.status_code == 200
    assert _attributes(listing.text, "data-report") == ["branch/candidate.json", "main.json"]
    for name in ("pipe.json", "folder.json"):
        assert client.get(base + f"/evals/report/{name}", timeout=WAIT).status_code == 404
