"""A child program for the approval tests of the real command: ``agentkit`` with a scripted
model whose every reply asks to write a file. Usage: ``python cli_approval_child.py COMMAND
WORKSPACE [ARGS...]``; on exit it prints how many requests the model got to stderr."""

from __future__ import annotations

import sys
from typing import Any

from agentkit import cli
from agentkit.testing import ScriptedModel, reply, tool_call


def write_again(context: Any, options: Any) -> Any:
    """A model that asks to write the file again after every refusal."""
    return reply(tool_call("write_file", {"path": "hi.txt", "content": "hello"}))


def main() -> None:
    command, workspace, *rest = sys.argv[1:]
    model = ScriptedModel([write_again] * 200)
    task = {"run": ["run", "Create hi.txt"], "run-stdin": ["run", "-"]}.get(command, [command])
    args = [*task, "--workspace", workspace]
    try:
        cli.console_main([*args, *rest], stream_fn=model, model=model.model)
    finally:
        sys.stderr.write(f"model requests: {len(model.requests)}\n")
        sys.stderr.flush()


if __name__ == "__main__":
    main()
