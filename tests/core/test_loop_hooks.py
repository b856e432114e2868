"""Terminate, finish_turn and the prepare hooks (SPEC 2.7, 4.2, B34-B46)."""

from __future__ import annotations

from typing import Any

import pytest

from agentkit import (
    AfterToolCallResult,
    Agent,
    AgentContext,
    AgentToolResult,
    SystemMessage,
    TurnUpdate,
)
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import Recorder, make_tool, roles, run_loop, text_of, user


def _terminating(*_: Any) -> AgentToolResult:
    return AgentToolResult(content="stop here", terminate=True)


def test_b34_all_results_terminate_after_one_request() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1"), tool_call("t", {}, id="c2")), "never"],
        tools=[make_tool("t", _terminating)],
    )

    assert len(run.requests) == 1
    assert run.model.remaining == 1
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result", "tool_result"]
    assert run.rec.types.count("turn_end") == 1
    assert run.rec.labels()[-2:] == ["turn_end", "agent_end"]


def test_b34_single_terminating_result() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "never"], tools=[make_tool("t", _terminating)]
    )

    assert len(run.requests) == 1
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result"]
    assert run.rec.types.count("turn_end") == 1


def test_b34_terminate_only_cancels_the_automatic_request() -> None:
    steering = iter([[], [user("steer")]])
    follow_ups = iter([[user("follow")]])
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), reply(tool_call("t", {}, id="c2")), "end", "never"],
        tools=[make_tool("t", _terminating)],
        get_steering_messages=lambda: next(steering, []),
        get_follow_up_messages=lambda: next(follow_ups, []),
    )

    # Terminated batch 1, then the steering message; terminated batch 2, then the follow-up.
    assert len(run.requests) == 3
    assert [text_of(r.messages[-1]) for r in run.requests[1:]] == ["steer", "follow"]


def test_b35_mixed_terminate_batch_continues() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1"), tool_call("plain", {}, id="c2")), "after"],
        tools=[make_tool("t", _terminating), make_tool("plain")],
    )

    assert len(run.requests) == 2
    assert roles(run.new_messages) == [
        "system",
        "user",
        "assistant",
        "tool_result",
        "tool_result",
        "assistant",
    ]
    assert run.rec.types.count("turn_end") == 2


def test_b36_after_tool_call_terminate_alone_ends_the_batch() -> None:
    run = run_loop(
        [reply(tool_call("plain", {}, id="c1")), "never"],
        tools=[make_tool("plain")],
        after_tool_call=lambda ctx, signal: AfterToolCallResult(terminate=True),
    )

    assert len(run.requests) == 1
    end = run.rec.of("tool_execution_end")[0]
    assert end.result.terminate is True and end.is_error is False
    assert end.result.text == "plain done"


def test_b37_finish_turn_end_after_tool_turn() -> None:
    polls = {"steering": 0, "follow_up": 0}
    turns: list[Any] = []

    def steering() -> list[Any]:
        polls["steering"] += 1
        return []

    def follow_ups() -> list[Any]:
        polls["follow_up"] += 1
        return [user("a follow-up is waiting")]

    def finish(turn: Any, signal: Any) -> dict[str, str]:
        turns.append(turn)
        return {"action": "end"}

    tool = make_tool("t")
    run = run_loop(
        [reply(tool_call("t", {}, id="tool-1")), "never"],
        tools=[tool],
        finish_turn=finish,
        get_steering_messages=steering,
        get_follow_up_messages=follow_ups,
    )

    assert len(run.requests) == 1
    assert [c.tool_call_id for c in tool.calls] == ["tool-1"]
    assert polls == {"steering": 1, "follow_up": 0}
    assert len(turns) == 1
    assert [m.tool_call_id for m in turns[0].tool_results] == ["tool-1"]
    assert roles(turns[0].context.messages) == ["system", "user", "assistant", "tool_result"]
    assert run.rec.labels() == [
        "agent_start",
        "turn_start",
        "ms:system",
        "me:system",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "tes:tool-1",
        "tee:tool-1",
        "ms:tool_result:tool-1",
        "me:tool_result:tool-1",
        "turn_end",
        "agent_end",
    ]


