"""The runner: many replayed cases at a concurrency bound under a shared rate limiter, inside a
running event loop, under Ctrl-C and an abort from elsewhere, with judges that pass, fail and
break, with broken factories and evaluators, and live against a model over real HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentkit import AbortController, Agent, tool
from agentkit.abort import AbortSignal
from agentkit.evals import (
    Case,
    Contains,
    Dataset,
    EqualsExpected,
    EvalInterrupted,
    Evaluation,
    LLMJudge,
    MaxCost,
    MaxDuration,
    MaxTokens,
    MaxTurns,
    SameToolCalls,
    ToolCalled,
    ToolNotCalled,
    ToolOrder,
)
from agentkit.limits import MemoryBackend, Quota, RateLimiter
from agentkit.sessions import SessionStore, open_store
from agentkit.testing import ScriptedModel, reply
from tests.evals.support import (
    SYSTEM,
    answering_model,
    desk,
    eval_threads,
    record_sessions,
    weather,
)
from tests.providers.replay_server import ReplayServer, Reply, call_delta, chat_sse, make_model

WAIT = 30.0
"""A generous bound for every wait on another thread; never reached when things work."""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionStore]:
    store = open_store(tmp_path_factory.mktemp("evals") / "sessions.db")
    record_sessions(store, 3)
    yield store
    store.close()


def many(store: SessionStore, count: int) -> Dataset:
    """``count`` replayable cases: the recorded first turns (each calls the tool), repeated."""
    firsts = [c for c in Dataset.from_sessions(store) if c.metadata["turn"] == 1]
    cases = []
    for index in range(count):
        case = firsts[index % len(firsts)]
        cases.append(Case(f"case-{index}", turns=case.turns, recording=case.recording,
                          expected_output=case.expected_output, metadata=case.metadata))  # fmt: skip
    return Dataset(cases, evaluators=[EqualsExpected(), SameToolCalls()])


class CountingBackend(MemoryBackend):
    """A limiter's in-memory buckets that also count what they admit and refuse."""

    def __init__(self) -> None:
        super().__init__()
        # Guards admitted and waits: requests take permits from many threads at once.
        self.counting = threading.Lock()
        self.admitted: list[str] = []
        self.waits = 0

    def try_acquire(self, bucket: str, quota: Any, permit_id: str, tokens: int) -> float | None:
        wait = super().try_acquire(bucket, quota, permit_id, tokens)
        with self.counting:
            if wait is None:
                self.admitted.append(bucket)
            else:
                self.waits += 1
        return wait


