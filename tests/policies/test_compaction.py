"""Compaction as a view over an append-only transcript: the record, the view, the cut, the
threshold and overflow triggers, the strategies, agent.compact() and the events."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from agentkit import Agent, Budgets
from agentkit.compaction import (
    Compaction,
    CompactionJob,
    choose_cut,
    estimate_tokens,
    message_tokens,
)
from agentkit.errors import AgentBusyError, CompactionError, ContextOverflowError
from agentkit.events import CompactionEndEvent, CompactionStartEvent
from agentkit.testing import ScriptedModel, reply
from agentkit.transcript import (
    COMPACTION_ROLE,
    CompactionRecord,
    compacted_view,
    user_message,
)
from agentkit.types import (
    AssistantMessage,
    Context,
    Model,
    StreamOptions,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolResultMessage,
    Usage,
    role_of,
)
from tests.compaction_support import (
    SUMMARY_MARK,
    WINDOW,
    Windowed,
    agent_for,
    is_summary_request,
    pairs_whole,
)
from tests.support import roles


def assert_pairs_whole(messages: list[Any]) -> None:
    """Every tool call in ``messages`` has its result there, and every result its call."""
    assert pairs_whole(messages)


# --- the view ---------------------------------------------------------------------------------


def sample_transcript() -> list[Any]:
    call = ToolCall(id="c1", name="fetch", arguments={"page": 1})
    return [
        SystemMessage(content="SYS"),
        user_message("first"),
        AssistantMessage(content=[call], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="fetch", content=[TextContent(text="r")]),
        AssistantMessage(content=[TextContent(text="one")]),
        user_message("second"),
        AssistantMessage(content=[TextContent(text="two")]),
    ]


def test_a_transcript_without_compaction_is_its_own_view() -> None:
    messages = sample_transcript()
    assert compacted_view(messages) is messages


def test_the_view_is_system_messages_the_latest_summary_and_the_kept_messages() -> None:
    messages = sample_transcript()
    messages.append(CompactionRecord(summary="old", first_kept_index=4, index=7))
    messages.append(user_message("third"))
    messages.append(CompactionRecord(summary="S", first_kept_index=5, index=9))
    view = compacted_view(messages)
    assert roles(view) == ["system", "user", "user", "assistant", "user"]
    assert "S" in view[1].content[0].text and "old" not in view[1].content[0].text
    assert [m.content[0].text for m in view[2:]] == ["second", "two", "third"]
    assert len(messages) == 10  # the transcript keeps everything


def test_the_view_finds_the_kept_messages_after_a_leading_message_was_added() -> None:
    # A session without a system message gets the agent's one in front, in memory only.
    messages = sample_transcript()[1:]
    messages.append(CompactionRecord(summary="S", first_kept_index=4, index=6))
    view = compacted_view([SystemMessage(content="SYS"), *messages])
    assert [m.content[0].text for m in view[2:]] == ["second", "two"]
    assert view == [view[0], view[1], *compacted_view(messages)[1:]]


def test_a_record_loaded_back_as_a_dict_gives_the_same_view() -> None:
    messages = sample_transcript()
    messages.append(CompactionRecord(summary="S", first_kept_index=5, index=7))
    as_dict = [*messages[:-1], messages[-1].model_dump(mode="json")]
    assert compacted_view(as_dict) == compacted_view(messages)


# --- the cut ----------------------------------------------------------------------------------


def random_transcript(rng: random.Random) -> list[Any]:
    messages: list[Any] = [SystemMessage(content="SYS")]
    ids = 0
    for _ in range(rng.randint(1, 12)):
        messages.append(user_message("u" * rng.randint(1, 400)))
        for _ in range(rng.randint(0, 3)):
            calls = []
            for _ in range(rng.randint(1, 3)):
                ids += 1
                calls.append(ToolCall(id=f"c{ids}", name="t", arguments={}))
            messages.append(AssistantMessage(content=calls, stop_reason="tool_use"))
            for call in calls:
                messages.append(
                    ToolResultMessage(
                        tool_call_id=call.id, tool_name="t",
                        content=[TextContent(text="r" * rng.randint(1, 2000))],
                    )
                )  # fmt: skip
            if rng.random() < 0.2:
                messages.append(SystemMessage(content="", sections={"s": "x"}))
        messages.append(AssistantMessage(content=[TextContent(text="a" * rng.randint(1, 300))]))
    return messages


def test_no_cut_ever_splits_a_tool_call_from_its_result_or_drops_a_system_message() -> None:
    rng = random.Random(7)
    for _ in range(400):
        messages = random_transcript(rng)
        protect = rng.randint(1, len(messages))
        cut = choose_cut(messages, 1, protect, rng.randint(1, 3000))
        if cut is None:
            continue
        assert 1 < cut <= protect and role_of(messages[cut]) in ("user", "assistant")
        messages.append(CompactionRecord(summary="S", first_kept_index=cut, index=len(messages)))
        view = compacted_view(messages)
        assert_pairs_whole(view)
        systems = [m for m in messages if role_of(m) == "system"]
        assert [m for m in view if role_of(m) == "system"] == systems


def test_the_cut_keeps_the_newest_messages_that_fit() -> None:
    messages = sample_transcript()
    tail = sum(message_tokens(m) for m in messages[5:])
    assert choose_cut(messages, 1, len(messages), tail) == 5
    assert choose_cut(messages, 1, len(messages), tail - 1) == 6  # the newest alone
    assert choose_cut(messages, 1, 5, 1) == 5  # never past this turn's first message
    assert choose_cut(messages, 6, len(messages), 10**6) is None  # nothing left to drop


def test_the_estimate_is_the_last_reported_input_plus_what_came_after() -> None:
    messages = sample_transcript()
    messages[4].usage = Usage(input=1000, output=50)
    expected = 1050 + message_tokens(messages[5]) + message_tokens(messages[6])
    assert estimate_tokens(messages) == expected
    # after a compaction, older reports no longer describe the request
    messages.append(CompactionRecord(summary="S", first_kept_index=5, index=7))
    assert estimate_tokens(messages) < 200


# --- the threshold, over a long conversation --------------------------------------------------


def test_a_long_conversation_stays_inside_the_window_and_keeps_every_pair() -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction())
    seen: list[Any] = []
    agent.subscribe(lambda e: seen.append(e))
    for turn in range(30):
        result = agent.prompt(f"fetch page {turn}")
        assert result.stop_reason == "stop", result.error_message
    assert max(windowed.sizes) <= WINDOW
    for request in windowed.model.requests:
        if not is_summary_request(request.context):
            assert_pairs_whole(request.messages)
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    assert records and windowed.summaries == len(records)
    # the transcript is whole: 30 prompts, each with its call, result and answer
    assert roles(agent.state.messages).count("user") == 30
    assert roles(agent.state.messages).count("tool_result") == 30
    first = records[0]
    assert first.reason == "threshold" and first.strategy == "summarize"
    assert first.requests == 1 and first.usage.input > 0
    assert first.tokens_after < first.tokens_before
    kinds = [e.type for e in seen if e.type.startswith("compaction") or (
        e.type.startswith("message_") and role_of(e.message) == COMPACTION_ROLE)]  # fmt: skip
    assert kinds[:4] == ["compaction_start", "message_start", "message_end", "compaction_end"]
    start = next(e for e in seen if isinstance(e, CompactionStartEvent))
    assert start.context_window == WINDOW and start.tokens_before > 0.8 * WINDOW


def test_without_compaction_the_same_conversation_overflows() -> None:
    windowed = Windowed()
    agent = agent_for(windowed)
    for turn in range(30):
        result = agent.prompt(f"fetch page {turn}")
        if result.stop_reason == "error":
            break
    assert result.stop_reason == "error"
    assert "prompt is too long" in (result.error_message or "")


def test_the_summary_request_counts_in_the_runs_usage_and_budgets() -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction())
    results = [agent.prompt(f"fetch page {turn}") for turn in range(6)]
    compacting = [r for r in results if COMPACTION_ROLE in roles(r)]
    assert len(compacting) == 1
    assert compacting[0].usage.requests == 3  # the call, the summary, the answer
    record = next(m for m in compacting[0] if role_of(m) == COMPACTION_ROLE)
    assert compacting[0].usage.input > record.usage.input > 0
    # a run whose model only ever calls tools: the summary request is one of its max_turns
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction())
    for turn in range(3):
        agent.prompt(f"fetch page {turn}")
    windowed.always_call = True
    result = agent.prompt("fetch every page", budgets=Budgets(max_turns=5))
    assert result.stop_reason == "budget" and result.usage.requests == 5
    records = [m for m in result if role_of(m) == COMPACTION_ROLE]
    calls = [m for m in result if role_of(m) == "assistant"]
    assert records and len(calls) + sum(r.requests for r in records) == 5


def test_a_steering_message_of_the_turn_is_never_compacted_away() -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction(keep_tokens=1))
    for turn in range(4):
        agent.prompt(f"fetch page {turn}")
    agent.steer("and mind the footnotes")
    agent.prompt("fetch the last page")
    request = windowed.model.requests[-2]  # the call's request: the summary came first
    texts = [m.content[0].text for m in request.messages if role_of(m) == "user"]
    assert texts[-2:] == ["fetch the last page", "and mind the footnotes"]
    assert SUMMARY_MARK not in str(request.messages[0].content)


def test_an_abort_during_the_summary_request_ends_the_run_and_writes_no_record() -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction=Compaction())
    for turn in range(4):
        agent.prompt(f"fetch page {turn}")
    summary_started = threading.Event()

    def hanging_summary(context: Context, options: StreamOptions) -> Any:
        summary_started.set()
        return reply("partial", hang=True)

    windowed.model._script.insert(0, hanging_summary)
    before = len(agent.state.messages)
    run = agent.start("fetch one more")
    assert summary_started.wait(10)
    agent.abort()
    result = run.result(timeout=10)
    assert result.stop_reason == "aborted"
    assert COMPACTION_ROLE not in roles(agent.state.messages[before:])


# --- overflow ---------------------------------------------------------------------------------


def test_an_overflow_is_compacted_and_the_request_retried_once() -> None:
    windowed = Windowed()
    # threshold off (window 0 for the threshold): only the provider's refusal triggers
    agent = agent_for(windowed, compaction=Compaction(context_window=0, keep_tokens=2500))
    results = [agent.prompt(f"fetch page {turn}") for turn in range(8)]
    assert all(r.stop_reason == "stop" for r in results), [r.error_message for r in results]
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    assert records and all(r.reason == "overflow" for r in records)
    refused = [m for m in agent.state.messages if getattr(m, "stop_reason", None) == "error"]
    assert len(refused) == len(records)  # each refusal stays on record, once
    after = [i for i, size in enumerate(windowed.sizes) if size > WINDOW]
    assert all(windowed.sizes[i + 2] <= WINDOW for i in after)  # refusal, summary, retry


def test_a_second_overflow_ends_the_run_saying_what_to_do() -> None:
    windowed = Windowed(window=3000)
    agent = agent_for(windowed, compaction=Compaction(context_window=0))
    agent.prompt("fetch page 1")  # 1,600 tokens of result: fits
    result = agent.prompt("now fetch page 2 " + "please " * 2000)  # this turn alone overflows
    assert result.stop_reason == "error"
    assert isinstance(result.error, ContextOverflowError)
    assert "even after compaction" in (result.error_message or "")
    assert "keep_tokens" in (result.error_message or "")
    with pytest.raises(ContextOverflowError):
        result.raise_for_error()
    assert agent.prompt("short").stop_reason == "stop"  # usable: the next turn drops it


def test_a_second_refusal_after_a_successful_compaction_also_ends_the_run() -> None:
    model = ScriptedModel(
        [
            reply(error="This model's maximum context length is 8192 tokens."),
            reply("- summary"),
            reply(error="This model's maximum context length is 8192 tokens."),
        ]
    )
    agent = Agent(model=model.model, stream_fn=model, compaction="summarize",
                  messages=[user_message("old"), AssistantMessage(content=[TextContent(text="a")])])  # fmt: skip
    result = agent.prompt("new")
    assert len(model.requests) == 3 and result.stop_reason == "error"
    assert isinstance(result.error, ContextOverflowError)
    assert "maximum context length is 8192" in str(result.error)


def test_without_compaction_an_overflow_ends_the_run_as_before() -> None:
    model = ScriptedModel([reply(error="prompt is too long: 9000 tokens > 8192 maximum")])
    agent = Agent(model=model.model, stream_fn=model)
    result = agent.prompt("hi")
    assert result.stop_reason == "error" and len(model.requests) == 1


# --- strategies ---------------------------------------------------------------------------------


def test_trim_drops_the_oldest_turns_says_so_and_asks_nothing() -> None:
    windowed = Windowed()
    agent = agent_for(windowed, compaction="trim")
    for turn in range(12):
        assert agent.prompt(f"fetch page {turn}").stop_reason == "stop"
    assert windowed.summaries == 0 and max(windowed.sizes) <= WINDOW
    records = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE]
    assert len(records) >= 2 and all(r.requests == 0 for r in records)
    dropped = [int(r.summary.split()[0]) for r in records]
    assert dropped == sorted(dropped) and dropped[0] > 0  # counts add up across trims
    assert "were dropped" in records[-1].summary


def test_a_strategy_of_ones_own_gets_the_messages_and_the_previous_summary() -> None:
    jobs: list[CompactionJob] = []

    def keep_user_lines(job: CompactionJob) -> str:
        jobs.append(job)
        said = [m.content[0].text for m in job.messages if role_of(m) == "user"]
        return "; ".join([*(job.previous_summary or "").split("; "), *said]).strip("; ")

    windowed = Windowed()
    agent = agent_for(windowed, compaction=keep_user_lines)
    for turn in range(12):
        agent.prompt(f"fetch page {turn}")
    assert len(jobs) >= 2 and jobs[1].previous_summary
    last = [m for m in agent.state.messages if role_of(m) == COMPACTION_ROLE][-1]
    assert last.strategy == "keep_user_lines" and "fetch page 0" in last.summary
    assert "fetch page 0" in windowed.model.requests[-1].messages[1].content[0].text


def test_a_strategy_that_fails_leaves_the_transcript_and_reports_why() -> None:
    def broken(job: CompactionJob) -> str:
        raise CompactionError("no summary today")

    windowed = Windowed()
    agent = agent_for(windowed, compaction=broken)
    ends: list[CompactionEndEvent] = []
    agent.subscribe(lambda e: ends.append(e) if isinstance(e, CompactionEndEvent) else None)
    for turn in range(6):
        agent.prompt(f"fetch page {turn}")
    assert ends and ends[0].compaction is None and ends[0].error == "no summary today"
    assert COMPACTION_ROLE not in roles(agent.state.messages)


# --- manual -------------------------------------------------------------------------------------


def test_agent_compact_adds_a_record_and_the_next_request_sees_the_view() -> None:
    windowed = Windowed(window=100_000)
    agent = agent_for(windowed, compaction=Compaction(keep_tokens=2000))
    for turn in range(3):
        agent.prompt(f"fetch page {turn}")
    seen: list[str] = []
    agent.subscribe(lambda e: seen.append(e.type))
    record = agent.compact()
    assert seen == ["compaction_start", "message_start", "message_end", "compaction_end"]
    assert agent.state.messages[-1] is record and record.reason == "manual"
    assert windowed.summaries == 1
    agent.prompt("fetch again")
    request = windowed.model.requests[-2]
    assert roles(request.messages)[:2] == ["system", "user"]
    assert "summary #1" in request.messages[1].content[0].text
    assert len(request.messages) < len(agent.state.messages) - 4


def test_agent_compact_with_nothing_to_drop_raises_and_changes_nothing() -> None:
    agent = Agent(model=Model(id="m", api="x", provider="x", base_url=""),
                  stream_fn=ScriptedModel(), system_prompt="SYS")  # fmt: skip
    with pytest.raises(CompactionError, match="nothing to compact"):
        agent.compact()
    assert roles(agent.state.messages) == ["system"]


def test_agent_compact_with_a_broken_strategy_raises_and_records_nothing() -> None:
    def broken(job: CompactionJob) -> str:
        raise RuntimeError("bug in my strategy")

    model = ScriptedModel(["one", "two"])
    agent = Agent(model=model.model, stream_fn=model, compaction=broken)
    agent.prompt("first")
    agent.prompt("second")
    before = list(agent.state.messages)
    with pytest.raises(CompactionError, match="bug in my strategy") as caught:
        agent.compact()
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert agent.state.messages == before  # no record, no failure message


def test_agent_compact_during_a_run_is_refused() -> None:
    model = ScriptedModel([reply("slow", hang=True)])
    agent = Agent(model=model.model, stream_fn=model)
    run = agent.start("hi")
    try:
        with pytest.raises(AgentBusyError, match="before compacting"):
            agent.compact()
    finally:
        agent.abort()
        run.wait(10)


def test_the_option_accepts_the_short_forms_and_refuses_a_bad_one() -> None:
    agent = Agent(stream_fn=ScriptedModel(), compaction="trim")
    assert isinstance(agent.compaction, Compaction) and agent.compaction.strategy == "trim"
    agent.compaction = True
    assert agent.compaction == Compaction()
    agent.compaction = None
    assert agent.compaction is None
    with pytest.raises(ValueError):
        agent.compaction = {"threshold": 2}
    with pytest.raises(TypeError):
        agent.compaction = 3