def test_b37_finish_turn_end_accepts_the_plain_literal() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "never"],
        tools=[make_tool("t")],
        finish_turn=lambda turn, signal: "end",
    )

    assert len(run.requests) == 1


@pytest.mark.parametrize("failure", ["error", "aborted"])
def test_b38_finish_turn_runs_before_turn_end_and_cannot_continue_a_failure(
    failure: str,
) -> None:
    rec = Recorder()
    calls: list[tuple[Any, list[str]]] = []
    tool = make_tool("t")
    if failure == "error":
        bad = reply(tool_call("t", {}, id="c1"), error="provider broke")
    else:
        bad = reply(tool_call("t", {}, id="c1"), stop_reason="aborted")

    def finish(turn: Any, signal: Any) -> str:
        calls.append((turn, rec.labels()))
        return "continue"

    run = run_loop([bad, "never"], tools=[tool], finish_turn=finish, rec=rec)

    assert len(run.requests) == 1
    assert tool.calls == []
    assert rec.of("tool_execution_start") == []
    assert len(calls) == 1
    turn, labels_then = calls[0]
    assert turn.message.stop_reason == failure
    assert turn.tool_results == []
    assert labels_then[-1] == "me:assistant"
    assert rec.labels()[-2:] == ["turn_end", "agent_end"]
    assert rec.of("turn_end")[0].tool_results == []
    assert run.new_messages[-1].stop_reason == failure


def test_b38_finish_turn_runs_before_turn_end_on_a_normal_turn() -> None:
    rec = Recorder()
    seen: list[list[str]] = []
    run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        finish_turn=lambda turn, signal: seen.append(rec.labels()),
        rec=rec,
    )

    assert len(seen) == 2
    assert seen[0][-1] == "me:tool_result:c1"
    assert "turn_end" not in seen[0]
    assert seen[1][-1] == "me:assistant" and seen[1].count("turn_end") == 1


def test_b39_finish_turn_continue_once_makes_one_context_only_request() -> None:
    decisions = iter(["continue"])
    run = run_loop(
        ["first answer", "second answer", "never"],
        finish_turn=lambda turn, signal: next(decisions, None),
    )

    assert len(run.requests) == 2
    first, second = run.requests
    assert second.messages[: len(first.messages)] == first.messages
    assert roles(second.messages) == ["user", "assistant"]
    assert roles(run.new_messages) == ["user", "assistant", "assistant"]
    assert [m.role for m in (e.message for e in run.rec.of("message_start"))] == [
        "user",
        "assistant",
        "assistant",
    ]
    labels = run.rec.labels()
    assert labels[labels.index("turn_end") :] == [
        "turn_end",
        "turn_start",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]


def test_b40_continue_on_tool_turn_adds_no_request() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "text", "never"],
        tools=[make_tool("t")],
        finish_turn=lambda turn, signal: "continue" if turn.tool_results else None,
    )

    assert len(run.requests) == 2
    assert run.model.remaining == 1


def test_b40_later_continue_on_text_turn_adds_exactly_one() -> None:
    decisions = iter(["continue", "continue", None, "continue"])
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "text", "context-only", "never"],
        tools=[make_tool("t")],
        finish_turn=lambda turn, signal: next(decisions),
    )

    assert len(run.requests) == 3
    assert [text_of(m) for m in run.new_messages if m.role == "assistant"][1:] == [
        "text",
        "context-only",
    ]


def test_b41_finish_turn_end_leaves_follow_up_queued() -> None:
    model = ScriptedModel(["answer", "never"])
    agent = Agent(model=model.model, stream_fn=model, finish_turn=lambda turn, signal: "end")
    agent.follow_up("later, please")

    agent.prompt("now")

    assert agent.has_queued_messages() is True
    assert [text_of(m) for m in agent.peek_queued_messages()] == ["later, please"]
    assert len(model.requests) == 1
    assert roles(agent.state.messages) == ["user", "assistant"]


