"""A model-judged rubric: :class:`LLMJudge` asks a model whether a run's answer meets a rubric.

The judge is an ordinary agentkit run: its answer is typed (:class:`Verdict`, through
``output_type``, so it works on any provider and on the embedded model, whose grammar holds it
to the schema), it is aborted with the evaluation (Ctrl-C reaches it), and it runs under
budgets (``run(..., judge_budgets=...)``). What it spends is reported apart from the agent's
own cost. A judge that fails (no answer, an invalid one, a budget or an abort) gives an
evaluation with an ``error``, which makes the case's status ``"error"``: it never passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .._serialize import to_jsonable
from ..errors import JudgeError
from ._abortable import run_abortably
from .evaluators import CaseRun, Evaluation, Evaluator, EvaluatorResult

if TYPE_CHECKING:
    from ..agent import Agent

JUDGE_TEXT = """\
You grade the answer of an AI assistant against a rubric. Read the rubric, then the material \
below, and decide whether the answer meets the rubric.

<rubric>
{rubric}
</rubric>
{material}
Reply with your reason (one or two sentences), whether the answer passes, and a score from 0 \
(fails entirely) to 1 (meets the rubric fully)."""


class Verdict(BaseModel):
    """What a judge answers: its reason first (a model that explains before it decides decides
    better), then the verdict and a score."""

    reason: str
    passed: bool
    score: float = Field(ge=0.0, le=1.0)


@dataclass
class LLMJudge(Evaluator):
    """Asks a model whether the run's answer meets ``rubric``.

    The model is ``model`` (``"provider:id"`` from the catalog, with the default stream
    function) or, when it is ``None``, the agent that ``run(..., judge=factory)`` makes (any
    provider, a test model or the embedded one). ``include_input`` shows the judge the case's
    prompts, ``include_expected_output`` its reference. The evaluation is the verdict (an
    assertion), or the score with ``as_score``; its reason is the judge's.
    """

    rubric: str
    model: str | None = None
    include_input: bool = False
    include_expected_output: bool = False
    as_score: bool = False
    evaluation_name: str | None = field(default=None, kw_only=True)

    def evaluate(self, run: CaseRun) -> EvaluatorResult:
        agent = self._agent(run)
        try:
            result = run_abortably(
                agent, self.prompt(run), run.signal, output_type=Verdict, budgets=run.judge_budgets
            )
        finally:
            agent.close()
        run.judge_usage.add(result.usage)
        run.judge_usage.requests += result.usage.requests
        if result.stop_reason != "stop" or not isinstance(result.output, Verdict):
            why = result.error_message or f"the judge's run ended with {result.stop_reason!r}"
            if result.stop_reason == "budget":
                why = f"the judge reached its budget {result.budget}"
            raise JudgeError(why)
        verdict = result.output
        value: bool | float = verdict.score if self.as_score else verdict.passed
        return Evaluation(self.name, value, verdict.reason)

    def prompt(self, run: CaseRun) -> str:
        """What the judge is asked."""
        material = []
        if self.include_input:
            turns = [_text(turn) for turn in run.case.turns]
            material.append(f"<input>\n{chr(10).join(turns)}\n</input>")
        if self.include_expected_output:
            material.append(f"<expected_output>\n{_text(run.expected())}\n</expected_output>")
        material.append(f"<output>\n{_text(run.actual())}\n</output>")
        return JUDGE_TEXT.format(rubric=self.rubric, material="\n".join(material) + "\n")

    def _agent(self, run: CaseRun) -> Agent:
        if self.model is not None:
            from ..agent import Agent

            return Agent(model=self.model)
        if run.judge is None:
            raise JudgeError(
                "LLMJudge has no model: give it one (LLMJudge(rubric, model='provider:id')) or "
                "give the run a judge (run(..., judge=make_judge_agent))"
            )
        agent = run.judge()
        from ..agent import Agent

        if not isinstance(agent, Agent):
            raise JudgeError(f"the judge factory returned {agent!r}, not an Agent")
        return agent


def _text(value: Any) -> str:
    """A value as the judge reads it: text as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    content = getattr(value, "content", None)
    if content is not None and getattr(value, "role", None) == "user":
        if isinstance(content, str):
            return content
        return "".join(getattr(block, "text", "") for block in content)
    if isinstance(value, list):
        return "\n".join(_text(item) for item in value)
    return json.dumps(to_jsonable(value), ensure_ascii=False)
