"""A research team behind a Flask endpoint: a lead agent delegates to two sub-agents at once.

Run it: ``python samples/research_team.py [--port 5001] [--model PROVIDER:MODEL_ID]``, then
``curl -X POST localhost:5001/research -H 'content-type: application/json'
-d '{"question": "Why is the sea salty?"}'``. Endpoint:

- ``POST /research`` with JSON ``{"question": ..., "timeout": seconds (optional)}``: the lead
  asks the historian and the scientist in one parallel tool batch (``agent.as_tool()``), each a
  fresh run of its sub-agent on a tool thread of the lead's run, and sums up. The answer comes
  back with what the whole delegation spent (the lead's usage includes its sub-agents') and what
  each sub-agent spent, read with ``agentkit.subagents.child_runs``; ``progress`` counts the
  sub-agents' events the lead's listener saw. ``timeout`` is the run's deadline, which the
  sub-agents share.

The sub-agents are made once, with the app; each request makes its own lead agent, and each
call of a sub-agent a fresh run of it, so concurrent requests share nothing but the templates.
Offline, every agent runs on a rule-based demo model; ``--model`` (or ``AGENTKIT_MODEL``) puts
them all on a real one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from _support import last_text
from _web import web_command_line, web_model
from flask import Flask, abort, jsonify, request

from agentkit import Agent, Budgets, Model, ToolExecutionUpdateEvent
from agentkit.loop import StreamFn
from agentkit.subagents import SubAgentEvent, child_runs
from agentkit.testing import Reply, reply, tool_call

LEAD_PROMPT = (
    "You lead a research team. For every question, ask the historian and the scientist at the "
    "same time (one call each, in one turn), then combine their notes into a short answer."
)
HISTORIAN_PROMPT = "You are a historian. Answer with the history of the topic, in two sentences."
SCIENTIST_PROMPT = "You are a scientist. Answer with the science of the topic, in two sentences."


def demo_answer(messages: list[Any]) -> Reply | str:
    """The offline demo model of all three agents, told apart by their system prompts."""
    system = messages[0].content if messages and messages[0].role == "system" else ""
    last = messages[-1]
    if system == LEAD_PROMPT:
        if last.role == "user":
            task = {"task": last_text([last])}
            return reply(
                "Asking the team.",
                tool_call("historian", task),
                tool_call("scientist", task),
            )
        notes = [last_text([m]) for m in messages if m.role == "tool_result"][-2:]
        return "Here is what the team found. " + " ".join(notes)
    who = "Historian" if system == HISTORIAN_PROMPT else "Scientist"
    return f"{who}'s notes on {last_text([last])!r}: it has a long story."


def create_app(stream_fn: StreamFn | None = None, model: Model | None = None) -> Flask:
    """Build the app; given neither ``stream_fn`` nor ``model``, the offline demo model."""
    model, stream_fn = web_model(stream_fn, model, demo_answer, delay=0.01)  # the team's demo
    historian = Agent(
        model=model,
        stream_fn=stream_fn,
        name="historian",
        description="Knows the history of any topic. Give it the topic.",
        system_prompt=HISTORIAN_PROMPT,
    )
    scientist = Agent(
        model=model,
        stream_fn=stream_fn,
        name="scientist",
        description="Knows the science of any topic. Give it the topic.",
        system_prompt=SCIENTIST_PROMPT,
    )
    team = [historian.as_tool(), scientist.as_tool()]
    app = Flask(__name__)

    @app.post("/research")
    def research() -> Any:
        data = request.get_json(silent=True) or {}
        question = data.get("question")
        if not isinstance(question, str) or not question.strip():
            abort(400, "question (a non-empty string) is required")
        budgets = Budgets(timeout=float(data["timeout"])) if data.get("timeout") else None
        lead = Agent(
            model=model,
            stream_fn=stream_fn,
            tools=team,
            system_prompt=LEAD_PROMPT,
            budgets=budgets,
        )
        progress: Counter[str] = Counter()  # written on the lead's worker, read after its run

        def count(event: Any) -> None:
            if isinstance(event, ToolExecutionUpdateEvent) and isinstance(
                event.partial_result, SubAgentEvent
            ):
                progress[event.partial_result.agent] += 1

        lead.subscribe(count)
        with lead:  # closed (and so aborted) however the request ends
            result = lead.prompt(question)
        return jsonify(
            answer=result.text,
            stop_reason=result.stop_reason,
            budget=result.budget,
            usage=_usage(result.usage),
            sub_agents=[
                {"agent": c.agent, "stop_reason": c.stop_reason, "usage": _usage(c.usage)}
                for c in child_runs(result)
            ],
            progress=dict(progress),
        )

    return app


def _usage(usage: Any) -> dict[str, Any]:
    return {
        "requests": usage.requests,
        "input": usage.input,
        "output": usage.output,
        "cost": usage.cost.total,
    }


def main(argv: Sequence[str] | None = None) -> None:
    port, model, stream_fn = web_command_line(argv, __doc__, 5001)
    create_app(stream_fn, model).run(host="127.0.0.1", port=port, threaded=True)


if __name__ == "__main__":
    main()
