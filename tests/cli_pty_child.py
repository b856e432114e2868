"""A child program for the pty tests: ``agentkit`` with a scripted model, so each phase of a run
can be interrupted at a known point. Usage: ``python cli_pty_child.py PHASE WORKSPACE``."""

from __future__ import annotations

import sys

from agentkit import cli
from agentkit.testing import ScriptedModel, reply, tool_call

PHASES = {
    # The model streams a little, then hangs: Ctrl-C lands during generation.
    "generation": (["run", "go"], [reply("thinking about it", hang=True)]),
    # A write needs approval: Ctrl-C lands at the [y/N] question.
    "approval": (
        ["run", "write"],
        [reply(tool_call("write_file", {"path": "a.txt", "content": "x"})), "done"],
    ),
    # An approved command runs for a long time: Ctrl-C lands while the tool runs.
    "tool": (
        ["run", "wait", "--yes"],
        [reply(tool_call("run_command", {"command": "echo started; sleep 60"})), "done"],
    ),
    # A chat whose command runs for a long time: a line typed with "!" interrupts it.
    "chat": (
        ["chat", "--yes"],
        [
            reply(tool_call("run_command", {"command": "echo started; sleep 60"})),
            lambda context, options: f"heard: {context.messages[-1].content[0].text}",
        ],
    ),
    # A chat whose task ends at once: a Ctrl-C typed just after it must not end the chat.
    "chat-fast": (["chat"], ["done at once", "done again"]),
    # A chat whose model reads its prompt for ever: a line typed meanwhile steers it.
    "chat-steer": (["chat"], [reply(hang=True)]),
}


def main() -> None:
    phase, workspace = sys.argv[1], sys.argv[2]
    args, replies = PHASES[phase]
    model = ScriptedModel(replies, delay=0.01)
    cli.console_main([*args, "--workspace", workspace], stream_fn=model, model=model.model)


if __name__ == "__main__":
    main()
