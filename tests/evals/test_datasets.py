"""Datasets: from sessions written by real runs (SQLite, PostgreSQL, Redis, a JSONL export),
filtered; from files in the pydantic-evals format, round-tripped against the real package;
from code; and bad input named clearly."""

from __future__ import annotations

import io
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import Agent, UserMessage
from agentkit.evals import (
    Case,
    Contains,
    Dataset,
    EqualsExpected,
    LLMJudge,
    MaxDuration,
    MaxToolCalls,
    SameToolCalls,
    ToolCalled,
    tag_session,
)
from agentkit.sessions import Session, open_store
from agentkit.testing import ScriptedModel, reply
from tests.evals.support import PRICED, SYSTEM, record_session, record_sessions


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store of each kind: a fresh SQLite file, or the suite's real servers."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'sessions.db'}"
    return str(request.getfixturevalue(f"{request.param}_server").url)


def test_cases_from_sessions_recorded_by_real_runs(store_url: str) -> None:
    prefix = f"desk-{uuid.uuid4().hex[:8]}"
    record_sessions(store_url, 3, prefix)
    dataset = Dataset.from_sessions(store_url, sessions=[f"{prefix}-*"])
    assert [c.name for c in dataset] == [f"{prefix}-{i}#{t}" for i in range(3) for t in (1, 2)]

    first = dataset[f"{prefix}-0#1"]
    assert first.turns == ["What is the weather in Oslo?"] and first.history == []
    assert first.expected_output == "It is snowy, -3 C in Oslo."
    recording = first.recording
    assert recording is not None and recording.system_prompt == SYSTEM
    assert [m.role for m in recording.messages] == ["assistant", "tool_result", "assistant"]
    assert [(c.name, c.arguments, c.result) for c in recording.tool_calls] == [
        ("weather", {"city": "Oslo"}, "snowy, -3 C")
    ]
    assert recording.usage.cost.total > 0  # the recording model is priced
    assert first.metadata["session"] == f"{prefix}-0" and first.metadata["turn"] == 1
    assert first.metadata["tools"] == ["weather"] and first.metadata["stop_reason"] == "stop"

    second = dataset[f"{prefix}-0#2"]  # the later turn starts from the earlier one
    assert second.turns == ["Thanks!"]
    assert [m.role for m in second.history] == ["user", "assistant", "tool_result", "assistant"]
    assert second.expected_output == "You're welcome!" and second.metadata["tools"] == []

    whole = Dataset.from_sessions(store_url, per="session", sessions=[f"{prefix}-1"])
    (case,) = whole.cases
    assert case.name == f"{prefix}-1" and case.turns == ["What is the weather in Lisbon?", "Thanks!"]
    assert case.recording is not None
    assert [m.role for m in case.recording.messages] == [
        "assistant", "tool_result", "assistant", "user", "assistant"
    ]  # fmt: skip
    assert case.expected_output == "You're welcome!"


