"""A live evaluation on the real embedded model, judged by the same model: protocol facts only
(the run ended, the judge gave a typed verdict within its budgets), never wording."""

from __future__ import annotations

from typing import Any

from agentkit import Agent, Budgets
from agentkit.evals import Case, Dataset, LLMJudge, MaxTurns
from agentkit.providers import stream_simple
from tests.evals.support import SYSTEM, weather
from tests.support import NEEDS_EMBEDDED_MODEL

pytestmark = NEEDS_EMBEDDED_MODEL


def test_a_live_case_judged_on_the_embedded_model(embedded_server: Any) -> None:
    model = embedded_server.model_for("openai-completions")

    def desk() -> Agent:
        return Agent(model=model, stream_fn=stream_simple, tools=[weather], max_tokens=200,
                     system_prompt=SYSTEM + " Answer in one sentence.",
                     budgets=Budgets(max_turns=4, timeout=300))  # fmt: skip

    def judge() -> Agent:
        return Agent(model=model, stream_fn=stream_simple, max_tokens=300)

    dataset = Dataset(
        [Case("oslo", "What is the weather in Oslo?")],
        evaluators=[LLMJudge("The answer says what the weather is.", include_input=True),
                    MaxTurns(4)],  # fmt: skip
    )
    report = dataset.run(desk, mode="live", judge=judge, concurrency=1, progress=False)
    result = report["oslo"]
    assert result.stop_reason in ("stop", "budget"), result.error
    assert result.turns >= 1 and result.usage.output > 0
    judged, turns = result.evaluations
    assert judged.error is None, judged.error
    assert isinstance(judged.value, bool) and judged.reason
    assert result.judge_usage.requests >= 1
    assert turns.name == "MaxTurns"
    assert result.status in ("passed", "failed")
