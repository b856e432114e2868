"""Tool calls in the loop (SPEC 4.5, B10-B33): preflight, execution modes, results, updates, and
the abort and timing departures of API.md (1 and 4)."""

from __future__ import annotations

import contextvars
import json
import threading
from typing import Any

import pytest

from agentkit import (
    AbortController,
    AfterToolCallResult,
    Agent,
    AgentContext,
    AgentToolResult,
    AssistantMessage,
    BeforeToolCallResult,
    TextContent,
    ToolCall,
    Usage,
    run_tool_call,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import WAIT, Recorder, label, make_tool, roles, run_loop, text_of

STRING_V = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]}
TRUNCATED = (
    'Tool call "echo" was not executed: the response hit the output token limit, so its '
    "arguments may be truncated. Re-issue the tool call with complete arguments."
)


def _after_first_reply(rec: Recorder) -> list[str]:
    """The labels that follow the first assistant message's end (updates left out)."""
    labels = rec.labels()
    return labels[labels.index("me:assistant") + 1 :]


def _tee(run: Any, call_id: str) -> Any:
    return next(e for e in run.rec.of("tool_execution_end") if e.tool_call_id == call_id)


def _result_message(run: Any, call_id: str) -> Any:
    return next(
        m for m in run.new_messages if m.role == "tool_result" and m.tool_call_id == call_id
    )


def test_b10_one_tool_call_runs_once_and_the_loop_asks_again() -> None:
    echo = make_tool("echo")
    controller = AbortController()
    run = run_loop(
        [reply(tool_call("echo", {"x": 1}, id="c1")), "all done"],
        tools=[echo],
        signal=controller.signal,
    )

    assert [(c.tool_call_id, c.params) for c in echo.calls] == [("c1", {"x": 1})]
    assert echo.calls[0].signal is controller.signal
    assert len(run.requests) == 2
    start = run.rec.of("tool_execution_start")
    assert [(e.tool_call_id, e.tool_name, e.args) for e in start] == [("c1", "echo", {"x": 1})]
    end = run.rec.of("tool_execution_end")
    assert [(e.tool_call_id, e.is_error, e.result.text) for e in end] == [
        ("c1", False, "echo done")
    ]
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result", "assistant"]
    assert run.requests[1].messages[-1].role == "tool_result"
    # The end event and the result message carry how long execute() took.
    assert isinstance(end[0].duration_ms, float) and end[0].duration_ms >= 0
    assert _result_message(run, "c1").duration_ms == end[0].duration_ms


def test_b11_after_tool_call_sees_and_replaces_usage() -> None:
    own = Usage(input=1, output=2, total_tokens=3)
    replaced = Usage(input=10, output=20, total_tokens=30)
    seen: list[Any] = []

    def after(ctx: Any, signal: Any) -> AfterToolCallResult:
        seen.append(ctx.result.usage)
        return AfterToolCallResult(usage=replaced)

    tool = make_tool("echo", lambda *_: AgentToolResult(content="ok", usage=own))
    run = run_loop(
        [reply(tool_call("echo", {}, id="c1")), "done"], tools=[tool], after_tool_call=after
    )

    assert seen == [own]
    assert _tee(run, "c1").result.usage == replaced
    assert _result_message(run, "c1").usage == replaced


def test_b12_length_truncated_tool_call_never_runs() -> None:
    echo = make_tool("echo")
    before_calls: list[str] = []
    run = run_loop(
        [reply(tool_call("echo", {"x": 1}, id="c1"), stop_reason="length"), "retrying"],
        tools=[echo],
        before_tool_call=lambda ctx, signal: before_calls.append(ctx.tool_call.id),
    )

    assert echo.calls == []
    assert before_calls == []
    end = _tee(run, "c1")
    assert end.is_error is True
    assert "output token limit" in end.result.text
    assert end.result.text == TRUNCATED
    assert end.duration_ms is None
    assert _result_message(run, "c1").is_error is True
    assert len(run.requests) == 2
    assert run.new_messages[-1].role == "assistant"
    assert _after_first_reply(run.rec) == [
        "tes:c1",
        "tee:c1",
        "ms:tool_result:c1",
        "me:tool_result:c1",
        "turn_end",
        "turn_start",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]