def test_filters_by_date_tag_stop_reason_and_tool(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    record_sessions(store, 3, "desk")
    tag_session(Session("desk-1", store), "vip", "billing")
    failed = Session("broken", store)
    failed.append(UserMessage(content="Book Rome"))
    model = ScriptedModel([reply(error="the provider is down")], model=PRICED)
    with Agent(model=model.model, stream_fn=model, session=Session("broken-2", store)) as agent:
        agent.prompt("Book Rome")

    def names(**criteria: Any) -> list[str]:
        return [c.name for c in Dataset.from_sessions(store, **criteria)]

    assert names(tags=["vip"]) == ["desk-1#1", "desk-1#2"]
    assert names(tags=["nobody"]) == []
    assert names(tools=["weather"]) == ["desk-0#1", "desk-1#1", "desk-2#1"]
    assert names(stop_reasons=["error"]) == ["broken-2#1"]  # "broken" never got an answer
    assert "broken#1" not in names()
    assert names(sessions=["desk-2"]) == ["desk-2#1", "desk-2#2"]
    tomorrow = datetime.now(timezone.utc) + timedelta(days=1)
    assert names(since=tomorrow) == []
    assert len(names(until=tomorrow)) == 7
    assert len(names(since=(tomorrow - timedelta(days=2)).isoformat())) == 7
    assert names(where=lambda case: case.metadata.get("turn") == 2) == [
        "desk-0#2", "desk-1#2", "desk-2#2"
    ]  # fmt: skip
    # the same filters work on a dataset in hand
    assert [c.name for c in Dataset.from_sessions(store).filter(tags=["billing"])] == [
        "desk-1#1", "desk-1#2"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="ISO 8601"):
        names(since="last tuesday")
    with pytest.raises(ValueError, match="invalid|tags"):
        tag_session(Session("desk-0", store), " padded ")
    store.close()


def test_a_steering_message_stays_in_the_turn_it_steered(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    session = Session("steered", store)
    session.append(
        UserMessage(content="Weather in Oslo?"),
        *_steered_turn(),
    )
    (case,) = Dataset.from_sessions(store).cases
    assert case.turns == ["Weather in Oslo?"]
    assert case.recording is not None
    assert [m.role for m in case.recording.messages] == [
        "assistant", "tool_result", "user", "assistant"
    ]  # fmt: skip


def _steered_turn() -> list[Any]:
    from agentkit.types import AssistantMessage, TextContent, ToolCall, ToolResultMessage

    call = ToolCall(id="c1", name="weather", arguments={"city": "Oslo"})
    return [
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="weather",
                          content=[TextContent(text="snowy")]),  # fmt: skip
        UserMessage(content="Actually, in Fahrenheit."),
        AssistantMessage(content=[TextContent(text="It is 27 F.")]),
    ]


class Forecast(BaseModel):
    city: str
    celsius: float


def test_typed_output_is_the_reference_when_the_type_is_given(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    model = ScriptedModel(['{"city": "Oslo", "celsius": -3}', "not json"], model=PRICED)
    with Agent(model=model.model, stream_fn=model, session=Session("typed", store)) as agent:
        agent.prompt("Forecast for Oslo", output_type=Forecast, output_retries=0)
        agent.prompt("And now?", output_retries=0)
    good, bad = Dataset.from_sessions(store, output_type=Forecast).cases
    assert good.expected_output == {"city": "Oslo", "celsius": -3.0}
    assert bad.expected_output is None and "output_error" in bad.metadata


def test_cases_from_a_jsonl_export(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    record_session(store, "exported", "Rome")
    export = tmp_path / "exported.jsonl"
    with export.open("w", encoding="utf-8") as file:
        Session("exported", store).export_jsonl(file)
    from_file = Dataset.from_sessions(export)
    from_store = Dataset.from_sessions(store)
    assert [c.to_dict() for c in from_file] == [c.to_dict() for c in from_store]


# --- files -------------------------------------------------------------------------------------


def _dataset_in_code() -> Dataset:
    return Dataset(
        [
            Case("capital", "What is the capital of France?", expected_output="Paris",
                 metadata={"topic": "geography"}, evaluators=[Contains("Paris")]),
            Case("two turns", turns=["Hello", UserMessage(content="Weather in Oslo?")],
                 evaluators=[ToolCalled("weather", {"city": "Oslo"}), MaxToolCalls(2)]),
            Case("typed", "Forecast for Rome", expected_output={"city": "Rome", "celsius": 15.0}),
        ],  # fmt: skip
        name="desk",
        evaluators=[EqualsExpected(), MaxDuration(30), LLMJudge("The answer is polite.")],
    )


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_file_round_trips(tmp_path: Path, suffix: str) -> None:
    dataset = _dataset_in_code()
    path = dataset.to_file(tmp_path / f"cases{suffix}")
    again = Dataset.from_file(path)
    assert again.to_dict() == dataset.to_dict()
    assert again.name == "desk" and [type(e) for e in again.evaluators] == [
        EqualsExpected, MaxDuration, LLMJudge
    ]  # fmt: skip
    assert again["two turns"].evaluators[0] == ToolCalled("weather", {"city": "Oslo"})


def test_a_session_dataset_round_trips_with_its_recordings(tmp_path: Path) -> None:
    store = open_store(tmp_path / "sessions.db")
    record_sessions(store, 2)
    dataset = Dataset.from_sessions(store, evaluators=[SameToolCalls()])
    again = Dataset.from_file(dataset.to_file(tmp_path / "sessions.yaml"))
    assert again.to_dict() == dataset.to_dict()
    assert again["chat-1#2"].recording == dataset["chat-1#2"].recording


def test_pydantic_evals_reads_our_file_and_we_read_its_file(tmp_path: Path) -> None:
    from dataclasses import dataclass
    from typing import Any as AnyType

    from pydantic_evals import Case as PECase
    from pydantic_evals import Dataset as PEDataset
    from pydantic_evals.evaluators import Evaluator as PEEvaluator
    from pydantic_evals.evaluators import EvaluatorContext
    from pydantic_evals.evaluators.common import (
        Contains as PEContains,
    )
    from pydantic_evals.evaluators.common import (
        EqualsExpected as PEEqualsExpected,
    )
    from pydantic_evals.evaluators.common import (
        LLMJudge as PELLMJudge,
    )
    from pydantic_evals.evaluators.common import (
        MaxDuration as PEMaxDuration,
    )

    @dataclass
    class ToolCalled(PEEvaluator[AnyType, AnyType, AnyType]):  # agentkit's, as a stand-in
        tool: str
        arguments: dict[str, AnyType] | None = None

        def evaluate(self, ctx: EvaluatorContext[AnyType, AnyType, AnyType]) -> bool:
            return True

    @dataclass
    class MaxToolCalls(PEEvaluator[AnyType, AnyType, AnyType]):
        max_calls: int

        def evaluate(self, ctx: EvaluatorContext[AnyType, AnyType, AnyType]) -> bool:
            return True

    ours = tmp_path / "ours.yaml"
    _dataset_in_code().to_file(ours)
    theirs = PEDataset[AnyType, AnyType, AnyType].from_file(
        ours, custom_evaluator_types=[ToolCalled, MaxToolCalls]
    )
    assert theirs.name == "desk"
    assert [c.name for c in theirs.cases] == ["capital", "two turns", "typed"]
    assert theirs.cases[0].inputs == "What is the capital of France?"
    assert theirs.cases[0].expected_output == "Paris"
    assert theirs.cases[2].expected_output == {"city": "Rome", "celsius": 15.0}
    assert [type(e).__name__ for e in theirs.evaluators] == [
        "EqualsExpected", "MaxDuration", "LLMJudge"
    ]  # fmt: skip
    assert theirs.evaluators[2].rubric == "The answer is polite."

    written = tmp_path / "theirs.json"
    PEDataset[AnyType, AnyType, AnyType](
        name="theirs",
        cases=[
            PECase(name="q1", inputs="What is 2 + 2?", expected_output="4",
                   metadata={"difficulty": "easy"},
                   evaluators=[PEContains(value="4", case_sensitive=False)]),  # fmt: skip
            PECase(name="q2", inputs={"prompt": "Say hi", "history": []}),
        ],
        evaluators=[PEEqualsExpected(), PEMaxDuration(seconds=5.0),
                    PELLMJudge(rubric="Correct", include_input=True)],  # fmt: skip
    ).to_file(written, schema_path=None)
    read = Dataset.from_file(written)
    assert read.name == "theirs"
    assert read["q1"].turns == ["What is 2 + 2?"] and read["q1"].expected_output == "4"
    assert read["q1"].metadata == {"difficulty": "easy"}
    assert read["q1"].evaluators == [Contains("4", case_sensitive=False)]
    assert read["q2"].turns == ["Say hi"]
    assert read.evaluators == [EqualsExpected(), MaxDuration(5.0),
                               LLMJudge("Correct", include_input=True)]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cases: [{name: a, inputs: hi, expect: x}]", "unknown field.*expect"),
        ("cases: [{name: a}]", "has no inputs"),
        ("cases: [{name: a, inputs: {question: hi}}]", "inputs is a prompt"),
        ("cases: [{name: a, inputs: hi, evaluators: [IsInstance]}]", "unknown evaluator 'IsInstance'"),
        ("cases: [{name: a, inputs: hi, evaluators: [{Contains: {nope: 1}}]}]", "bad arguments"),
        ("cases: [{name: a, inputs: hi}, {name: a, inputs: ho}]", "two cases are named 'a'"),
        ("cases: [{name: a, inputs: {turns: [{role: assistant}]}}]", "a bad message"),
        ("cases: [{name: a, inputs: hi, metadata: {recording: {messages: 3}}}]", "bad recording"),
        ("name: x", "list of 'cases'"),
        ("cases: []\nreport_evaluators: [ConfusionMatrixEvaluator]", "report evaluators"),
        ("cases: [", "not YAML"),
    ],
)
def test_a_bad_file_is_named_and_nothing_is_loaded(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem) as raised:
        Dataset.from_file(path)
    assert str(path) in str(raised.value)


def test_code_only_evaluators_and_formats_are_refused_clearly(tmp_path: Path) -> None:
    def polite(run: Any) -> bool:
        return "please" in run.answer

    dataset = Dataset([Case("a", "hi")], evaluators=[polite])
    with pytest.raises(TypeError, match="'polite' is a Python function"):
        dataset.to_file(tmp_path / "a.yaml")
    assert not (tmp_path / "a.yaml").exists()
    with pytest.raises(ValueError, match=r"\.yaml, \.yml or \.json"):
        Dataset([Case("a", "hi")]).to_file(tmp_path / "a.txt")
    with pytest.raises(ValueError, match="either prompt or turns"):
        Case("a")
    with pytest.raises(TypeError, match="a turn is a str"):
        Case("a", turns=[42])
    with pytest.raises(ValueError, match="per is"):
        Dataset.from_sessions(tmp_path / "s.db", per="day")  # type: ignore[arg-type]


def test_from_text_json_and_stdin_like_sources() -> None:
    text = '{"cases": [{"inputs": "hi"}, {"inputs": "ho"}]}'
    dataset = Dataset.from_text(text, "json")
    assert [c.name for c in dataset] == ["case 1", "case 2"]
    assert Dataset.from_text(io.StringIO("cases: [{inputs: hi}]").read()).cases[0].turns == ["hi"]
