"""The research-team sample on a real server on 127.0.0.1: the lead delegates to its two
sub-agents in one parallel batch (they must overlap), and the answer carries the usage of the
whole delegation, per sub-agent too; its deadline reaches the sub-agents."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import requests
from flask import Flask
from research_team import HISTORIAN_PROMPT, SCIENTIST_PROMPT, create_app, demo_answer
from sample_helpers import wait_until

from agentkit import Model
from agentkit.testing import SCRIPTED_MODEL, ScriptedModel

WAIT = 10.0




def _system(context: Any) -> str:
    first = context.messages[0]
    return first.content if first.role == "system" else ""


def demo_with(before_sub_agent: Callable[[Any], None]) -> Any:
    """The sample's demo model, calling ``before_sub_agent(signal)`` (the request's abort
    signal) before each sub-agent's request."""

    def stream_fn(model: Model, context: Any, options: Any = None) -> Any:
        if _system(context) in (HISTORIAN_PROMPT, SCIENTIST_PROMPT):
            before_sub_agent(options.signal)
        scripted = ScriptedModel([demo_answer(list(context.messages))], model=model)
        return scripted(model, context, options)

    return stream_fn


def test_the_lead_delegates_to_both_sub_agents_at_once(serve_flask: Callable[[Flask], str]) -> None:
    # Each sub-agent's request waits for the other's: it passes only if they run in parallel.
    together = threading.Barrier(2, timeout=WAIT)
    base = serve_flask(create_app(demo_with(lambda _: together.wait()), SCRIPTED_MODEL))
    response = requests.post(f"{base}/research", json={"question": "salt in the sea"}, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stop_reason"] == "stop"
    assert "Historian's notes on 'salt in the sea'" in body["answer"]
    assert "Scientist's notes on 'salt in the sea'" in body["answer"]
    assert body["usage"]["requests"] == 4  # the lead's two, one for each sub-agent
    by_agent = {s["agent"]: s for s in body["sub_agents"]}
    assert set(by_agent) == {"historian", "scientist"}
    assert all(
        s["usage"]["requests"] == 1 and s["stop_reason"] == "stop" for s in by_agent.values()
    )
    assert body["progress"]["historian"] > 0 and body["progress"]["scientist"] > 0
    # No run left a thread behind: the sub-agents' runs looped on the lead's tool threads.
    assert wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("agentkit")]
    )


def test_the_runs_deadline_reaches_the_sub_agents(serve_flask: Callable[[Flask], str]) -> None:
    # The sub-agents' model hangs until the deadline aborts their requests.
    released: list[bool] = []

    def hang(signal: Any) -> None:
        released.append(signal.wait(WAIT))  # released by the deadline's abort

    base = serve_flask(create_app(demo_with(hang), SCRIPTED_MODEL))
    response = requests.post(
        f"{base}/research", json={"question": "tides", "timeout": 0.3}, timeout=30
    )
    body = response.json()
    assert body["stop_reason"] == "budget" and body["budget"] == "timeout"
    # Both sub-agents' requests were aborted by the lead's deadline (the lead does not wait for
    # them to report once its deadline decided the run, so they may be missing from its result).
    assert wait_until(lambda: len(released) == 2) and all(released)
    assert {s["agent"] for s in body["sub_agents"]} <= {"historian", "scientist"}


def test_a_question_is_required(serve_flask: Callable[[Flask], str]) -> None:
    base = serve_flask(create_app())
    assert requests.post(f"{base}/research", json={}, timeout=30).status_code == 400
