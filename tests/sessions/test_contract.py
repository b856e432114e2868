"""The contract every session store keeps, run against SQLite, Redis and PostgreSQL alike."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from typing import Any

import pytest

from agentkit import Agent, tool
from agentkit.sessions import (
    INTERRUPTED_TEXT,
    Session,
    SessionConflictError,
    SessionError,
    SessionImportError,
    SessionStore,
    import_jsonl,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from agentkit.types import (
    AssistantMessage,
    Cost,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    Tool,
    ToolCall,
    ToolResultMessage,
    Usage,
    UserMessage,
)


def rich_messages() -> list[Any]:
    """One of everything a transcript can hold, with awkward values."""
    return [
        SystemMessage(content="be brief", tools_added=[Tool(name="look", description="d")]),
        UserMessage(
            content=[
                TextContent(text='what is this? ünïcødé \u2028 "quoted"\n'),
                ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
            ]
        ),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="hmm", signature="sig/+=" * 20),
                ThinkingContent(thinking="", signature="opaque", redacted=True),
                TextContent(text="Let me look.", text_signature="ts1"),
                ToolCall(
                    id="c1",
                    name="look",
                    arguments={"n": 1.1, "deep": {"x": [None, True]}},
                    thought_signature="th",
                ),
            ],
            api="anthropic-messages",
            provider="anthropic",
            model="claude",
            usage=Usage(
                input=12,
                output=7,
                cache_read=3,
                cache_write=1,
                total_tokens=23,
                cost=Cost(input=0.1 + 0.2, output=1e-9, total=0.30000000100000004),
            ),
            stop_reason="tool_use",
            thinking_level="high",
            response_id="r-1",
        ),  # fmt: skip
        ToolResultMessage(
            tool_call_id="c1",
            tool_name="look",
            content=[TextContent(text="a cat"), ImageContent(data="AAAA", mime_type="image/jpeg")],
            details={"pixels": [1, 2, 3]},
            usage=Usage(input=1),
            is_error=False,
            duration_ms=1.5,
        ),  # fmt: skip
        {"role": "note", "text": "an application's own message", "n": 3},
    ]


def test_messages_round_trip_exactly(store: SessionStore, name: str) -> None:
    written = rich_messages()
    session = Session(name, store)
    assert session.append(*written) == len(written)
    loaded = Session(name, store).load()
    assert loaded == written
    assert [type(m) for m in loaded] == [type(m) for m in written]


def test_a_new_session_is_empty_and_unlisted(store: SessionStore, name: str) -> None:
    session = Session(name, store)
    assert session.load() == []
    assert session.version == 0
    assert name not in [info.name for info in store.list()]


def test_list_fork_and_delete(store: SessionStore, name: str) -> None:
    messages = rich_messages()
    Session(name, store).append(*messages)
    fork = Session(name, store).fork(name + "-fork", upto=2)
    assert fork.load() == messages[:2]
    listed = {info.name: info.messages for info in store.list()}
    assert listed[name] == len(messages) and listed[name + "-fork"] == 2
    with pytest.raises(SessionError, match="already exists"):
        Session(name, store).fork(name + "-fork")
    assert Session(name + "-fork", store).delete() is True
    assert Session(name + "-fork", store).delete() is False
    assert Session(name + "-fork", store).load() == []
    assert Session(name, store).load() == messages  # the original is untouched


def test_a_stale_writer_gets_a_conflict_and_writes_nothing(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    first, second = Session(name, open_stores()), Session(name, open_stores())
    first.load(), second.load()
    first.append(UserMessage(content="from the first"))
    with pytest.raises(SessionConflictError, match="changed by another writer") as raised:
        second.append(UserMessage(content="from the second"))
    assert (raised.value.expected, raised.value.actual) == (0, 1)
    assert [m.content for m in first.load()] == ["from the first"]
    second.load()
    second.append(UserMessage(content="after reloading"))
    assert [m.content for m in first.load()] == ["from the first", "after reloading"]


def test_concurrent_appenders_never_lose_or_interleave(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    """Four writers on their own connections append batches at once, retrying on conflict:
    every batch lands exactly once and whole."""
    writers, batches = 4, 10
    start = threading.Barrier(writers)
    conflicts = [0] * writers

    def write(index: int, session: Session) -> None:
        start.wait()
        for batch in range(batches):
            pair = [UserMessage(content=f"w{index}-b{batch}-{part}") for part in (0, 1)]
            while True:
                try:
                    session.append(*pair)
                    break
                except SessionConflictError:
                    conflicts[index] += 1
                    session.load()

    sessions = [Session(name, open_stores()) for _ in range(writers)]
    threads = [threading.Thread(target=write, args=(i, s)) for i, s in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    texts = [m.content for m in Session(name, open_stores()).load()]
    assert len(texts) == writers * batches * 2
    assert sorted(texts) == sorted(
        f"w{i}-b{b}-{p}" for i in range(writers) for b in range(batches) for p in (0, 1)
    )
    for first, second in zip(texts[::2], texts[1::2], strict=True):  # batches stay whole
        assert first.endswith("-0") and second == first[:-1] + "1"


def test_export_import_round_trip(store: SessionStore, name: str) -> None:
    messages = rich_messages()
    Session(name, store).append(*messages)
    exported = io.StringIO()
    assert Session(name, store).export_jsonl(exported) == len(messages)
    copy = import_jsonl(store, io.StringIO(exported.getvalue()), name + "-copy")
    assert copy.load() == messages
    again = io.StringIO()
    copy.export_jsonl(again)
    assert again.getvalue().split("\n", 1)[1] == exported.getvalue().split("\n", 1)[1]
    with pytest.raises(SessionError, match="already exists"):
        import_jsonl(store, io.StringIO(exported.getvalue()), name + "-copy")


@pytest.mark.parametrize(
    ("damage", "line", "reason"),
    [
        (lambda lines: lines[:3] + ['{"role": "user", "content": '] + lines[4:], 4, "invalid JSON"),
        (lambda lines: lines[:2] + ['{"role": "assistant", "content": 5}'] + lines[3:], 3,
         "not a valid message"),
        (lambda lines: lines[:-1], 6, "announces 5 messages, found 4"),
        (lambda lines: ["{}"] + lines[1:], 1, "not an agentkit session export"),
    ],
    ids=["bad-json", "bad-message", "missing-lines", "no-header"],
)  # fmt: skip
def test_a_damaged_import_names_the_line_and_imports_nothing(
    store: SessionStore, name: str, damage: Callable[[list[str]], list[str]], line: int,
    reason: str,
) -> None:  # fmt: skip
    Session(name, store).append(*rich_messages())
    exported = io.StringIO()
    Session(name, store).export_jsonl(exported)
    lines = exported.getvalue().splitlines()
    text = "\n".join(damage(lines)) + "\n"
    with pytest.raises(SessionImportError, match=reason) as raised:
        import_jsonl(store, io.StringIO(text), name + "-bad")
    assert raised.value.line == line
    assert f"line {line}:" in str(raised.value) and "nothing was imported" in str(raised.value)
    assert Session(name + "-bad", store).load() == []


def test_a_truncated_last_line_is_rejected(store: SessionStore, name: str) -> None:
    Session(name, store).append(*rich_messages())
    exported = io.StringIO()
    Session(name, store).export_jsonl(exported)
    text = exported.getvalue()
    cut = text[: len(text) - 10]  # cut mid-way through the last message
    with pytest.raises(SessionImportError, match="line 6: truncated line"):
        import_jsonl(store, io.StringIO(cut), name + "-cut")
    assert Session(name + "-cut", store).load() == []


# --- agents on sessions ---------------------------------------------------------------------


def test_agent_appends_each_message_before_listeners_see_it(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    model = ScriptedModel([reply(tool_call("look", {"n": 1})), "It is a cat."])

    @tool
    def look(n: int) -> str:
        """Look."""
        return "a cat"

    agent = Agent(model=model.model, stream_fn=model, tools=[look], system_prompt="be brief",
                  session=Session(name, open_stores()))  # fmt: skip
    observer = Session(name, open_stores())  # another connection, as another process would be
    seen_durable: list[bool] = []

    def listener(event: Any) -> None:
        if event.type == "message_end":
            seen_durable.append(observer.load()[-1] == event.message)

    agent.subscribe(listener)
    agent.prompt("what is it?")
    assert seen_durable == [True] * 4  # user, assistant, tool result, assistant
    assert observer.load() == agent.state.messages
    assert [m.role for m in observer.load()] == ["system", "user", "assistant", "tool_result",
                                                 "assistant"]  # fmt: skip


def test_agent_resumes_a_conversation(open_stores: Callable[[], SessionStore], name: str) -> None:
    first = ScriptedModel(["Hello Alice."])
    Agent(model=first.model, stream_fn=first, system_prompt="be brief",
          session=Session(name, open_stores())).prompt("My name is Alice")  # fmt: skip
    second = ScriptedModel(["You are Alice."])
    agent = Agent(model=second.model, stream_fn=second, system_prompt="ignored: it has one",
                  session=Session(name, open_stores()))  # fmt: skip
    agent.prompt("Who am I?")
    sent = second.requests[0].messages
    assert [m.role for m in sent] == ["system", "user", "assistant", "user"]
    assert agent.state.system_prompt == "be brief"
    assert len(Session(name, open_stores()).load()) == 5


def test_resume_reruns_idempotent_tools_only(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    """A crash left an assistant message with two tool calls and no results: the idempotent one
    runs again, the other gets an error result the model reads, and the run goes on."""
    runs = {"lookup": 0, "charge": 0}

    @tool(idempotent=True)
    def lookup(key: str) -> str:
        """Read a value."""
        runs["lookup"] += 1
        return f"value of {key}"

    @tool
    def charge(amount: int) -> str:
        """Charge a card."""
        runs["charge"] += 1
        return "charged"

    crashed = AssistantMessage(
        content=[ToolCall(id="c1", name="lookup", arguments={"key": "k"}),
                 ToolCall(id="c2", name="charge", arguments={"amount": 5})],
        stop_reason="tool_use",
    )  # fmt: skip
    Session(name, open_stores()).append(UserMessage(content="go"), crashed)

    model = ScriptedModel(["Done."])
    agent = Agent(model=model.model, stream_fn=model, tools=[lookup, charge],
                  session=Session(name, open_stores()))  # fmt: skip
    assert runs == {"lookup": 1, "charge": 0}
    results = agent.state.messages[-2:]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("c1", False), ("c2", True)]
    assert results[0].content[0].text == "value of k"
    assert results[1].content[0].text == INTERRUPTED_TEXT.format(name="charge", id="c2")
    agent.continue_()
    seen = [m for m in model.requests[0].messages if m.role == "tool_result"]
    assert seen[-1].content[0].text.startswith("Tool call charge (c2) was interrupted")
    stored = Session(name, open_stores()).load()
    assert [m.role for m in stored if m.role != "system"] == [
        "user", "assistant", "tool_result", "tool_result", "assistant"]  # fmt: skip
    assert stored[-1].content[0].text == "Done."
    # Loading again settles nothing more: every call has its result.
    Agent(model=model.model, stream_fn=model, tools=[lookup, charge],
          session=Session(name, open_stores()))  # fmt: skip
    assert runs == {"lookup": 1, "charge": 0}


def test_two_agents_on_one_session_the_later_writer_fails_cleanly(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    Session(name, open_stores()).append(UserMessage(content="hi"), AssistantMessage(
        content=[TextContent(text="hello")]))  # fmt: skip
    model_a, model_b = ScriptedModel(["A answers."]), ScriptedModel(["B answers."])
    agent_a = Agent(model=model_a.model, stream_fn=model_a, session=Session(name, open_stores()))
    agent_b = Agent(model=model_b.model, stream_fn=model_b, session=Session(name, open_stores()))
    agent_a.prompt("from A")
    (failure,) = agent_b.prompt("from B")
    assert failure.stop_reason == "error"
    assert "changed by another writer" in (failure.error_message or "")
    assert model_b.requests == []  # B never reached the model: its first append was refused
    stored = Session(name, open_stores()).load()
    assert [getattr(m, "content", None) for m in stored][2] == [TextContent(text="from A")]
    assert len(stored) == 4


class Note:
    """An application's own message type (not pydantic)."""

    def __init__(self, text: str) -> None:
        self.role = "note"
        self.text = text