def test_b12_each_truncated_call_is_answered_in_order() -> None:
    echo = make_tool("echo")
    other = make_tool("other")
    run = run_loop(
        [
            reply(
                tool_call("echo", {"x": 1}, id="c1"),
                tool_call("other", {"y": 2}, id="c2"),
                stop_reason="length",
            ),
            "retrying",
        ],
        tools=[echo, other],
    )

    assert echo.calls == [] and other.calls == []
    assert _after_first_reply(run.rec)[:9] == [
        "tes:c1",
        "tee:c1",
        "ms:tool_result:c1",
        "me:tool_result:c1",
        "tes:c2",
        "tee:c2",
        "ms:tool_result:c2",
        "me:tool_result:c2",
        "turn_end",
    ]
    assert _tee(run, "c2").result.text == TRUNCATED.replace('"echo"', '"other"')
    assert len(run.requests) == 2


def test_b13_arguments_mutated_by_before_tool_call_skip_revalidation() -> None:
    tool = make_tool("echo", parameters=STRING_V)

    def before(ctx: Any, signal: Any) -> None:
        assert ctx.args == {"v": "text"}
        ctx.args["v"] = 123

    run = run_loop(
        [reply(tool_call("echo", {"v": "text"}, id="c1")), "done"],
        tools=[tool],
        before_tool_call=before,
    )

    assert [c.params for c in tool.calls] == [{"v": 123}]
    assert _tee(run, "c1").is_error is False


def test_b14_prepare_arguments_runs_before_validation() -> None:
    schema = {
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                    "required": ["oldText", "newText"],
                },
            }
        },
        "required": ["edits"],
    }
    raw_seen: list[Any] = []

    def prepare(raw: Any) -> Any:
        raw_seen.append(dict(raw))
        if "edits" in raw:
            return raw
        return {"edits": [{"oldText": raw["oldText"], "newText": raw["newText"]}]}

    edit = make_tool("edit", parameters=schema, prepare_arguments=prepare)
    run = run_loop(
        [reply(tool_call("edit", {"oldText": "a", "newText": "b"}, id="c1")), "done"],
        tools=[edit],
    )

    assert raw_seen == [{"oldText": "a", "newText": "b"}]
    assert [c.params for c in edit.calls] == [{"edits": [{"oldText": "a", "newText": "b"}]}]
    assert _tee(run, "c1").is_error is False


