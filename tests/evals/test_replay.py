"""Replayed runs: recorded sessions played back offline and deterministically, and every way a
replay can leave its recording reported as a divergence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import BeforeToolCallResult, set_default_stream_fn, tool
from agentkit.evals import Case, Dataset, EqualsExpected, SameToolCalls
from agentkit.sessions import SessionStore, open_store
from tests.evals.support import WEATHER, colder_weather, desk, record_sessions


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    """Three recorded sessions of the travel desk (Oslo, Lisbon, Rome), two turns each."""
    store = open_store(tmp_path / "sessions.db")
    record_sessions(store, 3)
    yield store
    store.close()


@pytest.fixture
def no_network(restore_default_stream_fn: None) -> Iterator[list[Any]]:
    """The process's default stream function refuses every request: a replay that reached a
    provider would fail. Yields the refused requests."""
    refused: list[Any] = []

    def forbidden(model: Any, context: Any, options: Any = None) -> Any:
        refused.append(model)
        raise AssertionError("a replay made a real model request")

    set_default_stream_fn(forbidden)
    yield refused


def suite(store: SessionStore, **criteria: Any) -> Dataset:
    return Dataset.from_sessions(store, evaluators=[EqualsExpected(), SameToolCalls()], **criteria)


def test_a_replay_passes_offline_and_deterministically(
    store: SessionStore, no_network: list[Any]
) -> None:
    dataset = suite(store)
    first = dataset.run(desk(), mode="replay", progress=False)
    second = dataset.run(desk(), mode="replay", progress=False)
    assert no_network == []
    assert first.counts["passed"] == 6 and first.pass_rate == 1.0
    assert first.mode == "replay"
    oslo = first["chat-0#1"]
    assert oslo.answer == "It is snowy, -3 C in Oslo." and oslo.turns == 2
    assert [(c.name, c.arguments, c.result) for c in oslo.tool_calls] == [
        ("weather", {"city": "Oslo"}, "snowy, -3 C")
    ]

    def stable(report: Any) -> list[Any]:
        return [{k: v for k, v in r.to_dict().items() if k != "duration"} for r in report]

    assert stable(first) == stable(second)
    # the recorded usage and cost, as the recording model priced them
    recorded = sum(case.recording.usage.cost.total for case in dataset)
    assert first.cost == pytest.approx(recorded) and first.cost > 0
    assert first.tokens == sum(case.recording.usage.total_tokens for case in dataset)


def test_a_changed_tool_is_a_divergence_and_stops_the_replay(
    store: SessionStore, no_network: list[Any]
) -> None:
    report = suite(store).run(desk([colder_weather]), mode="replay", progress=False)
    assert report.counts["diverged"] == 3 and report.counts["passed"] == 3
    oslo = report["chat-0#1"]
    assert oslo.status == "diverged"
    assert oslo.divergence is not None
    assert oslo.divergence.kind == "tool_result" and oslo.divergence.request == 2
    assert "weather (call_1) now returns 'freezing, -20 C'" in oslo.divergence.detail
    assert "the recording had 'snowy, -3 C'" in oslo.divergence.detail
    assert oslo.stop_reason == "error" and oslo.turns == 2  # stopped at the divergent request
    assert "diverged at request 2" in oslo.note
    assert report["chat-0#2"].status == "passed"  # its history holds the old result: unchecked


def test_continue_plays_the_recorded_reply_after_a_divergence(store: SessionStore) -> None:
    report = suite(store, sessions=["chat-1"]).run(
        desk([colder_weather]), mode="replay", on_divergence="continue", progress=False
    )
    lisbon = report["chat-1#1"]
    assert lisbon.status == "diverged" and lisbon.stop_reason == "stop"
    assert lisbon.answer == "It is sunny, 21 C in Lisbon."  # what the recording said then
    assert lisbon.tool_calls[0].result == "freezing, -20 C"  # what the tool says now


def test_a_refused_call_is_a_divergence(store: SessionStore) -> None:
    def refuse(ctx: Any, signal: Any) -> BeforeToolCallResult:
        return BeforeToolCallResult(block=True, reason="weather lookups are disabled")

    report = suite(store, sessions=["chat-2"]).run(
        desk(before_tool_call=refuse), mode="replay", progress=False
    )
    divergence = report["chat-2#1"].divergence
    assert divergence is not None and divergence.kind == "refused"
    assert "weather lookups are disabled" in divergence.detail
    assert "the recording had 'cloudy, 15 C'" in divergence.detail

    removed = suite(store, sessions=["chat-2"]).run(desk([]), mode="replay", progress=False)
    divergence = removed["chat-2#1"].divergence
    assert divergence is not None and divergence.kind == "refused"
    assert "not found" in divergence.detail


def test_a_request_the_recording_never_saw_is_a_divergence(store: SessionStore) -> None:
    from pydantic import BaseModel

    class Forecast(BaseModel):
        city: str
        celsius: float

    # The recorded answer is prose: validating it as a Forecast fails, and the run would send
    # the validation errors back to the model, a request the recording never made.
    report = suite(store, sessions=["chat-0"]).run(
        desk(output_type=Forecast, output_retries=1), mode="replay", progress=False
    )
    divergence = report["chat-0#1"].divergence
    assert divergence is not None and divergence.kind == "unrecorded_request"
    assert divergence.request == 3 and "the recording has 2" in divergence.detail


def test_a_changed_system_prompt_is_a_divergence(store: SessionStore) -> None:
    report = suite(store, sessions=["chat-0"]).run(
        desk(system_prompt="You are a pirate."), mode="replay", progress=False
    )
    divergence = report["chat-0#1"].divergence
    assert divergence is not None and divergence.kind == "system_prompt"
    assert divergence.request == 1 and "'You are a pirate.'" in divergence.detail


def test_same_result_lets_a_harmless_difference_through(store: SessionStore) -> None:
    @tool(name="weather")
    def stamped(city: str) -> str:
        """The weather, with when it was looked up.

        Args:
            city: The city's name.
        """
        return f"{WEATHER[city]} (at 12:00)"

    def ignoring_the_time(recorded: Any, now: Any) -> bool:
        return now.content[0].text.split(" (at ")[0] == recorded.content[0].text

    strict = suite(store, sessions=["chat-1"]).run(desk([stamped]), mode="replay", progress=False)
    assert strict["chat-1#1"].status == "diverged"
    lenient = suite(store, sessions=["chat-1"]).run(
        desk([stamped]), mode="replay", same_result=ignoring_the_time, progress=False
    )
    assert lenient["chat-1#1"].status == "passed"


def test_a_whole_session_replays_turn_after_turn(store: SessionStore) -> None:
    dataset = Dataset.from_sessions(store, per="session", evaluators=[EqualsExpected()])
    report = dataset.run(desk(), mode="replay", progress=False)
    assert report.pass_rate == 1.0
    rome = report["chat-2"]
    assert rome.turns == 3 and rome.answer == "You're welcome!"
    assert [m.role for m in rome.messages] == [
        "user", "assistant", "tool_result", "assistant", "user", "assistant"
    ]  # fmt: skip


def test_a_case_without_a_recording_cannot_be_replayed() -> None:
    report = Dataset([Case("hand-written", "Hello")]).run(desk(), mode="replay", progress=False)
    result = report["hand-written"]
    assert result.status == "error" and "has no recording to replay" in (result.error or "")