def test_200_replayed_cases_at_concurrency_20_share_a_rate_limiter(
    recorded: SessionStore,
) -> None:
    dataset = many(recorded, 200)
    backend = CountingBackend()
    limiter = RateLimiter({"scripted": Quota(requests=100_000)}, backend=backend)
    # Each case's tool call waits here for 19 others: the run only ends if 20 cases really run
    # at once, and never more (the count below).
    together = threading.Barrier(20, timeout=WAIT)
    running, most = [0], [0]
    counting = threading.Lock()  # guards running and most

    @tool(name="weather")
    def gathered(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city's name.
        """
        with counting:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            together.wait()
            return weather.execute("id", {"city": city}, AbortController().signal, None).text
        finally:
            with counting:
                running[0] -= 1

    report = dataset.run(desk([gathered]), mode="replay", concurrency=20, rate_limiter=limiter,
                         progress=False)  # fmt: skip
    assert report.counts["passed"] == 200, report.table()
    assert most[0] == 20
    assert len(backend.admitted) == 400  # every replayed request took a permit
    assert set(backend.admitted) == {"scripted"}  # the recorded provider's bucket
    assert eval_threads() == []


def test_a_rate_limiter_holds_replayed_requests_back(recorded: SessionStore) -> None:
    backend = CountingBackend()
    limiter = RateLimiter({"scripted": Quota(requests=4, per=0.2)}, backend=backend)
    report = many(recorded, 6).run(desk(), mode="replay", concurrency=6, rate_limiter=limiter,
                                   progress=False)  # fmt: skip
    assert report.pass_rate == 1.0
    assert len(backend.admitted) == 12 and backend.waits > 0


def test_runs_inside_a_running_event_loop(recorded: SessionStore) -> None:
    dataset = many(recorded, 4)

    async def notebook_cell() -> Any:
        asyncio.get_running_loop()  # as in Jupyter: a loop runs this cell
        plain = dataset.run(desk(), mode="replay", progress=False)
        awaited = await dataset.arun(desk(), mode="replay", progress=False)
        return plain, awaited

    plain, awaited = asyncio.run(notebook_cell())
    assert plain.pass_rate == awaited.pass_rate == 1.0
    assert eval_threads() == []


class Blocking:
    """A weather tool that waits for its run's abort; counts who entered and who was aborted."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # guards entered and aborted
        self.changed = threading.Condition(self.lock)
        self.entered = 0
        self.aborted = 0

        @tool(name="weather")
        def blocking(city: str, signal: AbortSignal) -> str:
            """The weather in a city.

            Args:
                city: The city's name.
            """
            with self.changed:
                self.entered += 1
                self.changed.notify_all()
            signal.wait()
            with self.changed:
                self.aborted += 1
            return "no weather today"

        self.tool = blocking

    def wait_for(self, count: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.entered >= count, WAIT)


def test_ctrl_c_aborts_the_cases_under_way_and_leaves_no_thread(
    recorded: SessionStore, ctrl_c: None
) -> None:
    blocking = Blocking()
    main = threading.main_thread().ident
    assert main is not None

    def press_ctrl_c() -> None:
        if blocking.wait_for(3):
            signal.pthread_kill(main, signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c, name="test-ctrl-c")
    presser.start()
    try:
        with pytest.raises(EvalInterrupted) as raised:
            many(recorded, 10).run(desk([blocking.tool]), mode="replay", concurrency=3,
                                   progress=False)  # fmt: skip
    finally:
        presser.join(WAIT)
    report = raised.value.report
    assert isinstance(raised.value, KeyboardInterrupt)
    assert report.interrupted and report.counts["cancelled"] == 10
    assert blocking.entered == blocking.aborted == 3  # the three under way got the abort
    assert "interrupted after 0 of 10 cases" in str(raised.value)
    assert eval_threads() == []
    assert not [t for t in threading.enumerate() if t.name == "agentkit-agent"]
    assert not report.meets(0.0)


def test_an_abort_from_another_thread_returns_the_partial_report(recorded: SessionStore) -> None:
    blocking = Blocking()
    controller = AbortController()
    aborter = threading.Thread(
        target=lambda: blocking.wait_for(2) and controller.abort(), name="test-aborter"
    )
    aborter.start()
    report = many(recorded, 5).run(desk([blocking.tool]), mode="replay", concurrency=2,
                                   signal=controller.signal, progress=False)  # fmt: skip
    aborter.join(WAIT)
    assert report.interrupted and report.counts["cancelled"] == 5
    assert blocking.aborted == 2
    assert eval_threads() == []


def test_cancelling_an_awaited_evaluation_aborts_it(recorded: SessionStore) -> None:
    blocking = Blocking()

    async def cell() -> None:
        task = asyncio.ensure_future(
            many(recorded, 4).arun(desk([blocking.tool]), mode="replay", concurrency=2)
        )
        await asyncio.get_running_loop().run_in_executor(None, blocking.wait_for, 2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cell())
    assert blocking.aborted == 2
    assert eval_threads() == []


# --- judges ------------------------------------------------------------------------------------


def judge_answering(*answers: Any) -> Any:
    """A judge factory whose model gives ``answers`` in turn (any judge call takes the next)."""
    model = ScriptedModel(list(answers))

    def make() -> Agent:
        return Agent(model=model.model, stream_fn=model)

    make.model = model  # type: ignore[attr-defined]
    return make


def test_a_judge_gives_typed_verdicts_under_budgets(recorded: SessionStore) -> None:
    rubric = LLMJudge("The answer names the weather.", include_input=True,
                      include_expected_output=True)  # fmt: skip
    dataset = many(recorded, 2)
    dataset.evaluators = [rubric]
    judge = judge_answering(
        '{"reason": "It says snowy.", "passed": true, "score": 0.9}',
        '{"reason": "No weather named.", "passed": false, "score": 0.2}',
    )
    report = dataset.run(desk(), mode="replay", concurrency=1, judge=judge, progress=False)
    first, second = report.cases
    assert first.status == "passed" and first.evaluations[0].reason == "It says snowy."
    assert second.status == "failed" and "No weather named." in second.note
    asked = judge.model.requests[0]  # type: ignore[attr-defined]
    question = asked.messages[-1].content[0].text
    assert "<rubric>\nThe answer names the weather.\n</rubric>" in question
    assert "<input>\nWhat is the weather in Oslo?\n</input>" in question
    assert "<output>\nIt is snowy, -3 C in Oslo.\n</output>" in question
    assert asked.options.output_schema is not None  # the verdict is asked for as typed output
    assert first.judge_usage.requests == 1 and report.judge_cost == 0.0


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ([reply(error="the judge's provider is down")], "the judge's provider is down"),
        (["not a verdict", "still not", "nope"], "budget max_turns|did not match|validation"),
    ],
)
def test_a_judge_that_fails_makes_the_case_an_error(
    recorded: SessionStore, answers: list[Any], problem: str
) -> None:
    dataset = many(recorded, 1)
    dataset.evaluators = [LLMJudge("Polite?"), Contains("Oslo")]
    report = dataset.run(desk(), mode="replay", judge=judge_answering(*answers), progress=False)
    (result,) = report.cases
    assert result.status == "error"
    judged, contains = result.evaluations
    assert judged.error is not None and judged.value is False
    import re

    assert re.search(problem, judged.error), judged.error
    assert contains.value is True  # the other checks still ran
    assert not report.meets(0.5)