def test_b42_prepare_next_turn_context_is_what_the_next_request_sees() -> None:
    def prepare_next_turn(turn: Any) -> TurnUpdate:
        old = turn.context.messages
        system = SystemMessage(content="OTHER PROMPT", tools_added=old[0].tools_added)
        replaced.append(AgentContext(messages=[system, *old[1:]], tools=turn.context.tools))
        return TurnUpdate(context=replaced[-1])

    replaced: list[AgentContext] = []
    finished: list[Any] = []
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        prepare_next_turn=prepare_next_turn,
        finish_turn=lambda turn, signal: finished.append(turn.context),
    )

    first, second = run.requests
    assert first.messages[0].content == ""
    assert second.messages[0].content == "OTHER PROMPT"
    assert roles(second.messages) == ["system", "user", "assistant", "tool_result"]
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result", "assistant"]
    assert len(replaced) == 1
    assert finished[1] is replaced[0]  # the loop works on the returned context from then on
    assert roles(replaced[0].messages) == [
        "system",
        "user",
        "assistant",
        "tool_result",
        "assistant",
    ]


def test_b43_prepare_next_turn_gets_last_turn_and_injects_messages_and_level() -> None:
    seen: list[dict[str, Any]] = []
    steering = iter([[], [user("steer")]])

    def prepare_next_turn(turn: Any) -> TurnUpdate:
        seen.append(
            {
                "message": turn.message,
                "tool_results": [m.tool_call_id for m in turn.tool_results],
                "new_messages": roles(turn.new_messages),
            }
        )
        return TurnUpdate(messages=[user("prepared")], thinking_level="low")

    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        prepare_next_turn=prepare_next_turn,
        reasoning="high",
        get_steering_messages=lambda: next(steering, []),
    )

    assert len(seen) == 1
    assert seen[0]["message"] is run.new_messages[2]
    assert seen[0]["tool_results"] == ["c1"]
    assert seen[0]["new_messages"] == ["system", "user", "assistant", "tool_result"]
    labels = run.rec.labels()
    turn2 = labels[labels.index("turn_end") + 1 :]
    assert turn2[:6] == ["turn_start", "ms:user", "me:user", "ms:user", "me:user", "ms:assistant"]
    injected = [text_of(e.message) for e in run.rec.of("message_start") if e.message.role == "user"]
    assert injected == ["hi", "prepared", "steer"]
    assert [text_of(m) for m in run.requests[1].messages[-2:]] == ["prepared", "steer"]
    assert [r.options.reasoning for r in run.requests] == ["high", "low"]
    assert run.new_messages[-1].thinking_level == "low"
    assert roles(run.new_messages) == [
        "system",
        "user",
        "assistant",
        "tool_result",
        "user",
        "user",
        "assistant",
    ]


def test_b43_prepare_next_turn_thinking_off_clears_reasoning() -> None:
    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        prepare_next_turn=lambda turn: {"thinking_level": "off"},
        reasoning="high",
    )

    assert [r.options.reasoning for r in run.requests] == ["high", None]
    assert run.new_messages[-1].thinking_level == "off"


def test_b44_prepare_request_sees_pending_messages_before_the_first_request() -> None:
    rec = Recorder()
    seen: list[dict[str, Any]] = []
    steering = iter([[user("steer")]])

    def prepare_request(request: Any, signal: Any) -> None:
        seen.append(
            {
                "labels": rec.labels(),
                "texts": [text_of(m) for m in request.context.messages],
                "model": request.model,
                "level": request.thinking_level,
                "requests_so_far": len(model.requests),
            }
        )

    model = ScriptedModel([reply(tool_call("t", {}, id="c1")), "done"])
    run = run_loop(
        model,
        "hi",
        tools=[make_tool("t")],
        prepare_request=prepare_request,
        get_steering_messages=lambda: next(steering, []),
        rec=rec,
    )

    assert len(seen) == 2
    first = seen[0]
    assert first["requests_so_far"] == 0
    assert first["labels"] == [
        "agent_start",
        "turn_start",
        "ms:system",
        "me:system",
        "ms:user",
        "me:user",
        "ms:user",
        "me:user",
    ]
    assert first["texts"] == ["", "hi", "steer"]
    assert first["model"] is run.config.model
    assert first["level"] == "off"
    assert seen[1]["requests_so_far"] == 1


