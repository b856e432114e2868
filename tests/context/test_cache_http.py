"""Cache-aware requests over real HTTP, for each of the four wire APIs (replay servers of the
vendors' recorded streams, their usage set to what a test needs): each turn's cache reads and
writes in the result, and a warning once per run naming the part that broke the cached prefix
(a timestamp in the system prompt, tools reordered, added or removed, an earlier message edited
or dropped, the model or the options), a compaction noted as the expected break it is, an
expired cache said once; hostile requests (a 1 MB system prompt, 500 tools, no tools, usage
without cache fields, negative or missing usage)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from agentkit import Agent, AgentTool
from agentkit.compaction import Compaction
from agentkit.context import CACHE_ROLE, CacheNote, CacheWatch, cache_report
from agentkit.types import UserMessage, role_of
from tests.context.cache_wire import APIS, WRITES, answer, call
from tests.providers.replay_server import API_KEY, ReplayServer, Reply, make_model
from tests.support import make_tool

PROMPT = "You are PLUMBAGO's shop assistant. Now: {when} UTC. Answer in one line."
EARLY, LATE = "2026-12-03 10:00:01", "2026-12-03 10:05:07"
SECRET_WORDS = ("PLUMBAGO", "shop assistant", "hello there", API_KEY)
"""Text of the prompts, the messages and the key: never in a log line or a note."""


def agent_for(api: str, server: ReplayServer, watch: CacheWatch, **options: Any) -> Agent:
    options.setdefault("model", make_model(api, server.url))
    return Agent(
        api_key=API_KEY, retry_base_delay_ms=1, max_retries=0, timeout=(5, 5),
        policies=[watch], **options,
    )  # fmt: skip


def carried(agent: Agent) -> list[Any]:
    """The agent's conversation without its system messages (a new agent gets its own)."""
    return [m for m in agent.state.messages if role_of(m) != "system"]


def notes(messages: Any) -> list[CacheNote]:
    return [m for m in messages if role_of(m) == CACHE_ROLE]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The ``agentkit`` logger's records, every level; none may quote a prompt or the key."""
    caplog.set_level(logging.DEBUG, logger="agentkit")
    yield caplog
    for record in caplog.records:
        for word in SECRET_WORDS:
            assert word not in record.getMessage()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "agentkit" and r.levelno == logging.WARNING]  # fmt: skip


# --- what each turn read and wrote --------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_each_turns_cache_reads_and_writes_are_in_the_result_with_their_totals(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    lookup = make_tool("lookup")
    agent = agent_for(api, server, CacheWatch(), tools=[lookup], system_prompt="Be brief.")
    server.enqueue(
        Reply(body=call(api, "lookup", {"q": "x"}, (30, 0, 1200))),
        Reply(body=answer(api, "Found it.", (12, 1200, 40))),
    )
    result = agent.prompt("hello there")

    write = 1 if api in WRITES else 0
    report = cache_report(result)
    assert [(t.input, t.cache_read, t.cache_write) for t in report.turns] == [
        (30, 0, 1200 * write), (12, 1200, 40 * write),
    ]  # fmt: skip
    assert (report.input, report.cache_read, report.cache_write) == (42, 1200, 1240 * write)
    assert (result.usage.cache_read, result.usage.cache_write) == (1200, 1240 * write)
    assert report.turns[1].hit_ratio == pytest.approx(1200 / (12 + 1200 + 40 * write))
    assert report.notes == [] and report.warning is None  # the second request extended the first
    assert warnings_of(logged) == []
    assert len(lookup.calls) == 1  # type: ignore[attr-defined]


# --- what broke the prefix -----------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_timestamp_in_the_system_prompt_is_named_with_its_position_once(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    watch = CacheWatch()  # one per conversation: each request's new Agent gets the same one
    first = agent_for(api, server, watch, system_prompt=PROMPT.format(when=EARLY))
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 1000))))
    assert notes(first.prompt("hello there")) == []

    second = agent_for(api, server, watch, system_prompt=PROMPT.format(when=LATE),
                       messages=carried(first), tools=[make_tool("lookup")])  # fmt: skip
    server.enqueue(
        Reply(body=call(api, "lookup", {"q": "x"}, (1900, 0, 0))),
        Reply(body=answer(api, "Done.", (10, 1900, 0))),
    )
    result = second.prompt("and again")

    at = PROMPT.index("{when}") + len("2026-12-03 10:0")
    [note] = notes(result)
    assert (note.kind, note.part, note.position, note.request) == ("break", "tools", 0, 1)
    assert note.detail["added"] == ["lookup"] and note.detail["also"] == ["system_prompt"]
    # the tools come first in a cached prefix: a tool set that changed hides the prompt's change
    third = agent_for(api, server, watch, system_prompt=PROMPT.format(when=EARLY),
                      messages=carried(second), tools=[make_tool("lookup")])  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Ok.", (800, 0, 0))))
    [note] = notes(third.prompt("once more"))
    assert (note.part, note.position) == ("system_prompt", at)
    assert f"a timestamp at char {at}" in note.summary
    assert note.detail["hint"] == "9999-99-99 99:99:99 aaa" and note.detail["kind"] == "timestamp"
    assert [w for w in warnings_of(logged)] == [
        f"agentkit cache: {n.summary}" for n in [*notes(result), note]
    ]  # fmt: skip
    assert len(server.requests) == 4