def test_a_judge_without_a_model_says_how_to_give_one(recorded: SessionStore) -> None:
    dataset = many(recorded, 1)
    dataset.evaluators = [LLMJudge("Polite?")]
    (result,) = dataset.run(desk(), mode="replay", progress=False).cases
    assert result.status == "error"
    assert "run(..., judge=" in (result.evaluations[0].error or "")


# --- factories, evaluators, budgets ------------------------------------------------------------


def test_broken_factories_and_evaluators_are_errors_not_crashes(recorded: SessionStore) -> None:
    def exploding() -> Agent:
        raise RuntimeError("no config file")


    def raising_check(run: Any) -> bool:
        raise KeyError("missing")

    dataset = many(recorded, 3)
    report = dataset.run(exploding, mode="replay", progress=False)
    assert {r.status for r in report} == {"error"}
    assert report.cases[0].error == "RuntimeError: no config file"

    report = dataset.run(lambda: "an agent", mode="replay", progress=False)
    assert "returned 'an agent', not an Agent" in (report.cases[0].error or "")

    # One agent for two cases at once: the second is refused (and the first's agent is not
    # closed under it). The first case's tool waits until the second case has ended.
    second_ended = threading.Event()

    class Watch:
        def start(self, name: str, total: int) -> None:
            pass

        def update(self, done: int, counts: dict[str, int]) -> None:
            if done:
                second_ended.set()

        def close(self) -> None:
            pass

    @tool(name="weather")
    def slow(city: str) -> str:
        """The weather.

        Args:
            city: The city.
        """
        second_ended.wait(WAIT)
        return "snowy, -3 C"

    shared = Agent(tools=[slow], system_prompt=SYSTEM)
    report = Dataset(dataset.cases[:2], evaluators=[EqualsExpected()]).run(
        lambda: shared, mode="replay", concurrency=2, progress=Watch()
    )
    assert sorted(r.status for r in report) == ["error", "passed"], report.table()
    refused = next(r for r in report if r.status == "error")
    assert "returned an agent another case is running" in (refused.error or "")

    dataset.evaluators = [raising_check, lambda run: "yes"]
    result = dataset.run(desk(), mode="replay", progress=False).cases[0]
    assert result.status == "error"
    first, second = result.evaluations
    assert first.name == "raising_check" and first.error == "KeyError: 'missing'"
    assert "returned 'yes'" in (second.error or "")


