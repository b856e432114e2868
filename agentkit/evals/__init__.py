"""Evaluations: turn real sessions (or cases written by hand) into a regression suite.

Build a :class:`Dataset` from recorded sessions (:meth:`Dataset.from_sessions`), from a YAML
or JSON file in the pydantic-evals format (:meth:`Dataset.from_file`) or in code; judge it with
evaluators (the answer, the typed output, the trajectory, the budgets, a model's rubric, or
your own function); run it live against a model or replayed from the recordings
(:meth:`Dataset.run`); read the :class:`Report` in a terminal, a notebook or as JSON, and
compare two of them (:meth:`Report.compare`). See docs/evals.md.

``import agentkit`` does not load this package, and ``import agentkit.evals`` loads none of its
modules: each loads when one of its names is first used.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .cases import Case, case_filter
    from .dataset import Dataset
    from .evaluators import (
        CaseRun,
        Contains,
        Equals,
        EqualsExpected,
        Evaluation,
        Evaluator,
        FunctionEvaluator,
        MaxCost,
        MaxDuration,
        MaxTokens,
        MaxToolCalls,
        MaxTurns,
        SameToolCalls,
        ToolCalled,
        ToolNotCalled,
        ToolOrder,
    )
    from .judge import JudgeError, LLMJudge, Verdict
    from .recording import Divergence, Recording, ToolCallRecord, Turn
    from .replay import Replay
    from .report import CaseChange, CaseResult, Comparison, Report
    from .runner import EvalInterrupted, arun_dataset, run_dataset
    from .sessions import cases_from_messages, cases_from_sessions, session_tags, tag_session

_HOME = {
    "agentkit.evals.cases": ("Case", "case_filter"),
    "agentkit.evals.dataset": ("Dataset",),
    "agentkit.evals.evaluators": (
        "CaseRun", "Contains", "Equals", "EqualsExpected", "Evaluation", "Evaluator",
        "FunctionEvaluator", "MaxCost", "MaxDuration", "MaxTokens", "MaxToolCalls", "MaxTurns",
        "SameToolCalls", "ToolCalled", "ToolNotCalled", "ToolOrder",
    ),
    "agentkit.evals.judge": ("JudgeError", "LLMJudge", "Verdict"),
    "agentkit.evals.recording": ("Divergence", "Recording", "ToolCallRecord", "Turn"),
    "agentkit.evals.replay": ("Replay",),
    "agentkit.evals.report": ("CaseChange", "CaseResult", "Comparison", "Report"),
    "agentkit.evals.runner": ("EvalInterrupted", "arun_dataset", "run_dataset"),
    "agentkit.evals.sessions": (
        "cases_from_messages", "cases_from_sessions", "session_tags", "tag_session",
    ),
}  # fmt: skip
"""Each public name's module: loaded on first use, so that the pytest plugin (a module of this
package, imported by every pytest run) loads none of them until ``--eval`` is given."""

__getattr__ = lazy_names("agentkit.evals", _HOME, globals())

__all__ = [
    "Case",
    "CaseChange",
    "CaseResult",
    "CaseRun",
    "Comparison",
    "Contains",
    "Dataset",
    "Divergence",
    "Equals",
    "EqualsExpected",
    "EvalInterrupted",
    "Evaluation",
    "Evaluator",
    "FunctionEvaluator",
    "JudgeError",
    "LLMJudge",
    "MaxCost",
    "MaxDuration",
    "MaxTokens",
    "MaxToolCalls",
    "MaxTurns",
    "Recording",
    "Replay",
    "Report",
    "SameToolCalls",
    "ToolCallRecord",
    "ToolCalled",
    "ToolNotCalled",
    "ToolOrder",
    "Turn",
    "Verdict",
    "arun_dataset",
    "case_filter",
    "cases_from_messages",
    "cases_from_sessions",
    "run_dataset",
    "session_tags",
    "tag_session",
]