@pytest.mark.parametrize("api", APIS)
def test_tools_reordered_added_and_removed_are_named(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    watch = CacheWatch()
    tools = [make_tool(name) for name in ("alpha", "beta", "gamma")]
    first = agent_for(api, server, watch, tools=tools, system_prompt="Be brief.")
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))))
    first.prompt("hello there")

    second = agent_for(api, server, watch, tools=[tools[0], tools[2], tools[1]],
                       system_prompt="Be brief.", messages=carried(first))  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))))
    [note] = notes(second.prompt("again"))
    assert (note.part, note.position, note.detail.get("reordered")) == ("tools", 1, True)
    assert "reordered (from tool 1, 'gamma')" in note.summary

    second.state.tools = [tools[0], tools[2]]  # beta withdrawn: declared to the model as a change
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))))
    [note] = notes(second.prompt("and again"))
    assert (note.part, note.detail["removed"], note.detail["added"]) == ("tools", ["beta"], [])
    assert note.summary.endswith("the tools changed: 1 removed ('beta')")


@pytest.mark.parametrize("api", APIS)
def test_an_earlier_message_edited_on_every_request_is_warned_about_once_per_run(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    stamp = iter(range(100))

    def restamp(messages: list[Any], signal: Any) -> list[Any]:
        # a common mistake: the first user message rewritten with something new each time
        first = next(i for i, m in enumerate(messages) if role_of(m) == "user")
        edited = UserMessage(content=f"{messages[first].content} (seen {next(stamp)})")
        return [*messages[:first], edited, *messages[first + 1 :]]

    watch = CacheWatch()
    agent = agent_for(api, server, watch, tools=[make_tool("lookup")], transform_context=restamp)
    server.enqueue(
        Reply(body=call(api, "lookup", {"q": "x"}, (900, 0, 900))),
        Reply(body=call(api, "lookup", {"q": "y"}, (900, 0, 900))),
        Reply(body=answer(api, "Done.", (900, 0, 900))),
    )
    result = agent.prompt("hello there")
    [note] = notes(result)  # three requests, two breaks: one warning, one note
    assert (note.part, note.position, note.request) == ("messages", 0, 2)
    assert "an earlier message was edited (message 0, a user message)" in note.summary
    assert len(warnings_of(logged)) == 1
    debug = [r for r in logged.records if r.levelno == logging.DEBUG and "request 3" in r.message]
    assert len(debug) == 1  # the second break: logged, not warned again

    server.enqueue(Reply(body=answer(api, "Ok.", (900, 0, 900))))
    assert len(notes(agent.prompt("next"))) == 1  # a new run warns again
    assert len(warnings_of(logged)) == 2


def last_two(messages: list[Any], signal: Any) -> list[Any]:
    """A sliding window: the system messages, then all but the first two of the others."""
    systems = [m for m in messages if role_of(m) == "system"]
    return [*systems, *[m for m in messages if role_of(m) != "system"][2:]]


@pytest.mark.parametrize("api", APIS)
def test_a_dropped_message_the_model_and_the_options_are_named(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    watch = CacheWatch()
    first = agent_for(api, server, watch, system_prompt="Be brief.")
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))),
                   Reply(body=answer(api, "Hi.", (900, 900, 0))))  # fmt: skip
    first.prompt("hello there")
    first.prompt("tell me more")

    window = agent_for(api, server, watch, system_prompt="Be brief.", messages=carried(first),
                       transform_context=last_two)  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Ok.", (900, 0, 0))))
    [note] = notes(window.prompt("third"))
    assert (note.part, note.position, note.detail["role"]) == ("messages", 0, "user")
    assert "an earlier message was dropped (2 messages from message 0, a user" in note.summary

    other = make_model(api, server.url, id="another-model")
    moved = agent_for(api, server, watch, model=other, system_prompt="Be brief.",
                      messages=carried(window))  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Ok.", (900, 0, 0))))
    [note] = notes(moved.prompt("fourth"))
    assert (note.part, note.detail["changed"]) == ("model", ["model"])

    thinking = agent_for(api, server, watch, model=other, system_prompt="Be brief.",
                         messages=carried(moved), thinking_level="high")  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Ok.", (900, 0, 0))))
    [note] = notes(thinking.prompt("fifth"))
    assert (note.part, note.detail["changed"]) == ("options", ["reasoning"])


# --- expected breaks, and a cache that expired ----------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_compaction_is_an_expected_break_not_a_warning(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    agent = agent_for(api, server, CacheWatch(), system_prompt="Be brief.",
                      compaction=Compaction(strategy="trim", keep_tokens=1, context_window=0))  # fmt: skip
    for usage in [(900, 0, 900), (900, 900, 90), (900, 990, 90)]:
        server.enqueue(Reply(body=answer(api, "A reply of a few words.", usage)))
        agent.prompt("hello there, tell me something")
    agent.compact()
    server.enqueue(Reply(body=answer(api, "Ok.", (300, 0, 300))))
    [note] = notes(agent.prompt("and now?"))
    assert (note.kind, note.part) == ("compaction", "messages")
    assert "an expected break" in note.summary
    assert warnings_of(logged) == []
    assert cache_report(agent.state.messages).warning is None