def test_trajectory_and_budget_checks(recorded: SessionStore) -> None:
    def half(run: Any) -> float:
        return 0.5

    def named(run: Any) -> Evaluation:
        return Evaluation("named", True, "fine")

    dataset = many(recorded, 1)
    dataset.evaluators = [
        ToolCalled("weather", {"city": "Os"}, regex=True), ToolCalled("weather", {"city": "Rome"}),
        ToolNotCalled("book"), ToolOrder(["weather"], exact=True), ToolOrder(["book", "weather"]),
        MaxCost(1.0), MaxCost(0.000001), MaxTokens(10_000), MaxTokens(5), MaxTurns(2), MaxTurns(1),
        MaxDuration(60), half, named,
    ]  # fmt: skip
    (result,) = dataset.run(desk(), mode="replay", progress=False).cases
    verdicts = [(e.name, e.value) for e in result.evaluations]
    assert verdicts == [
        ("ToolCalled", True), ("ToolCalled", False), ("ToolNotCalled", True), ("ToolOrder", True),
        ("ToolOrder", False), ("MaxCost", True), ("MaxCost", False), ("MaxTokens", True),
        ("MaxTokens", False), ("MaxTurns", True), ("MaxTurns", False), ("MaxDuration", True),
        ("half", 0.5), ("named", True),
    ]  # fmt: skip
    assert result.status == "failed"
    assert "called 0 time(s)" in result.note and "2 model requests > 1" in result.note
    assert result.score == pytest.approx((8 + 0.5) / 14)  # 8 passed checks and a half


# --- live ----------------------------------------------------------------------------------------


def test_a_live_run_over_http_against_a_local_server(server: ReplayServer) -> None:
    for city in ("Oslo", "Rome"):
        server.enqueue(
            Reply(chat_sse(call_delta("c1", "weather", {"city": city}), finish="tool_calls",
                           usage={"prompt_tokens": 50, "completion_tokens": 10})),
            Reply(chat_sse({"content": f"{city}: nice."},
                           usage={"prompt_tokens": 70, "completion_tokens": 5})),
        )  # fmt: skip
    model = make_model("openai-completions", server.url)
    backend = CountingBackend()
    limiter = RateLimiter(backend=backend)
    dataset = Dataset(
        [Case("oslo", "Weather in Oslo?"), Case("rome", "Weather in Rome?")],
        evaluators=[Contains("nice"), ToolCalled("weather")],
    )
    report = dataset.run(desk(model=model, api_key="sk-test", max_retries=0), mode="live",
                         concurrency=1, rate_limiter=limiter, progress=False)  # fmt: skip
    assert report.pass_rate == 1.0, report.table()
    assert report["rome"].answer == "Rome: nice."
    assert report["oslo"].usage.input == 120 and report.cost > 0  # the catalog prices it
    assert len(server.requests) == 4 and len(backend.admitted) == 4
    assert "sk-test" not in report.to_json()


def test_a_live_run_on_a_scripted_model_and_a_progress_bar(recorded: SessionStore) -> None:
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    from agentkit.evals.progress import make_progress

    dataset = many(recorded, 3)
    report = dataset.run(desk(stream_fn=answering_model()), progress=make_progress("auto", screen))
    assert report.pass_rate == 1.0 and report.mode == "live"
    assert "3/3" in screen.getvalue() and "✓3" in screen.getvalue()
    assert screen.getvalue().endswith("\n")


def test_bad_run_options_are_refused_before_anything_runs(tmp_path: Path) -> None:
    dataset = Dataset([Case("a", "hi")])
    with pytest.raises(ValueError, match="mode is"):
        dataset.run(desk(), mode="dry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency"):
        dataset.run(desk(), concurrency=0)
    with pytest.raises(TypeError, match="makes an Agent"):
        dataset.run("agent")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="progress is"):
        dataset.run(desk(), progress="fancy")
    assert os.environ.get("AGENTKIT_EVAL_NEVER_SET") is None