def test_b45_prepare_request_context_replaces_loop_context_but_not_new_messages() -> None:
    contexts: list[Any] = []

    def prepare_request(request: Any, signal: Any) -> TurnUpdate | None:
        contexts.append(request.context)
        if len(contexts) > 1:
            return None
        old = request.context.messages
        system = SystemMessage(content="REPLACED", tools_added=old[0].tools_added)
        return TurnUpdate(
            context=AgentContext(messages=[system, *old[1:]], tools=request.context.tools)
        )

    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        prepare_request=prepare_request,
    )

    first, second = run.requests
    assert first.messages[0].content == "REPLACED"
    assert second.messages[0].content == "REPLACED"
    assert roles(second.messages) == ["system", "user", "assistant", "tool_result"]
    assert contexts[1].messages[0].content == "REPLACED"
    assert roles(run.new_messages) == ["system", "user", "assistant", "tool_result", "assistant"]
    assert run.new_messages[0].content == ""
    assert run.context.messages == []


def test_b45_prepare_request_model_and_level_apply_from_this_request() -> None:
    other = ScriptedModel().model.model_copy(update={"id": "other", "provider": "elsewhere"})
    providers: list[str] = []
    updates = iter([TurnUpdate(model=other, thinking_level="minimal")])

    run = run_loop(
        [reply(tool_call("t", {}, id="c1")), "done"],
        tools=[make_tool("t")],
        prepare_request=lambda request, signal: next(updates, None),
        get_api_key=lambda provider: providers.append(provider) or None,
        reasoning="high",
    )

    assert [r.model.id for r in run.requests] == ["other", "other"]
    assert providers == ["elsewhere", "elsewhere"]
    assert [r.options.reasoning for r in run.requests] == ["minimal", "minimal"]
    assert run.config.model.id == "scripted"  # the caller's config is left alone
    assert run.config.reasoning == "high"


def test_b46_prepare_next_turn_only_before_a_further_turn() -> None:
    counts: list[int] = []

    def counting(**config: Any) -> int:
        calls: list[Any] = []
        config.setdefault("tools", [make_tool("t"), make_tool("stop", _terminating)])
        run_loop(prepare_next_turn=lambda turn: calls.append(turn), **config)
        return len(calls)

    counts.append(counting(script=["just text"]))
    counts.append(counting(script=[reply(tool_call("t", {}, id="c1")), "done"]))
    counts.append(counting(script=[reply(tool_call("stop", {}, id="c1")), "never"]))
    counts.append(
        counting(
            script=[reply(tool_call("t", {}, id="c1")), "never"],
            finish_turn=lambda turn, signal: "end",
        )
    )

    assert counts == [0, 1, 0, 0]


def test_hook_types_are_dataclasses_equal_and_printed_by_fields() -> None:
    import dataclasses

    from agentkit.hooks import BeforeToolCallResult, ToolCallOutcome, TurnUpdate
    from agentkit.loop import AgentLoopConfig
    from agentkit.types import AgentContext, AgentTool

    blocked = BeforeToolCallResult(block=True, reason="no")
    assert blocked == BeforeToolCallResult(block=True, reason="no")
    assert blocked != BeforeToolCallResult(block=True)
    assert repr(blocked) == "BeforeToolCallResult(block=True, reason='no', terminate=False)"
    assert dataclasses.replace(TurnUpdate(), thinking_level="off").thinking_level == "off"
    for value in (blocked, TurnUpdate(), AgentContext()):
        with pytest.raises(TypeError):
            hash(value)  # mutable dataclasses are unhashable
    assert AgentContext() == AgentContext() and repr(AgentContext()) == (
        "AgentContext(messages=[], tools=[])"
    )
    assert [f.name for f in dataclasses.fields(ToolCallOutcome)][-1] == "duration_ms"
    assert AgentTool("t", "", {}, print) == AgentTool("t", "", {}, print)
    assert "model=" in repr(AgentLoopConfig(model=None))  # type: ignore[arg-type]
