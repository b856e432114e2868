"""The console samples: quickstart, parallel tools, steering."""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
from collections.abc import Callable

import parallel_tools
import pytest
import quickstart
import steering
from sample_helpers import SAMPLES


def test_quickstart_streams_text_and_calls_both_tools(
    thread_baseline: Callable[[], None],
) -> None:
    out = io.StringIO()
    messages = quickstart.main([], out=out)
    text = out.getvalue()
    assert "[calling get_temperature({'city': 'Lisbon'})]" in text
    assert "[to_fahrenheit -> 74.3]" in text
    assert "74.3 °F" in text
    roles = [m.role for m in messages]
    assert roles == ["system", "user", "assistant", "tool_result", "tool_result", "assistant"]
    assert messages[-1].stop_reason == "stop"
    thread_baseline()


def test_quickstart_prints_deltas_as_they_arrive() -> None:
    """The answer is written in several pieces, each flushed, not in one final print."""

    class Recorder(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.writes: list[str] = []

        def write(self, s: str) -> int:
            self.writes.append(s)
            return super().write(s)

    out = Recorder()
    quickstart.main([], out=out)
    answer_pieces = [w for w in out.writes if w and w in quickstart.SCRIPT[1]]
    assert len(answer_pieces) > 5
    assert "".join(answer_pieces).startswith("It is 23.5 °C")


def test_parallel_tools_take_the_time_of_the_slowest(
    thread_baseline: Callable[[], None],
) -> None:
    out = io.StringIO()
    timing = parallel_tools.main([], out=out)
    assert timing.slowest - 0.05 <= timing.wall < timing.slowest + 0.5 < timing.total
    assert "3 tools in" in out.getvalue()
    thread_baseline()


def test_steering_then_abort_from_another_thread(thread_baseline: Callable[[], None]) -> None:
    out = io.StringIO()
    messages = steering.main([], out=out)
    roles = [m.role for m in messages]
    # prompt, tool turn, steer injected after the batch, second tool turn, aborted answer
    assert roles == [
        "system", "user", "assistant", "tool_result", "user", "assistant", "tool_result",
        "assistant",
    ]  # fmt: skip
    assert messages[4].content[0].text == steering.STEER
    assert messages[-1].stop_reason == "aborted"
    assert "supervisor: abort()" in out.getvalue()
    thread_baseline()


@pytest.mark.processes
@pytest.mark.parametrize("name", ["quickstart.py", "parallel_tools.py", "steering.py"])
def test_sample_runs_as_a_script(name: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTKIT_MODEL"}
    done = subprocess.run(
        [sys.executable, str(SAMPLES / name)], capture_output=True, text=True, timeout=30, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()
    assert "Traceback" not in done.stderr


def test_model_switch_resolves_real_models_without_a_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--model`` / ``AGENTKIT_MODEL`` pick a real model; resolving one sends nothing."""
    pytest.importorskip("agentkit.providers")
    import _support

    model, stream_fn = _support.choose_model([], "openai:gpt-4o-mini")
    assert (model.provider, model.id, stream_fn) == ("openai", "gpt-4o-mini", None)
    model, _ = _support.choose_model([], "ollama:qwen2.5:7b")
    assert (model.provider, model.id) == ("ollama", "qwen2.5:7b")
    assert model.base_url == "http://127.0.0.1:11434/v1"
    monkeypatch.setenv("AGENTKIT_MODEL", "anthropic:claude-sonnet-4-5")
    model, stream_fn = _support.choose_model(["scripted"])
    assert (model.provider, stream_fn) == ("anthropic", None)


@pytest.mark.parametrize(
    ("spec", "message"),
    [("openai:no-such-model", "Unknown model"), ("gpt-4o", "PROVIDER:MODEL_ID")],
)
def test_model_switch_rejects_unknown_models(spec: str, message: str) -> None:
    pytest.importorskip("agentkit.providers")
    with pytest.raises(SystemExit, match=message):
        quickstart.main(["--model", spec], out=io.StringIO())


@pytest.mark.embedded
def test_quickstart_on_the_embedded_model() -> None:
    """The same sample on a real (embedded, offline) model: it runs and answers something."""
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("the 'local' extra is not installed (pip install -e '.[local]')")
    env = {k: v for k, v in os.environ.items() if k != "AGENTKIT_MODEL"}
    done = subprocess.run(
        [sys.executable, str(SAMPLES / "quickstart.py"), "--model", "local"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "> How warm is it in Lisbon, in °F?"
    assert len(lines) > 1  # a streamed answer or tool calls (wording is the model's)


@pytest.mark.processes
def test_demo_answer_matches_its_tool_results() -> None:
    done = subprocess.run(
        [sys.executable, "demo.py"], cwd=SAMPLES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    prices = dict(re.findall(r"tool fetch_price -> (\w+): (\d+) EUR/night", done.stdout))
    cheapest = min(prices, key=lambda city: int(prices[city]))
    answer = [line for line in done.stdout.splitlines() if line.startswith("assistant: ")][-1]
    assert f"{cheapest} is the cheapest at {prices[cheapest]} EUR/night" in answer


@pytest.mark.processes
def test_samples_exit_non_zero_when_the_run_fails() -> None:
    env = {**os.environ, "AGENTKIT_MODEL": "openai:gpt-4.1-mini"}
    env = {k: v for k, v in env.items() if not k.endswith("_API_KEY")}  # no key: the run fails
    for sample in ("quickstart.py", "parallel_tools.py"):
        done = subprocess.run(
            [sys.executable, sample],
            cwd=SAMPLES,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 1, (sample, done.stdout, done.stderr)