def test_application_messages_load_back_as_dicts(store: SessionStore, name: str) -> None:
    Session(name, store).append(Note("remember the milk"))
    assert Session(name, store).load() == [{"role": "note", "text": "remember the milk"}]
    with pytest.raises(TypeError, match="without a 'role'"):
        Session(name, store).append(object())


def test_a_history_without_a_system_message_is_led_by_the_agents(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    """A session started by a client (agentkit.integrations.celery.submit stores only the prompt) gets the
    agent's system prompt in memory, from code, each time it is loaded; the store is unchanged."""
    Session(name, open_stores()).append(UserMessage(content="hi"))
    model = ScriptedModel(["hello"])
    agent = Agent(model=model.model, stream_fn=model, system_prompt="be brief",
                  session=Session(name, open_stores()))  # fmt: skip
    agent.continue_()
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["system", "user"] and sent[0].content == "be brief"
    assert [m.role for m in Session(name, open_stores()).load()] == ["user", "assistant"]


def test_resume_never_runs_a_call_of_a_reply_cut_off_by_its_token_limit(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    """A crash between storing a reply that hit its token limit and the error results of its
    calls: on resume even an idempotent call of it does not run (its arguments may be cut)."""
    from agentkit.tool_calls import TRUNCATED_TEXT

    runs: list[str] = []

    @tool(idempotent=True)
    def remove_tree(path: str) -> str:
        """Delete a folder (idempotent: deleting twice is deleting once)."""
        runs.append(path)
        return "deleted"

    cut = AssistantMessage(
        content=[ToolCall(id="c1", name="remove_tree", arguments={"path": "/srv/data/cache/tmp"})],
        stop_reason="length",
    )
    Session(name, open_stores()).append(UserMessage(content="clean up"), cut)
    model = ScriptedModel(["Done."])
    agent = Agent(model=model.model, stream_fn=model, tools=[remove_tree],
                  session=Session(name, open_stores()))  # fmt: skip
    assert runs == []
    (result,) = [m for m in agent.state.messages if m.role == "tool_result"]
    assert result.is_error and result.content[0].text == TRUNCATED_TEXT.format(name="remove_tree")
