"""Where two requests part (agentkit.context._prefix), in process: the common prefix of two
texts found by halving, what a changed part of a prompt looks like, and its redacted shape."""

from __future__ import annotations

import random

import pytest

from agentkit.context._prefix import common_prefix, shape_hint, what_changed


def naive_prefix(a: str, b: str) -> int:
    count = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        count += 1
    return count


def test_common_prefix_agrees_with_a_character_loop() -> None:
    rng = random.Random(35)
    for _ in range(2000):
        a = "".join(rng.choice("ab") for _ in range(rng.randrange(0, 40)))
        b = a[: rng.randrange(0, len(a) + 1)] + "".join(
            rng.choice("ab") for _ in range(rng.randrange(0, 10))
        )
        assert common_prefix(a, b) == naive_prefix(a, b), (a, b)
    big = "x" * 2_000_000
    assert common_prefix(big, big[:-1] + "y") == 1_999_999
    assert common_prefix("", "abc") == 0 and common_prefix("abc", "abc") == 3


@pytest.mark.parametrize(
    ("old", "new", "kind", "hint"),
    [
        ("Now: 2026-12-03T10:00:01Z.", "Now: 2026-12-03T10:05:07Z.", "timestamp",
         "9999-99-99a99:99:99a"),
        ("Date: Monday. Be brief.", "Date: Tuesday. Be brief.", "timestamp", "aaaaaaa"),
        ("time 10:41 here", "time 10:42 here", "timestamp", "99:99"),
        ("epoch 1796292851 then", "epoch 1796292999 then", "timestamp", "9999999999"),
        ("req 3f2a9c1e-aaaa-bbbb-cccc-0123456789ab x", "req 3f2a9c1e-aaaa-bbbb-cccc-0123456789ac x",
         "id", "9a9a9a9a-aaaa-aaaa-aaaa-"),
        ("You have 12 items.", "You have 13 items.", "number", "99"),
        ("You are kind.", "You are curt.", "text", ""),
    ],
)  # fmt: skip
def test_what_a_change_looks_like_and_its_shape(old: str, new: str, kind: str, hint: str) -> None:
    assert what_changed(old, new, common_prefix(old, new)) == (kind, hint)


def test_a_hint_is_a_short_shape_only() -> None:
    assert shape_hint("Secret 42 AB") == "aaaaaa 99 aa"
    assert len(shape_hint("9" * 500)) == 24


def test_a_watch_that_fails_never_fails_the_run(caplog: pytest.LogCaptureFixture) -> None:
    from agentkit import Agent
    from agentkit.context import CacheWatch
    from agentkit.testing import ScriptedModel

    def broken_clock() -> float:
        raise RuntimeError("the prompt was: PLUMBAGO")

    model = ScriptedModel(["Hi.", "Hi."])
    agent = Agent(model=model.model, stream_fn=model, policies=[CacheWatch(clock=broken_clock)])
    assert agent.prompt("hello").stop_reason == "stop"
    assert agent.prompt("again").text == "Hi."
    said = [r.getMessage() for r in caplog.records if r.name == "agentkit"]
    assert said == ["agentkit cache: could not read request 1 (RuntimeError); the run goes on"] * 2


def test_messages_given_as_dicts_are_compared_by_their_json() -> None:
    from agentkit import Agent
    from agentkit.context import CacheWatch, cache_report
    from agentkit.testing import ScriptedModel

    watch = CacheWatch()
    model = ScriptedModel(["Hi.", "Hi."])
    first = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": []}]
    Agent(model=model.model, stream_fn=model, messages=first, policies=[watch]).prompt("a")
    edited = [{"role": "user", "content": "hello!"}, {"role": "assistant", "content": []}]
    result = Agent(model=model.model, stream_fn=model, messages=edited,
                   policies=[watch]).prompt("a")  # fmt: skip
    [note] = cache_report(result).notes
    assert (note.part, note.position, note.detail["role"]) == ("messages", 0, "user")
