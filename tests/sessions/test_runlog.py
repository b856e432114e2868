"""Run logs, on SQLite, Redis and PostgreSQL alike: a run with a session logs its events in
order, numbered, with its end; any connection to the store follows it and controls it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from agentkit import Agent, Approvals, runlog, tool
from agentkit.errors import RunLogError, RunNotFoundError
from agentkit.sessions import Session, SessionStore
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.sessions.runlog_support import Gate, collect, gated_agent, text_of
from tests.support import WAIT


def test_a_run_logs_its_events_in_order_then_its_end(store: SessionStore, name: str) -> None:
    seen: list[str] = []
    model = ScriptedModel(["The answer is **42**, as computed." * 3], chunk_size=2)
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    agent.subscribe(lambda event: seen.append(event.type))
    run = agent.start("question")
    assert run.wait(WAIT)

    events = collect(store, run.id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run_start" and events[0].data["session"] == name
    assert events[-1].type == "run_end" and events[-1].data["stop_reason"] == "stop"
    # Deltas that piled up may be written as one; everything else is logged as it came.
    assert [e.type for e in events[1:-1] if e.type != "message_update"] == [
        kind for kind in seen if kind != "message_update"
    ]
    assert text_of(events) == "The answer is **42**, as computed." * 3
    assert all(isinstance(e.time_ms, int) for e in events)
    info = runlog.run_info(store, run.id)
    assert not info.live and info.stop_reason == "stop" and info.last_seq == events[-1].seq
    assert info.session == name
    assert len(Session(name, store).load()) == 2  # the transcript is the sessions' own


def test_every_run_has_its_own_id(store: SessionStore, name: str) -> None:
    agent = Agent(model=ScriptedModel(["a", "b"]).model, stream_fn=ScriptedModel(["a", "b"]))
    first, second = agent.start("x"), None
    first.wait(WAIT)
    second = agent.start("y")
    second.wait(WAIT)
    assert first.id != second.id and len(first.id) == 32
    with pytest.raises(RunNotFoundError):  # no session: nothing logged
        runlog.run_info(store, first.id)


def test_run_id_gives_the_next_run_its_id(store: SessionStore, name: str) -> None:
    model = ScriptedModel(["a", "b"])
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    with runlog.run_id(f"task-{name}"):
        agent.prompt("x")
        agent.prompt("y")  # the id is given once
    listed = runlog.runs(store, name)
    assert [r.id for r in listed][-1] == f"task-{name}"
    assert len({r.id for r in listed}) == 2
    with pytest.raises(RunLogError, match="invalid run id"):
        with runlog.run_id("has space"):
            pass


def test_an_ended_run_gives_its_log_at_once(store: SessionStore, name: str) -> None:
    model = ScriptedModel(["hello"])
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    run = agent.start("x")
    run.wait(WAIT)
    last = runlog.run_info(store, run.id).last_seq
    began = time.monotonic()
    assert collect(store, run.id, after=last) == []
    tail = collect(store, run.id, after=last - 1)
    assert [e.type for e in tail] == ["run_end"]
    assert time.monotonic() - began < runlog.SLICE  # no wait for an ended run
    with pytest.raises(RunLogError, match="past the last event"):
        runlog.attach(store, run.id, after=last + 1)
    with pytest.raises(RunLogError):
        runlog.attach(store, run.id, after=-1)


def test_an_unknown_run_is_a_clear_error_at_once(store: SessionStore) -> None:
    for call in (
        lambda: runlog.attach(store, "no-such-run"),
        lambda: runlog.run_info(store, "no-such-run"),
        lambda: runlog.abort(store, "no-such-run"),
        lambda: runlog.steer(store, "no-such-run", "hi"),
    ):
        with pytest.raises(RunNotFoundError, match="no run 'no-such-run'") as caught:
            call()
        assert isinstance(caught.value, KeyError)


def test_a_follower_on_another_connection_sees_the_live_run_to_its_end(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()
    gate = Gate()
    agent = gated_agent(Session(name, store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)
    assert [r.id for r in runlog.live_runs(other)].count(run.id) == 1
    received: list[Any] = []
    follower = threading.Thread(target=lambda: received.extend(runlog.attach(other, run.id)))
    follower.start()
    gate.open.set()
    follower.join(WAIT)
    assert not follower.is_alive()
    assert [e.seq for e in received] == list(range(1, len(received) + 1))
    assert received[-1].type == "run_end" and received[-1].data["stop_reason"] == "stop"
    assert run.id not in [r.id for r in runlog.live_runs(other)]
    agent.close()


def test_commands_from_another_connection_reach_the_run(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()
    gate = Gate()
    agent = gated_agent(Session(name, store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)
    assert runlog.steer(other, run.id, "also check y")
    assert runlog.follow_up(other, run.id, "and then z")
    commands = []
    for event in runlog.attach(other, run.id):
        if event.type == "run_command":
            commands.append(event.data["command"])
            if len(commands) == 2:
                gate.open.set()
    assert commands == ["steer", "follow_up"]
    texts = [m.content[0].text for m in Session(name, store).load() if m.role == "user"]
    assert texts == ["go", "also check y", "and then z"]
    assert not runlog.abort(other, run.id)  # ended: nothing to abort
    agent.close()


def test_an_abort_from_another_connection_ends_the_run_aborted(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()
    gate = Gate()
    agent = gated_agent(Session(name, store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)
    assert runlog.abort(other, run.id)
    assert gate.aborted.wait(WAIT)
    events = collect(other, run.id)
    assert events[-1].data["stop_reason"] == "aborted"
    assert runlog.runs(other, name)[0].stop_reason == "aborted"
    agent.close()


def test_an_approval_from_another_connection_reaches_the_waiting_call(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()

    @tool(requires_approval=True)
    def refund(amount: int) -> str:
        """Refund an amount."""
        return f"refunded {amount}"

    broker = Approvals()
    model = ScriptedModel([reply(tool_call("refund", {"amount": 5}, id="c1")), "ok"])
    agent = Agent(model=model.model, stream_fn=model, tools=[refund], approvals=broker,
                  session=Session(name, store))  # fmt: skip
    run = agent.start("refund me")
    assert broker.wait_for_request(WAIT) is not None
    assert runlog.approve(other, run.id, "c1", "fine")
    assert run.wait(WAIT)
    results = [m for m in Session(name, store).load() if m.role == "tool_result"]
    assert results[0].content[0].text == "refunded 5"
    agent.close()


def test_a_run_whose_process_stops_beating_ends_interrupted(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()
    log = store.run_log()
    log.start(f"dead-{name}", name)  # registered, then nothing: as a killed process leaves it
    assert log.append(f"dead-{name}", [(1, json.dumps({"type": "run_start", "t": 1}))])
    other.run_log().lease = 0.3
    began = time.monotonic()
    events = collect(other, f"dead-{name}")
    assert [e.type for e in events] == ["run_start", "run_end"]
    assert events[-1].data["stop_reason"] == "interrupted"
    assert time.monotonic() - began < 0.3 + 2 * runlog.SLICE + 1.0
    assert not log.append(f"dead-{name}", [(3, "{}")])  # its writer is told it ended
    assert runlog.run_info(store, f"dead-{name}").stop_reason == "interrupted"


def test_a_declared_interruption_aborts_a_run_that_was_only_slow(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store = open_stores()
    gate = Gate()
    agent = gated_agent(Session(name, store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)
    log = store.run_log()
    assert log.end(run.id, json.dumps({"type": "run_end", "stop_reason": "interrupted"}))
    log.lease = 0.2  # the writer's next beat finds the run ended
    assert gate.aborted.wait(WAIT)
    run.wait(WAIT)
    assert runlog.run_info(store, run.id).stop_reason == "interrupted"  # one end, never two
    agent.close()


def test_a_huge_event_is_logged_as_a_stub(store: SessionStore, name: str) -> None:
    @tool
    def dump() -> str:
        """A very long result."""
        return "x" * (runlog.MAX_EVENT_BYTES + 10)

    model = ScriptedModel([reply(tool_call("dump", {})), "ok"])
    agent = Agent(model=model.model, stream_fn=model, tools=[dump], session=Session(name, store))
    run = agent.start("go")
    run.wait(WAIT)
    ends = [e for e in collect(store, run.id) if e.type == "tool_execution_end"]
    assert ends[0].data["truncated"] > runlog.MAX_EVENT_BYTES
    assert ends[0].data["tool_name"] == "dump"
    results = [m for m in Session(name, store).load() if m.role == "tool_result"]
    assert len(results[0].content[0].text) == runlog.MAX_EVENT_BYTES + 10  # kept in full there


def delta(index: int, text: str, kind: str = "text_delta") -> str:
    return json.dumps({"type": "message_update", "t": 1,
                       "update": {"type": kind, "content_index": index, "delta": text}})


def test_coalescing_an_ended_run_keeps_every_resumer_exact(store: SessionStore, name: str) -> None:
    log = store.run_log()
    run_id = f"deltas-{name}"
    log.start(run_id, name)
    records = [json.dumps({"type": "run_start", "t": 1}), *(delta(0, f"w{i} ") for i in range(40)),
               delta(1, "{\"a\":", "toolcall_delta"), delta(1, "1}", "toolcall_delta"),
               json.dumps({"type": "message_end", "t": 1}), delta(0, "tail")]  # fmt: skip
    assert log.append(run_id, list(enumerate(records, start=1)))
    with pytest.raises(RunLogError, match="is live"):
        runlog.compact(store, run_id)
    log.end(run_id, json.dumps({"type": "run_end", "stop_reason": "stop", "t": 1}))
    before = collect(store, run_id)
    expected_from = {e.seq: text_of([x for x in before if x.seq > e.seq]) for e in before}
    removed = runlog.compact(store, run_id)
    after = collect(store, run_id)
    assert removed == len(before) - len(after) == 39 + 1
    assert [e.type for e in after] == ["run_start", "message_update", "message_update",
                                       "message_end", "message_update", "run_end"]  # fmt: skip
    assert after[-1].seq == before[-1].seq
    assert after[2].data["update"]["delta"] == '{"a":1}'
    for seq, rest in expected_from.items():  # resuming from any number seen before
        assert text_of(collect(store, run_id, after=seq)) == rest, seq
    assert runlog.compact(store, run_id) == 0


def test_a_store_without_run_logs_runs_unlogged(name: str) -> None:
    from agentkit.sessions import SessionInfo

    class Memory(SessionStore):
        def __init__(self) -> None:
            self.records: dict[str, list[str]] = {}

        def load(self, name: str) -> tuple[list[str], int]:
            records = self.records.get(name, [])
            return list(records), len(records)

        def append(self, name: str, records: Any, expected_version: int) -> int:
            self.records.setdefault(name, []).extend(records)
            return len(self.records[name])

        def list(self) -> list[SessionInfo]:
            return []

        def delete(self, name: str) -> bool:
            return self.records.pop(name, None) is not None

    memory = Memory()
    model = ScriptedModel(["fine"])
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, memory))
    assert agent.prompt("x").text == "fine"
    with pytest.raises(RunLogError, match="keeps no run log"):
        runlog.run_info(memory, "any")


def test_async_attach_follows_a_live_run(
    open_stores: Callable[[], SessionStore], name: str
) -> None:
    store, other = open_stores(), open_stores()
    gate = Gate()
    agent = gated_agent(Session(name, store), gate)
    run = agent.start("go")
    assert gate.started.wait(WAIT)

    async def follow() -> list[Any]:
        got = []
        async for event in runlog.aattach(other, run.id):
            got.append(event)
            if event.type == "tool_execution_start":
                gate.open.set()
        return got

    events = asyncio.run(asyncio.wait_for(follow(), WAIT))
    assert events[-1].type == "run_end" and [e.seq for e in events] == list(
        range(1, len(events) + 1)
    )

    async def unknown() -> None:
        async for _ in runlog.aattach(other, "no-such-run"):
            pass

    with pytest.raises(RunNotFoundError):
        asyncio.run(unknown())
    agent.close()


def test_run_logs_can_be_turned_off_for_a_store(store: SessionStore, name: str) -> None:
    store.run_logs = False
    model = ScriptedModel(["fine"])
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    run = agent.start("x")
    assert run.wait(WAIT) and run.result().text == "fine"
    with pytest.raises(RunLogError, match="run logs are off"):
        runlog.run_info(store, run.id)


def test_an_ended_runs_log_expires_after_keep(store: SessionStore, name: str) -> None:
    log = store.run_log()
    log.keep = 0.05
    old, new = f"old-{name}", f"new-{name}"
    log.start(old, name)
    log.end(old, json.dumps({"type": "run_end", "stop_reason": "stop", "t": 1}))
    deadline = time.monotonic() + WAIT
    while True:  # the next start past the keep prunes it (Redis expires it by itself)
        log._pruned_at = None
        log.start(new, name)
        try:
            runlog.run_info(store, old)
        except RunNotFoundError:
            break
        assert time.monotonic() < deadline, "an ended run's log was kept past its keep"
        threading.Event().wait(0.01)
    assert [r.id for r in runlog.runs(store, name)] == [new]
    assert runlog.run_info(store, new).live  # a live run is never pruned


def test_a_runs_log_exports_as_jsonl(store: SessionStore, name: str) -> None:
    import io

    model = ScriptedModel(["a line\u2028with a separator"])
    agent = Agent(model=model.model, stream_fn=model, session=Session(name, store))
    run = agent.start("x")
    run.wait(WAIT)
    out = io.StringIO()
    written = runlog.export_jsonl(store, run.id, out)
    lines = out.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == written + 2
    header = json.loads(lines[0])
    assert header == {"format": "agentkit-runlog", "version": 1, "run_id": run.id,
                      "session": name, "events": written}  # fmt: skip
    events = [json.loads(line) for line in lines[1:-1]]
    assert [e["seq"] for e in events] == list(range(1, written + 1))
    assert events[-1]["type"] == "run_end"


def test_no_password_in_a_run_logs_errors(store_url: str) -> None:
    if not store_url.startswith(("postgresql", "redis")):
        pytest.skip("a SQLite file has no password")
    scheme, rest = store_url.split("://", 1)
    user = "postgres" if scheme == "postgresql" else ""
    host = rest.split("@", 1)[-1]
    from agentkit.sessions import open_store

    # The test servers trust every local connection, so a password is accepted and ignored.
    with open_store(f"{scheme}://{user}:s3cret-pw@{host}") as secret_store:
        with pytest.raises(RunNotFoundError) as caught:
            runlog.run_info(secret_store, "no-such-run")
        assert "s3cret-pw" not in str(caught.value)
        assert "s3cret-pw" not in secret_store.run_log().url