def test_b15_parallel_end_order_vs_result_order() -> None:
    rec = Recorder()
    b_ended = rec.when_label("tee:b")

    def slow(*_: Any) -> str:
        # A finishes only after B has finished and its end event was emitted: B ran while A ran.
        assert b_ended.wait(WAIT), "B never finished while A was running"
        return "A result"

    run = run_loop(
        [reply(tool_call("slow", {}, id="a"), tool_call("fast", {}, id="b")), "done"],
        tools=[make_tool("slow", slow), make_tool("fast")],
        rec=rec,
    )

    assert [e.tool_call_id for e in rec.of("tool_execution_end")] == ["b", "a"]
    # Every event is emitted on the loop's (here: the test's) thread, never on a tool's.
    assert set(rec.threads) == {threading.current_thread()}
    assert all(not e.is_error for e in rec.of("tool_execution_end"))
    result_ends = [
        e.message.tool_call_id for e in rec.of("message_end") if e.message.role == "tool_result"
    ]
    assert result_ends == ["a", "b"]
    turn_end = rec.of("turn_end")[0]
    assert [m.tool_call_id for m in turn_end.tool_results] == ["a", "b"]
    # SPEC 3.3 "Parallel tools".
    assert _after_first_reply(rec) == [
        "tes:a",
        "tes:b",
        "tee:b",
        "tee:a",
        "ms:tool_result:a",
        "me:tool_result:a",
        "ms:tool_result:b",
        "me:tool_result:b",
        "turn_end",
        "turn_start",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    assert len(run.requests) == 2


def test_b16_parallel_preflights_all_finish_before_any_execution() -> None:
    rec = Recorder()
    log: list[str] = []
    lock = threading.Lock()

    def before(ctx: Any, signal: Any) -> None:
        with lock:
            log.append(f"before:{ctx.tool_call.id}")
        # Each call's start event comes before its own preflight.
        assert rec.labels()[-1] == f"tes:{ctx.tool_call.id}"

    def body(call_id: str, *_: Any) -> str:
        with lock:
            log.append(f"execute:{call_id}")
        return "ok"

    run_loop(
        [
            reply(
                tool_call("work", {}, id="c1"),
                tool_call("work", {}, id="c2"),
                tool_call("work", {}, id="c3"),
            ),
            "done",
        ],
        tools=[make_tool("work", body)],
        before_tool_call=before,
        rec=rec,
    )

    assert log[:3] == ["before:c1", "before:c2", "before:c3"]
    assert [e.is_error for e in rec.of("tool_execution_end")] == [False, False, False]
    assert sorted(log[3:]) == ["execute:c1", "execute:c2", "execute:c3"]


def test_b17_parallel_preflight_failure_ends_at_once() -> None:
    run = run_loop(
        [
            reply(
                tool_call("work", {}, id="a"),
                tool_call("missing", {}, id="x"),
                tool_call("work", {}, id="c"),
            ),
            "done",
        ],
        tools=[make_tool("work")],
    )

    labels = [lb for lb in run.rec.labels() if lb.startswith(("tes:", "tee:"))]
    assert labels[:4] == ["tes:a", "tes:x", "tee:x", "tes:c"]
    assert sorted(labels[4:]) == ["tee:a", "tee:c"]
    assert _tee(run, "x").is_error is True
    results = [m.tool_call_id for m in run.new_messages if m.role == "tool_result"]
    assert results == ["a", "x", "c"]
    turn_end = run.rec.of("turn_end")[0]
    assert [m.tool_call_id for m in turn_end.tool_results] == ["a", "x", "c"]


def test_b18_one_sequential_tool_makes_the_batch_sequential() -> None:
    rec = Recorder()
    second_announced = rec.when_label("tes:c2")
    seen_overlap: list[bool] = []
    active = [0]
    lock = threading.Lock()

    def body(call_id: str, *_: Any) -> str:
        with lock:
            active[0] += 1
            seen_overlap.append(active[0] > 1 or (call_id == "c1" and second_announced.is_set()))
        with lock:
            active[0] -= 1
        return f"result {call_id}"

    run = run_loop(
        [reply(tool_call("seq", {}, id="c1"), tool_call("seq", {}, id="c2")), "done"],
        tools=[make_tool("seq", body, execution_mode="sequential")],
        rec=rec,
    )

    assert seen_overlap == [False, False]
    assert _after_first_reply(rec)[:8] == [
        "tes:c1",
        "tee:c1",
        "ms:tool_result:c1",
        "me:tool_result:c1",
        "tes:c2",
        "tee:c2",
        "ms:tool_result:c2",
        "me:tool_result:c2",
    ]
    assert [text_of(m) for m in run.new_messages if m.role == "tool_result"] == [
        "result c1",
        "result c2",
    ]


def test_b19_sequential_tool_in_mixed_batch_holds_back_the_other() -> None:
    rec = Recorder()
    other_announced = rec.when_label("tes:fast")
    slow_done = threading.Event()
    observed: dict[str, bool] = {}

    def slow(*_: Any) -> str:
        observed["other announced while slow ran"] = other_announced.is_set()
        slow_done.set()
        return "slow"

    def fast(*_: Any) -> str:
        observed["slow finished before fast started"] = slow_done.is_set()
        return "fast"

    run_loop(
        [reply(tool_call("slow", {}, id="slow"), tool_call("fast", {}, id="fast")), "done"],
        tools=[make_tool("slow", slow, execution_mode="sequential"), make_tool("fast", fast)],
        rec=rec,
    )

    assert observed == {
        "other announced while slow ran": False,
        "slow finished before fast started": True,
    }
    assert rec.index("tee:slow") < rec.index("tes:fast")


def test_b20_parallel_tools_overlap() -> None:
    both_running = threading.Barrier(2, timeout=WAIT)

    def body(*_: Any) -> str:
        both_running.wait()  # breaks (and the tool errors) unless both calls run at once
        return "ok"

    run = run_loop(
        [reply(tool_call("p", {}, id="c1"), tool_call("p", {}, id="c2")), "done"],
        tools=[make_tool("p", body, execution_mode="parallel")],
    )

    assert [e.is_error for e in run.rec.of("tool_execution_end")] == [False, False]
    # The batch's pool ends with the batch: no tool thread outlives the run.
    assert not [t for t in threading.enumerate() if t.name.startswith("agentkit-tool")]


def test_b21_sequential_result_message_precedes_next_call() -> None:
    rec = Recorder()
    preflight_saw: list[str] = []
    run = run_loop(
        [
            reply(
                tool_call("echo", {}, id="c1"),
                tool_call("echo", {}, id="c2"),
                tool_call("echo", {}, id="c3"),
            ),
            "done",
        ],
        tools=[make_tool("echo")],
        tool_execution="sequential",
        before_tool_call=lambda ctx, signal: preflight_saw.append(rec.labels()[-1]),
        rec=rec,
    )

    tool_part = _after_first_reply(run.rec)[:13]
    assert tool_part == [
        "tes:c1",
        "tee:c1",
        "ms:tool_result:c1",
        "me:tool_result:c1",
        "tes:c2",
        "tee:c2",
        "ms:tool_result:c2",
        "me:tool_result:c2",
        "tes:c3",
        "tee:c3",
        "ms:tool_result:c3",
        "me:tool_result:c3",
        "turn_end",
    ]
    # Each preflight runs right after its own start event.
    assert preflight_saw == ["tes:c1", "tes:c2", "tes:c3"]


def test_b22_unknown_tool_is_an_error_result() -> None:
    run = run_loop([reply(tool_call("X", {}, id="c1")), "done"], tools=[make_tool("echo")])

    end = _tee(run, "c1")
    assert end.is_error is True
    assert end.result.text == "Tool X not found"
    assert end.result.details == {}
    assert end.duration_ms is None
    message = _result_message(run, "c1")
    assert message.is_error is True and text_of(message) == "Tool X not found"
    assert len(run.requests) == 2


def test_b23_validation_failure_text() -> None:
    tool = make_tool("A", parameters=STRING_V)
    args = {"v": ["not", "a", "string"], "extra": {"n": 1}}
    run = run_loop([reply(tool_call("A", args, id="c1")), "done"], tools=[tool])

    assert tool.calls == []
    end = _tee(run, "c1")
    assert end.is_error is True
    text = end.result.text
    assert text.startswith('Validation failed for tool "A":\n')
    assert "\n  - v: must be string\n" in text
    assert text.endswith("\n\nReceived arguments:\n" + json.dumps(args, indent=2))


def test_b24_arguments_are_coerced_before_validation() -> None:
    tool = make_tool("A", parameters=STRING_V)
    run = run_loop([reply(tool_call("A", {"v": 5}, id="c1")), "done"], tools=[tool])

    assert [c.params for c in tool.calls] == [{"v": "5"}]
    assert _tee(run, "c1").is_error is False


def test_b25_throwing_tool_gives_error_result_and_loop_continues() -> None:
    def boom(*_: Any) -> Any:
        raise RuntimeError("disk on fire")

    run = run_loop(
        [reply(tool_call("boom", {}, id="c1")), "recovered"], tools=[make_tool("boom", boom)]
    )

    end = _tee(run, "c1")
    assert end.is_error is True
    assert [c.model_dump() for c in end.result.content] == [
        TextContent(text="disk on fire").model_dump()
    ]
    assert end.result.details == {}
    assert _result_message(run, "c1").is_error is True
    assert len(run.requests) == 2
    assert text_of(run.new_messages[-1]) == "recovered"


def test_b26_is_error_result_keeps_details_and_structured_content_on_the_event_only() -> None:
    def failing(*_: Any) -> AgentToolResult:
        return AgentToolResult(
            content="bad input",
            details={"code": 7},
            structured_content={"why": "bad"},
            is_error=True,
        )

    run = run_loop([reply(tool_call("f", {}, id="c1")), "done"], tools=[make_tool("f", failing)])

    end = _tee(run, "c1")
    assert end.is_error is True
    assert end.result.details == {"code": 7}
    assert end.result.structured_content == {"why": "bad"}
    message = _result_message(run, "c1")
    assert message.is_error is True
    assert message.details == {"code": 7}
    assert "structured_content" not in message.model_dump()
    assert len(run.requests) == 2


def test_b27_block_without_reason_uses_default_text() -> None:
    tool = make_tool("echo")
    run = run_loop(
        [reply(tool_call("echo", {}, id="c1")), "done"],
        tools=[tool],
        before_tool_call=lambda ctx, signal: BeforeToolCallResult(block=True),
    )

    assert tool.calls == []
    end = _tee(run, "c1")
    assert end.is_error is True
    assert end.result.text == "Tool execution was blocked"


def test_b28_all_calls_blocked_with_terminate_end_the_run() -> None:
    tool = make_tool("echo")
    run = run_loop(
        [reply(tool_call("echo", {}, id="c1"), tool_call("echo", {}, id="c2")), "never"],
        tools=[tool],
        before_tool_call=lambda ctx, signal: {"block": True, "reason": "no", "terminate": True},
    )

    assert tool.calls == []
    assert len(run.requests) == 1
    assert run.rec.types.count("turn_start") == 1
    assert run.rec.types.count("turn_end") == 1
    assert [e.result.text for e in run.rec.of("tool_execution_end")] == ["no", "no"]
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result", "tool_result"]


def test_b29_after_tool_call_raise_replaces_result_and_drops_terminate() -> None:
    tool = make_tool("t", lambda *_: AgentToolResult(content="fine", terminate=True))

    def after(ctx: Any, signal: Any) -> None:
        raise ValueError("audit failed")

    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "continued"], tools=[tool], after_tool_call=after
    )

    end = _tee(run, "c1")
    assert end.is_error is True
    assert end.result.text == "audit failed"
    assert end.result.terminate is False
    assert _result_message(run, "c1").is_error is True
    assert len(run.requests) == 2
    assert text_of(run.new_messages[-1]) == "continued"


