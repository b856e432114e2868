"""A pytest plugin: a dataset's cases as test items, a threshold failing the run.

::

    pytest --eval cases.yaml --eval-agent myapp.agents:make_agent --eval-mode replay \\
        --eval-min-pass-rate 0.9

Each case is a test item (``cases.yaml::<case name>``; ``-k`` selects among them). The
selected cases run once, together, on the runner's threads (``--eval-concurrency``), when the
first of them runs; each item then reports its case. Without ``--eval-min-pass-rate`` a case
that does not pass fails its item; with it, such a case is an expected failure (``xfail``) and
the run fails only when the pass rate is under the threshold. The report's table ends the
terminal summary.

The plugin is registered for every pytest run where agentkit is installed (the ``pytest11``
entry point) and stays inert unless ``--eval`` is given: it adds its options and imports
nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import EvalCaseError

if TYPE_CHECKING:
    from .cases import Case
    from .dataset import Dataset
    from .report import CaseResult, Report


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("agentkit-eval", "agentkit evaluations (agentkit.evals)")
    group.addoption("--eval", action="append", default=[], metavar="DATASET", dest="eval_datasets",
                    help="run this dataset file's cases as test items (repeatable)")  # fmt: skip
    group.addoption("--eval-agent", metavar="MODULE:FACTORY",
                    help="the function that makes the agent under test")  # fmt: skip
    group.addoption("--eval-mode", choices=["live", "replay"], default="replay",
                    help="play the recordings (replay, the default) or ask the model (live)")  # fmt: skip
    group.addoption("--eval-concurrency", type=int, default=4, help="cases at once (default 4)")
    group.addoption("--eval-judge", metavar="MODULE:FACTORY",
                    help="the function that makes the agent an LLMJudge asks")  # fmt: skip
    group.addoption("--eval-min-pass-rate", type=float, default=None, metavar="RATE",
                    help="tolerate failed cases while this share of them passes")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("eval_datasets"):
        if not config.getoption("eval_agent"):
            raise pytest.UsageError("--eval needs --eval-agent MODULE:FACTORY")
        config.pluginmanager.register(EvalSession(config), "agentkit-eval-session")


class EvalSession:
    """The plugin at work (registered only with ``--eval``): it adds the items, runs the
    selected cases once, and applies the threshold."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.reports: list[Report] = []

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        for name in config.getoption("eval_datasets"):
            path = Path(name).resolve()
            collector = DatasetFile.from_parent(session, path=path)
            items.extend(collector.collect())

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        threshold = self.config.getoption("eval_min_pass_rate")
        if threshold is None or not self.reports:
            return
        if any(not report.meets(threshold) for report in self.reports):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        threshold = self.config.getoption("eval_min_pass_rate")
        for report in self.reports:
            terminalreporter.section(f"agentkit eval: {report.name}")
            terminalreporter.write_line(report.table())
            if threshold is not None and not report.meets(threshold):
                terminalreporter.write_line(
                    f"FAILED: pass rate {report.pass_rate:.0%} is under the threshold "
                    f"{threshold:.0%}"
                )


class DatasetFile(pytest.File):
    """A dataset file as a collector: one :class:`CaseItem` per case."""

    def collect(self) -> list[pytest.Item]:
        from .dataset import Dataset

        try:
            self.dataset: Dataset = Dataset.from_file(self.path)
        except (ValueError, OSError, ImportError) as exc:
            raise pytest.UsageError(f"--eval {self.path}: {exc}") from None
        self.results: dict[str, CaseResult] | None = None
        return [CaseItem.from_parent(self, name=case.name, case=case) for case in self.dataset]

    def results_for(self, session: pytest.Session) -> dict[str, CaseResult]:
        """Run the selected cases of this file (once) and return their results by name."""
        if self.results is None:
            from .dataset import Dataset
            from .loading import load_object

            config = self.config
            chosen = [i.case.name for i in session.items if isinstance(i, CaseItem)
                      and i.parent is self]  # fmt: skip
            subset = Dataset([self.dataset[n] for n in chosen], name=self.dataset.name,
                             evaluators=self.dataset.evaluators)  # fmt: skip
            judge = config.getoption("eval_judge")
            report = subset.run(
                load_object(config.getoption("eval_agent"), "agent factory"),
                mode=config.getoption("eval_mode"),
                concurrency=config.getoption("eval_concurrency"),
                judge=load_object(judge, "judge factory") if judge else None,
                progress=False,
            )
            plugin = config.pluginmanager.get_plugin("agentkit-eval-session")
            assert isinstance(plugin, EvalSession)
            plugin.reports.append(report)
            self.results = {r.name: r for r in report}
        return self.results


class CaseItem(pytest.Item):
    """One case of a dataset, as a test."""

    def __init__(self, *, case: Case, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case

    def runtest(self) -> None:
        assert isinstance(self.parent, DatasetFile)
        result = self.parent.results_for(self.session)[self.case.name]
        if result.status == "passed":
            return
        message = f"{result.status}: {result.note or result.error or 'no detail'}"
        if self.config.getoption("eval_min_pass_rate") is not None:
            pytest.xfail(message)
        raise EvalCaseError(message)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, EvalCaseError):
            return f"case {self.case.name!r} {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"eval case {self.case.name}"