@pytest.mark.parametrize("api", APIS)
def test_cache_reads_that_fell_to_zero_on_the_same_prefix_are_said_once(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    now = iter([0.0, 10.0, 400.0, 401.0, 402.0])
    agent = agent_for(api, server, CacheWatch(clock=lambda: next(now)), system_prompt="Be brief.",
                      tools=[make_tool("lookup")])  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 1000))),
                   Reply(body=answer(api, "Hi.", (900, 1000, 0))))  # fmt: skip
    agent.prompt("hello there")
    assert notes(agent.prompt("more")) == []  # read from the cache: as it should
    server.enqueue(
        Reply(body=call(api, "lookup", {"q": "x"}, (2000, 0, 0))),  # 390 s later: nothing read
        Reply(body=call(api, "lookup", {"q": "y"}, (2100, 0, 0))),
        Reply(body=answer(api, "Done.", (2200, 0, 0))),
    )
    result = agent.prompt("later")
    [note] = notes(result)
    assert (note.kind, note.part, note.request) == ("expired", "cache", 1)
    assert note.detail["gap_s"] == 390.0 and note.detail["cache_read_before"] == 1000
    assert "the cache likely expired" in note.summary
    # said once the response reported it, before its tool results
    assert [role_of(m) for m in result[:4]] == ["user", "assistant", "cache", "tool_result"]
    assert len(warnings_of(logged)) == 1


# --- hostile requests and usage ---------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_a_megabyte_system_prompt_changed_near_its_end(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    body = "Rules of the house, PLUMBAGO edition. " * 27_000  # about 1 MB
    watch = CacheWatch()
    first = agent_for(api, server, watch, system_prompt=body + "Build 41.")
    server.enqueue(Reply(body=answer(api, "Hi.", (250_000, 0, 250_000))))
    first.prompt("hello there")
    second = agent_for(api, server, watch, system_prompt=body + "Build 42.",
                       messages=carried(first))  # fmt: skip
    server.enqueue(Reply(body=answer(api, "Hi.", (250_000, 0, 250_000))))
    [note] = notes(second.prompt("again"))
    assert len(body) > 1_000_000
    assert (note.part, note.position) == ("system_prompt", len(body) + len("Build 4"))
    assert note.detail["kind"] == "number" and note.detail["hint"] == "99"


@pytest.mark.parametrize("api", APIS)
def test_five_hundred_tools_two_swapped(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    tools = [make_tool(f"tool_{n:03d}") for n in range(500)]
    swapped: list[AgentTool] = [*tools[:250], tools[251], tools[250], *tools[252:]]
    watch = CacheWatch()
    first = agent_for(api, server, watch, tools=tools)
    server.enqueue(Reply(body=answer(api, "Hi.", (9000, 0, 9000))))
    first.prompt("hello there")
    second = agent_for(api, server, watch, tools=swapped, messages=carried(first))
    server.enqueue(Reply(body=answer(api, "Hi.", (9000, 0, 9000))))
    [note] = notes(second.prompt("again"))
    assert (note.part, note.position) == ("tools", 250)
    assert "reordered (from tool 250, 'tool_251')" in note.summary


@pytest.mark.parametrize("api", APIS)
def test_no_tools_then_one(
    api: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    agent = agent_for(api, server, CacheWatch())
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))),
                   Reply(body=answer(api, "Hi.", (900, 900, 0))))  # fmt: skip
    agent.prompt("hello there")
    assert notes(agent.prompt("more")) == []
    agent.state.tools = [make_tool("lookup")]
    server.enqueue(Reply(body=answer(api, "Hi.", (900, 0, 900))))
    [note] = notes(agent.prompt("with a tool"))
    assert note.summary.endswith("the tools changed: 1 added ('lookup')")


@pytest.mark.parametrize("usage", ["no-cache", "negative", "missing", "odd"])
@pytest.mark.parametrize("api", APIS)
def test_usage_without_cache_fields_negative_or_missing(
    api: str, usage: str, server: ReplayServer, logged: pytest.LogCaptureFixture
) -> None:
    agent = agent_for(api, server, CacheWatch(), system_prompt="Be brief.")
    for _ in range(3):
        server.enqueue(Reply(body=answer(api, "Hi.", usage)))
    results = [agent.prompt(text) for text in ("hello there", "more", "more again")]
    for result in results:
        assert result.stop_reason == "stop" and notes(result) == []
        report = cache_report(result)
        assert (report.cache_read, report.cache_write) == (0, 0)
        assert all(t.input >= 0 and t.output >= 0 for t in report.turns)
        if usage in ("no-cache", "odd"):  # the rest of the usage still counts
            assert [(t.input, t.output) for t in report.turns] == [(40, 5)]
    assert warnings_of(logged) == []