def test_b30_after_tool_call_field_level_replacement() -> None:
    original = AgentToolResult(content="original", details={"d": 1}, structured_content={"s": 1})
    changes = {
        "c-content": AfterToolCallResult(content=[TextContent(text="replaced")]),
        "c-details": AfterToolCallResult(details={"d": 2}),
    }
    tool = make_tool("t", lambda *_: original.model_copy())
    run = run_loop(
        [reply(tool_call("t", {}, id="c-content"), tool_call("t", {}, id="c-details")), "done"],
        tools=[tool],
        after_tool_call=lambda ctx, signal: changes[ctx.tool_call.id],
    )

    content_only = _tee(run, "c-content").result
    assert content_only.text == "replaced"
    assert content_only.structured_content is None
    assert content_only.details == {"d": 1}
    details_only = _tee(run, "c-details").result
    assert details_only.text == "original"
    assert details_only.structured_content == {"s": 1}
    assert details_only.details == {"d": 2}


def test_b30_after_tool_call_replaces_is_error_and_keeps_unset_fields() -> None:
    tool = make_tool("t", lambda *_: AgentToolResult(content="looks fine", details={"d": 1}))
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[tool],
        after_tool_call=lambda ctx, signal: {"is_error": True},
    )

    end = _tee(run, "c1")
    assert end.is_error is True
    assert end.result.text == "looks fine"
    assert end.result.details == {"d": 1}
    assert _result_message(run, "c1").is_error is True


