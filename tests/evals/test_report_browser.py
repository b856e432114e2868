"""A report's and a comparison's HTML in a real browser (chromium): what a model or a case
name holds shows as text and never runs."""

from __future__ import annotations

import pytest

from agentkit.evals import CaseResult, Evaluation, Report
from tests.ui.browser import needs_browser, not_pwned, open_page

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


@pytest.mark.browser
@needs_browser
def test_hostile_text_in_a_report_shows_as_text() -> None:
    result = CaseResult(HOSTILE, "failed", answer=HOSTILE,
                        evaluations=[Evaluation("check", False, reason=HOSTILE)])  # fmt: skip
    report = Report(HOSTILE, "live", [result])
    baseline = Report("before", "live", [CaseResult(HOSTILE, "passed", answer="fine")])
    with open_page() as page:
        for markup in (report._repr_html_(), report.compare(baseline)._repr_html_()):
            page.set_content(f"<html><body>{markup}</body></html>")
            not_pwned(page)
            assert page.locator("img").count() == 0 and page.locator("script").count() == 0
            assert HOSTILE in page.inner_text("table")
