"""Steering and follow-up queues (SPEC 4.2, 5.2, B47-B51), through the Agent and the loop."""

from __future__ import annotations

import threading
from typing import Any

from agentkit import Agent
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import WAIT, Recorder, make_tool, roles, run_loop, text_of, user


def _agent(script: list[Any], **options: Any) -> tuple[Agent, ScriptedModel, Recorder]:
    model = ScriptedModel(script)
    agent = Agent(model=model.model, stream_fn=model, **options)
    rec = Recorder()
    agent.subscribe(rec)
    return agent, model, rec


def _user_texts(rec: Recorder) -> list[str]:
    return [text_of(e.message) for e in rec.of("message_start") if e.message.role == "user"]


def test_b47_steering_during_tools_waits_for_the_whole_batch() -> None:
    steered = threading.Event()
    holder: dict[str, Agent] = {}

    def steering_tool(*_: Any) -> str:
        holder["agent"].steer("change of plan")
        steered.set()
        return "a done"

    def other_tool(*_: Any) -> str:
        assert steered.wait(WAIT)  # still running when the steering message arrives
        return "b done"

    agent, model, rec = _agent(
        [reply(tool_call("a", {}, id="a"), tool_call("b", {}, id="b")), "ok, changing plan"],
        tools=[make_tool("a", steering_tool), make_tool("b", other_tool)],
    )
    holder["agent"] = agent
    agent.prompt("go")

    labels = rec.labels()
    steer_start = labels.index("ms:user", labels.index("me:user") + 1)
    assert labels.index("me:tool_result:a") < steer_start
    assert labels.index("me:tool_result:b") < steer_start
    assert labels[steer_start - 2 : steer_start + 2] == [
        "turn_end",
        "turn_start",
        "ms:user",
        "me:user",
    ]
    assert len(model.requests) == 2
    second = model.requests[1].messages
    assert roles(second) == ["system", "user", "assistant", "tool_result", "tool_result", "user"]
    assert text_of(second[-1]) == "change of plan"


def test_b48_steering_queued_before_prompt_joins_the_first_turn() -> None:
    agent, model, rec = _agent(["first", "second", "never"])
    agent.steer("steer one")
    agent.steer("steer two")

    agent.prompt("the prompt")

    assert rec.labels() == [
        "agent_start",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    assert _user_texts(rec) == ["the prompt", "steer one", "steer two"]
    assert [text_of(m) for m in model.requests[0].messages] == ["the prompt", "steer one"]
    assert text_of(model.requests[1].messages[-1]) == "steer two"
    assert len(model.requests) == 2


def test_b49_one_at_a_time_follow_ups_each_get_a_turn() -> None:
    agent, model, rec = _agent(["r1", "r2", "r3", "never"])
    agent.follow_up("f1")
    agent.follow_up("f2")

    agent.prompt("p")

    assert len(model.requests) == 3
    assert [text_of(r.messages[-1]) for r in model.requests] == ["p", "f1", "f2"]
    assert rec.types.count("turn_start") == 3
    assert roles(agent.state.messages) == ["user", "assistant"] * 3
    assert agent.has_queued_messages() is False


def test_b49_one_at_a_time_steering_each_get_a_turn() -> None:
    agent, model, rec = _agent(["r1", "r2", "r3", "never"])
    for text in ("s1", "s2", "s3"):
        agent.steer(text)

    agent.prompt("p")

    assert len(model.requests) == 3
    assert [[text_of(m) for m in r.messages if m.role == "user"][-1] for r in model.requests] == [
        "s1",
        "s2",
        "s3",
    ]
    assert [text_of(m) for m in model.requests[0].messages] == ["p", "s1"]
    assert rec.types.count("turn_start") == 3


def test_b50_all_mode_injects_every_follow_up_in_one_turn() -> None:
    agent, model, rec = _agent(["r1", "r2", "never"], follow_up_mode="all")
    agent.follow_up("f1")
    agent.follow_up("f2")

    agent.prompt("p")

    assert len(model.requests) == 2
    assert [text_of(m) for m in model.requests[1].messages if m.role == "user"] == [
        "p",
        "f1",
        "f2",
    ]
    labels = rec.labels()
    assert labels[labels.index("turn_end") :] == [
        "turn_end",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]


def test_b50_all_mode_steering_joins_one_request() -> None:
    agent, model, _ = _agent(["r1", "never"], steering_mode="all")
    agent.steer("s1")
    agent.steer("s2")

    agent.prompt("p")

    assert len(model.requests) == 1
    assert [text_of(m) for m in model.requests[0].messages] == ["p", "s1", "s2"]


def test_b51_steering_before_follow_up_follow_ups_only_at_the_stop() -> None:
    holder: dict[str, Agent] = {}

    def queueing_tool(*_: Any) -> str:
        holder["agent"].follow_up("follow-up")
        holder["agent"].steer("steer")
        return "queued both"

    agent, model, rec = _agent(
        [reply(tool_call("q", {}, id="c1")), "after steer", "after follow-up", "never"],
        tools=[make_tool("q", queueing_tool)],
    )
    holder["agent"] = agent
    agent.prompt("go")

    labels = rec.labels()
    assert labels[labels.index("turn_end") :] == [
        "turn_end",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "turn_start",
        "ms:user",
        "me:user",
        "ms:assistant",
        "me:assistant",
        "turn_end",
        "agent_end",
    ]
    assert _user_texts(rec) == ["go", "steer", "follow-up"]
    assert len(model.requests) == 3
    assert "follow-up" not in [text_of(m) for m in model.requests[1].messages]
    assert text_of(model.requests[1].messages[-1]) == "steer"
    assert text_of(model.requests[2].messages[-1]) == "follow-up"


def test_b51_follow_ups_are_polled_only_when_the_loop_would_stop() -> None:
    log: list[str] = []
    steering = iter([[], [], [], [user("s")]])
    follow_ups = iter([[user("f")]])
    holder: dict[str, Any] = {}

    def get_steering() -> list[Any]:
        log.append(f"steering@{len(holder['model'].requests)}")
        return next(steering, [])

    def get_follow_ups() -> list[Any]:
        log.append(f"follow_up@{len(holder['model'].requests)}")
        return next(follow_ups, [])

    model = ScriptedModel([reply(tool_call("t", {}, id="c1")), "r2", "r3", "r4", "never"])
    holder["model"] = model
    run = run_loop(
        model,
        tools=[make_tool("t")],
        get_steering_messages=get_steering,
        get_follow_up_messages=get_follow_ups,
    )

    assert log == [
        "steering@0",  # start of the run
        "steering@1",  # after the tool turn: tool results continue, no follow-up poll
        "steering@1",  # start of turn 2, nothing pending: polled again
        "steering@2",  # after turn 2: steering found, still no follow-up poll
        "steering@3",  # after turn 3: nothing, the loop would stop ...
        "follow_up@3",  # ... so follow-ups are polled
        "steering@4",  # after the follow-up turn (which started with it pending: no re-poll)
        "follow_up@4",
    ]
    assert [text_of(r.messages[-1]) for r in run.requests[2:]] == ["s", "f"]
