"""Async callers: ``await agent.aprompt()``, ``async for ... in agent.astream()``, cancellation
aborting the run, and an event loop that keeps running while the agent works."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel

from agentkit import (
    Agent,
    AgentTool,
    Budgets,
    CannotContinueError,
    ImageContent,
    RunContext,
    TextContent,
    UserMessage,
    tool,
)
from agentkit.abort import AbortSignal
from agentkit.testing import ScriptedModel, reply, tool_call
from tests.support import signal_tool

WAIT = 10.0


def _agent(replies: list[Any], tools: list[AgentTool] | None = None) -> Agent:
    model = ScriptedModel(replies)
    return Agent(model=model.model, stream_fn=model, tools=tools or [])


def test_aprompt_returns_the_new_messages() -> None:
    agent = _agent(
        [reply(tool_call("echo", id="e")), "done"], [signal_tool("echo", lambda s: "hi")]
    )
    messages = asyncio.run(agent.aprompt("go"))
    assert [m.role for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert messages[-1].content[0].text == "done"
    assert not agent.state.is_streaming


def test_astream_yields_the_events_in_order() -> None:
    agent = _agent(["hello there"])
    sync_types: list[str] = []
    agent.subscribe(lambda e: sync_types.append(e.type))

    async def collect() -> list[str]:
        return [event.type async for event in agent.astream("hi")]

    types = asyncio.run(collect())
    assert types[0] == "agent_start" and types[-1] == "agent_end"
    assert types == sync_types


class WaitingTool:
    """A tool that waits for the run's abort: ``started`` once it runs, ``aborted`` once the
    abort reached it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.aborted = threading.Event()

    def __call__(self, signal: AbortSignal) -> str:
        self.started.set()
        if signal.wait(WAIT):
            self.aborted.set()
        return "stopped"

    def agent(self) -> Agent:
        return _agent([reply(tool_call("wait", id="w")), "never"], [signal_tool("wait", self)])

    async def until_started(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.started.wait, WAIT)


def test_leaving_astream_early_aborts_the_run() -> None:
    waiting = WaitingTool()
    agent = waiting.agent()

    async def leave() -> None:
        events = agent.astream("go")
        async for event in events:
            if event.type == "tool_execution_start":
                await waiting.until_started()
                break
        await events.aclose()
        assert not agent.state.is_streaming  # the run had ended when aclose() returned

    asyncio.run(leave())
    assert waiting.aborted.is_set()


def test_cancelling_the_awaiting_task_aborts_the_run() -> None:
    waiting = WaitingTool()
    agent = waiting.agent()

    async def main() -> None:
        task = asyncio.ensure_future(agent.aprompt("go"))
        await waiting.until_started()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert waiting.aborted.is_set()
    assert not agent.state.is_streaming
    assert agent.state.messages[-1].role == "tool_result"  # ended after the aborted batch


def test_the_event_loop_keeps_ticking_during_a_run() -> None:
    ticks_wanted = 20
    ticked = threading.Event()  # set by the heartbeat once it has ticked enough

    def busy(signal: AbortSignal) -> str:
        # The run only finishes once the heartbeat has been ticking while the run went on.
        assert ticked.wait(WAIT)
        return "done"

    agent = _agent([reply(tool_call("busy", id="b")), "finished"], [signal_tool("busy", busy)])

    async def main() -> tuple[int, float]:
        gaps: list[float] = []
        stop = asyncio.Event()

        async def heartbeat() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now
                if len(gaps) >= ticks_wanted:
                    ticked.set()

        beat = asyncio.ensure_future(heartbeat())
        await agent.aprompt("work")
        stop.set()
        await beat
        return len(gaps), max(gaps)

    count, worst = asyncio.run(main())
    assert count >= ticks_wanted
    assert worst < 1.0  # 100x the 10 ms period: the loop was never blocked


class City(BaseModel):
    name: str
    population: int


def test_aprompt_takes_the_run_options_of_prompt() -> None:
    model = ScriptedModel(['{"name": "Paris"}', '{"name": "Paris", "population": 2}'])
    agent = Agent(model=model.model, stream_fn=model)
    result = asyncio.run(agent.aprompt("answer", output_type=City, tool_choice="none"))
    assert result.output == City(name="Paris", population=2)  # validated, after one retry
    assert model.requests[0].options.tool_choice == "none"
    assert agent.output_type is None and agent.tool_choice is None  # the run's options only
    with pytest.raises(TypeError, match="unknown run option"):
        asyncio.run(agent.aprompt("x", max_turns=1))