def test_b31_updates_after_settling_emit_nothing() -> None:
    saved: list[Any] = []
    errors: list[BaseException] = []

    def body(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        on_update({"progress": 50})
        saved.append(on_update)
        return "done"

    def late_update(context: Any, options: Any) -> str:
        try:
            saved[0]({"progress": "late"})  # the tool settled a turn ago
        except BaseException as exc:  # noqa: BLE001 - recorded and asserted below
            errors.append(exc)
        return "final"

    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), late_update],
        tools=[make_tool("t", body)],
    )
    late_thread = threading.Thread(target=saved[0], args=({"progress": "after run"},))
    late_thread.start()
    late_thread.join(WAIT)

    updates = run.rec.of("tool_execution_update")
    assert [(u.tool_call_id, u.partial_result) for u in updates] == [("c1", {"progress": 50})]
    assert run.rec.index("tes:c1") < run.rec.index("teu:c1") < run.rec.index("tee:c1")
    assert errors == []
    assert text_of(run.new_messages[-1]) == "final"


def test_b31_run_tool_call_ignores_updates_after_settling() -> None:
    received: list[Any] = []
    saved: list[Any] = []

    def body(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        on_update("during")
        saved.append(on_update)
        return "done"

    tool = make_tool("t", body)
    call = ToolCall(id="c1", name="t", arguments={})
    outcome = run_tool_call(
        call,
        tools=[tool],
        assistant_message=AssistantMessage(content=[call], stop_reason="tool_use"),
        context=AgentContext(tools=[tool]),
        on_update=received.append,
    )
    saved[0]("after")

    assert received == ["during"]
    assert outcome.is_error is False and outcome.result.text == "done"


def test_b32_late_update_from_settled_parallel_tool_is_ignored() -> None:
    rec = Recorder()
    quick_ended = rec.when_label("tee:quick")
    saved: list[Any] = []

    def quick(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        saved.append(on_update)
        return "quick"

    def slow(*_: Any) -> str:
        assert quick_ended.wait(WAIT)
        saved[0]({"late": True})  # quick has settled; slow is still running
        return "slow"

    run = run_loop(
        [reply(tool_call("slow", {}, id="slow"), tool_call("quick", {}, id="quick")), "done"],
        tools=[make_tool("slow", slow), make_tool("quick", quick)],
        rec=rec,
    )

    assert run.rec.of("tool_execution_update") == []
    assert [e.tool_call_id for e in rec.of("tool_execution_end")] == ["quick", "slow"]
    assert all(not e.is_error for e in rec.of("tool_execution_end"))


def test_b33_pending_tool_calls_track_execution() -> None:
    model = ScriptedModel([reply(tool_call("calc", {}, id="calc-1")), "4"])
    agent = Agent(model=model.model, stream_fn=model, tools=[make_tool("calc")])
    seen: dict[str, Any] = {}

    def listener(event: Any) -> None:
        if event.type in ("tool_execution_start", "tool_execution_end"):
            seen[event.type] = agent.state.pending_tool_calls

    agent.subscribe(listener)
    agent.prompt("2 + 2?")

    assert seen["tool_execution_start"] == frozenset({"calc-1"})
    assert seen["tool_execution_end"] == frozenset()
    assert agent.state.pending_tool_calls == frozenset()


# --- abort during tools ----------------------------------------------------------------------


def test_d1_sequential_abort_gives_every_call_a_result_and_ends_after_the_batch() -> None:
    controller = AbortController()
    before_calls: list[str] = []

    def first(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        controller.abort()
        signal.throw_if_aborted()
        return "unreachable"

    work = make_tool("work")
    run = run_loop(
        [
            reply(
                tool_call("first", {}, id="c1"),
                tool_call("work", {}, id="c2"),
                tool_call("work", {}, id="c3"),
            ),
            "never requested",
        ],
        tools=[make_tool("first", first), work],
        tool_execution="sequential",
        before_tool_call=lambda ctx, signal: before_calls.append(ctx.tool_call.id),
        signal=controller.signal,
    )

    assert before_calls == ["c1"]  # the signal is checked before each preflight
    assert work.calls == []
    ends = run.rec.of("tool_execution_end")
    assert [(e.tool_call_id, e.is_error) for e in ends] == [
        ("c1", True),
        ("c2", True),
        ("c3", True),
    ]
    assert ends[1].result.text == "Operation aborted"
    assert ends[2].result.text == "Operation aborted"
    assert ends[1].duration_ms is None and ends[2].duration_ms is None
    assert ends[0].duration_ms is not None
    assert [m.tool_call_id for m in run.new_messages if m.role == "tool_result"] == [
        "c1",
        "c2",
        "c3",
    ]
    assert len(run.requests) == 1
    assert run.rec.labels()[-2:] == ["turn_end", "agent_end"]
    assert run.rec.types.count("turn_start") == 1


def test_d1_parallel_abort_in_preflight_gives_every_call_a_result() -> None:
    controller = AbortController()
    before_calls: list[str] = []

    def before(ctx: Any, signal: Any) -> None:
        before_calls.append(ctx.tool_call.id)
        controller.abort()

    work = make_tool("work")
    run = run_loop(
        [
            reply(
                tool_call("work", {}, id="c1"),
                tool_call("work", {}, id="c2"),
                tool_call("work", {}, id="c3"),
            ),
            "never requested",
        ],
        tools=[work],
        before_tool_call=before,
        signal=controller.signal,
    )

    assert before_calls == ["c1"]
    assert work.calls == []
    ends = run.rec.of("tool_execution_end")
    assert [(e.tool_call_id, e.result.text) for e in ends] == [
        ("c1", "Operation aborted"),
        ("c2", "Operation aborted"),
        ("c3", "Operation aborted"),
    ]
    assert len([m for m in run.new_messages if m.role == "tool_result"]) == 3
    assert len(run.requests) == 1
    assert run.rec.labels()[-2:] == ["turn_end", "agent_end"]


def test_d1_parallel_abort_during_execution_stops_calls_not_yet_started() -> None:
    controller = AbortController()

    def aborting(*_: Any) -> str:
        controller.abort()
        return "finished anyway"

    work = make_tool("work")
    run = run_loop(
        [reply(tool_call("aborting", {}, id="c1"), tool_call("work", {}, id="c2")), "never"],
        tools=[make_tool("aborting", aborting), work],
        max_tool_workers=1,  # c2 can only start once c1 has returned, after the abort
        signal=controller.signal,
    )

    assert work.calls == []
    first, second = _tee(run, "c1"), _tee(run, "c2")
    assert (first.is_error, first.result.text) == (False, "finished anyway")
    assert first.duration_ms is not None
    assert (second.is_error, second.result.text) == (True, "Operation aborted")
    # A call that never executed has no duration.
    assert second.duration_ms is None
    assert _result_message(run, "c2").duration_ms is None
    assert len(run.requests) == 1
    assert run.rec.labels()[-2:] == ["turn_end", "agent_end"]


def test_d1_parallel_abort_while_tools_run_ends_after_the_batch() -> None:
    controller = AbortController()
    b_running = threading.Event()

    def aborter(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        assert b_running.wait(WAIT)
        controller.abort()
        signal.throw_if_aborted()
        return "unreachable"

    def waiter(call_id: str, params: Any, signal: Any, on_update: Any) -> str:
        b_running.set()
        assert signal.wait(WAIT), "the running tool never saw the abort"
        signal.throw_if_aborted()
        return "unreachable"

    run = run_loop(
        [reply(tool_call("aborter", {}, id="a"), tool_call("waiter", {}, id="b")), "never"],
        tools=[make_tool("aborter", aborter), make_tool("waiter", waiter)],
        signal=controller.signal,
    )

    ends = {e.tool_call_id: e for e in run.rec.of("tool_execution_end")}
    assert {k: (e.is_error, e.result.text) for k, e in ends.items()} == {
        "a": (True, "Operation aborted"),
        "b": (True, "Operation aborted"),
    }
    assert ends["a"].duration_ms is not None and ends["b"].duration_ms is not None
    assert [m.tool_call_id for m in run.new_messages if m.role == "tool_result"] == ["a", "b"]
    assert len(run.requests) == 1
    assert run.rec.labels()[-2:] == ["turn_end", "agent_end"]


# --- the contextvars a call runs in -------------------------------------------------------------

CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("CALL", default=None)
"""What the probe listener sets on a tool call's start event (a tracer sets its span)."""


class _ContextProbe(Recorder):
    """Records events; on a call's start event sets ``CALL`` to its id, and notes what ``CALL``
    was when each other event (or the start event itself, before setting it) was emitted."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None]] = []

    def __call__(self, event: Any) -> None:
        super().__call__(event)
        self.seen.append((label(event), CALL.get()))
        if event.type == "tool_execution_start":
            CALL.set(event.tool_call_id)


@pytest.mark.parametrize("mode", ["parallel", "sequential", "truncated"])
def test_each_call_runs_in_the_contextvars_its_start_event_was_emitted_in(mode: str) -> None:
    # What a listener sets on a call's start event reaches that call's preflight and execution,
    # and nothing else: not the batch's other calls, not the loop's thread afterwards.
    in_tool: dict[str, str | None] = {}
    in_hook: dict[str, str | None] = {}
    probe = make_tool("probe", lambda call_id, *_: in_tool.setdefault(call_id, CALL.get()) or "")
    calls = [tool_call("probe", {}, id=f"c{i}") for i in (1, 2, 3)]
    calls.append(tool_call("missing", {}, id="c4"))  # fails in preflight: ends on the loop thread
    run = run_loop(
        [reply(*calls, stop_reason="length" if mode == "truncated" else "tool_use"), "done"],
        tools=[probe],
        rec=_ContextProbe(),
        tool_execution="sequential" if mode == "sequential" else "parallel",
        before_tool_call=lambda ctx, signal: in_hook.update({ctx.tool_call.id: CALL.get()}),
    )

    ran = {} if mode == "truncated" else {f"c{i}": f"c{i}" for i in (1, 2, 3)}
    assert in_tool == ran
    assert in_hook == ran
    seen = run.rec.seen  # type: ignore[attr-defined]
    assert [name for name, _ in seen].count("tes:c1") == 1
    assert [value for _, value in seen] == [None] * len(seen)
    assert run.rec.labels()[-1] == "agent_end"


def test_run_tool_call_runs_in_a_copy_of_the_callers_contextvars() -> None:
    seen: list[str | None] = []

    def before(ctx: Any, signal: Any) -> None:
        seen.append(CALL.get())
        CALL.set("hook")  # reaches the tool, not the caller

    def body(*_: Any) -> str:
        seen.append(CALL.get())
        CALL.set("tool")
        return "done"

    tool = make_tool("t", body)
    call = ToolCall(id="c1", name="t", arguments={})
    token = CALL.set("caller")
    try:
        outcome = run_tool_call(
            call,
            tools=[tool],
            assistant_message=AssistantMessage(content=[call], stop_reason="tool_use"),
            context=AgentContext(tools=[tool]),
            before_tool_call=before,
        )
        assert CALL.get() == "caller"
    finally:
        CALL.reset(token)
    assert outcome.result.text == "done"
    assert seen == ["caller", "hook"]


def test_a_batch_wider_than_max_tool_workers_reuses_its_threads() -> None:
    two_running = threading.Barrier(2, timeout=WAIT)
    lock = threading.Lock()
    running, most, names = 0, 0, set()

    def body(*_: Any) -> str:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            names.add(threading.current_thread().name)
        two_running.wait()  # four calls in pairs: each pair must run at once (or this raises)
        with lock:
            running -= 1
        return "ok"

    calls = [tool_call("p", {}, id=f"c{i}") for i in range(4)]
    run = run_loop([reply(*calls), "done"], tools=[make_tool("p", body)], max_tool_workers=2)

    ends = run.rec.of("tool_execution_end")
    assert sorted((e.tool_call_id, e.is_error) for e in ends) == [
        (f"c{i}", False) for i in range(4)
    ]
    results = [m for m in run.new_messages if m.role == "tool_result"]
    assert [m.tool_call_id for m in results] == [f"c{i}" for i in range(4)]  # asked order
    assert most == 2 and len(names) == 2  # two threads, each reused for later calls
    assert not [t for t in threading.enumerate() if t.name.startswith("agentkit-tool")]
