"""Steering and aborting: another thread redirects a running agent, then stops it.

Run it: ``python samples/steering.py [--model PROVIDER:MODEL_ID]``. The agent starts writing a
report; a supervisor thread steers it ("bullet points only") while its first tool runs, and aborts
the run while the final answer is still streaming. The transcript then ends with an ``aborted``
assistant message and the agent is idle and ready for the next prompt.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

from _support import exit_status, last_text, model_from_command_line

from agentkit import Agent, tool
from agentkit.abort import AbortSignal
from agentkit.testing import reply, tool_call

STEER = "Keep it short: bullet points only."


@tool
def write_section(title: str, signal: AbortSignal) -> str:
    """Draft one section of the report.

    Args:
        title: The section's title.
    """
    signal.wait(0.4)  # drafting takes a while; an abort cuts it short
    return f"[draft of {title!r}]"


SCRIPT = [
    reply(
        "I'll write the report section by section.", tool_call("write_section", {"title": "Intro"})
    ),
    reply("Understood: bullet points.", tool_call("write_section", {"title": "Findings"})),
    reply("- Sales are up.\n- Costs are down.\n- " + "More details follow. " * 50, hang=True),
]


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> list[Any]:
    """Start a run, steer it and abort it from a supervisor thread; return the transcript."""
    model, stream_fn = model_from_command_line(SCRIPT, argv, __doc__, delay=0.01)
    agent = Agent(
        model=model,
        stream_fn=stream_fn,
        system_prompt="You write reports with write_section, one section at a time.",
        tools=[write_section],
    )
    first_tool_running = threading.Event()
    steered_turn_started = threading.Event()
    answer_streaming = threading.Event()
    steered = threading.Event()

    def on_event(event: Any) -> None:  # runs on the agent's worker thread
        if event.type == "tool_execution_start":
            print(f"  tool {event.tool_name}({event.args})", file=out)
            first_tool_running.set()
        elif event.type == "message_start" and event.message.role == "user" and steered.is_set():
            print(f"  steered: {last_text([event.message])}", file=out)
            steered_turn_started.set()
        elif event.type == "message_update" and steered_turn_started.is_set():
            if (
                event.assistant_message_event.type == "text_delta"
                and len(last_text([event.message])) > 40
            ):
                answer_streaming.set()
        elif event.type == "message_end" and event.message.role == "assistant":
            message = event.message
            shown = last_text([message])[:60]
            if message.error_message:
                shown += f" ({message.error_message})"
            print(f"assistant [{message.stop_reason}]: {shown}", file=out)

    def until(flag: threading.Event) -> bool:
        """Wait for ``flag``, or for the run to end (a real model may not follow the script)."""
        while not flag.wait(0.05):
            if run.done():
                return False
        return True

    def supervisor() -> None:
        if not until(first_tool_running):
            return
        agent.steer(STEER)  # injected after the running tool batch ends
        steered.set()
        # Let the model take the steer, run one more tool and start its final answer.
        if until(answer_streaming):
            agent.abort()  # safe from any thread
            print("  supervisor: abort()", file=out)

    agent.subscribe(on_event)
    run = agent.start("Write the quarterly report.")
    watcher = threading.Thread(target=supervisor, name="supervisor")
    watcher.start()
    run.wait()
    watcher.join()
    last = agent.state.messages[-1]
    print(
        f"run ended: stop_reason={last.stop_reason!r}, idle={not agent.state.is_streaming}",
        file=out,
    )
    return agent.state.messages


if __name__ == "__main__":
    sys.exit(exit_status(main(), abort_expected=True))