def test_aprompt_with_deps_budgets_and_images() -> None:
    seen: list[str] = []

    @tool
    def whoami(ctx: RunContext[str]) -> str:
        """Name the user."""
        seen.append(ctx.deps)
        return ctx.deps

    model = ScriptedModel([reply(tool_call("whoami", id="w"))] * 5)
    agent = Agent(model=model.model, stream_fn=model, tools=[whoami])
    image = ImageContent(data="aGk=", mime_type="image/png")
    result = asyncio.run(
        agent.aprompt("who", [image], deps="ada", budgets=Budgets(max_turns=2))
    )
    assert seen == ["ada", "ada"] and result.stop_reason == "budget"
    assert result.budget == "max_turns"
    assert model.requests[0].messages[1].content[1] == image


def test_astream_takes_the_run_options_of_stream() -> None:
    model = ScriptedModel(['{"name": "Rome", "population": 3}'])
    agent = Agent(model=model.model, stream_fn=model)

    async def collect() -> list[str]:
        return [event.type async for event in agent.astream("answer", output_type=City)]

    types = asyncio.run(collect())
    assert types[-1] == "agent_end"
    assert agent.state.messages[-1].content[0].text.startswith('{"name": "Rome"')
    assert model.requests[0].options.tool_choice is None


def test_acontinue_continues_the_transcript() -> None:
    model = ScriptedModel(["first", "picked up again"])
    agent = Agent(model=model.model, stream_fn=model)
    asyncio.run(agent.aprompt("hello"))
    agent.state.messages.append(UserMessage(content=[TextContent(text="and then?")]))
    result = asyncio.run(agent.acontinue(tool_choice="none"))
    assert [m.role for m in result] == ["assistant"]
    assert result.text == "picked up again"
    assert model.requests[1].options.tool_choice == "none"
    assert [m.role for m in model.requests[1].messages[-3:]] == ["user", "assistant", "user"]
    with pytest.raises(CannotContinueError):
        asyncio.run(agent.acontinue())  # the transcript now ends with the assistant



_THREAD_WAITS = {
    threading.Thread.start.__code__: "Thread.start",
    threading.Thread.join.__code__: "Thread.join",
    threading.Event.wait.__code__: "Event.wait",
    threading.Condition.wait.__code__: "Condition.wait",
}


def test_fifty_runs_starting_at_once_never_wait_on_a_thread() -> None:
    """The event loop never waits on a thread, not even for a run's worker to come up
    (``Thread.start()`` returns only once the new thread runs, which under load takes up to
    hundreds of ms): a profile hook on the loop's thread sees every call while 50
    ``aprompt()`` calls start at once, and a 10 ms ticker keeps ticking through them."""
    runs = 50
    release = threading.Event()  # the model answers once every run is waiting for it
    asked = threading.Semaphore(0)

    def agent() -> Agent:
        model = ScriptedModel(["done"])

        def slow_model(*args: Any) -> Any:
            asked.release()
            release.wait(WAIT)
            return model(*args)

        return Agent(model=model.model, stream_fn=slow_model)

    agents = [agent() for _ in range(runs)]

    async def main() -> tuple[list[str], int]:
        # The starter thread is started by the first run from a loop after a quiet spell
        # (it ends after STARTER_IDLE seconds without work): that one start is waited for,
        # here before the measurement, which follows within milliseconds.
        await _agent(["warmed up"]).aprompt("warm up")
        loop = asyncio.get_running_loop()
        all_asked = asyncio.Event()
        ticks = 0
        waits: list[str] = []

        def watch(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code in _THREAD_WAITS:
                waits.append(_THREAD_WAITS[frame.f_code])

        def count_asks() -> None:
            for _ in range(runs):
                assert asked.acquire(timeout=WAIT)
            loop.call_soon_threadsafe(all_asked.set)

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        counting = threading.Thread(target=count_asks, name="test-count-asks")
        counting.start()
        ticking = asyncio.ensure_future(ticker())
        sys.setprofile(watch)  # this thread only: the loop's
        try:
            results = [asyncio.ensure_future(a.aprompt("go")) for a in agents]
            await asyncio.wait_for(all_asked.wait(), WAIT)
            release.set()
            texts = [r.text for r in await asyncio.gather(*results)]
        finally:
            sys.setprofile(None)
        ticking.cancel()
        counting.join(WAIT)
        assert not waits, f"the event loop waited on a thread: {sorted(set(waits))}"
        return texts, ticks

    texts, ticks = asyncio.run(main())
    assert texts == ["done"] * runs
    assert ticks >= 1


def test_the_starter_thread_ends_when_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle process holds no agentkit thread: the starter ends once it has no work, and
    the next run from a loop starts it again."""
    from agentkit import run as run_module

    monkeypatch.setattr(run_module, "STARTER_IDLE", 0.05)

    def starters() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "agentkit-starter"]

    for _ in range(2):
        assert asyncio.run(_agent(["hi"]).aprompt("hello")).text == "hi"
        deadline = time.monotonic() + WAIT
        while starters() and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert not starters()
