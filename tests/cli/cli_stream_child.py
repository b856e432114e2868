"""A child program for the pty tests of what ``agentkit run`` shows while a reply streams: the
command with its model on a local replay server (real HTTP, chunks stalled where the test says).
Usage: ``python cli_stream_child.py BASE_URL WORKSPACE small|large``: a small context makes the
command read tool calls written as text, as it does for the embedded model."""

from __future__ import annotations

import sys

from agentkit import cli
from agentkit.providers import local_model


def main() -> None:
    base_url, workspace, size = sys.argv[1:4]
    window = 4096 if size == "small" else 32768
    model = local_model(base_url, "stand-in", context_window=window, provider="stand-in")
    task = "Read the file notes.txt and tell me what it says."
    cli.console_main(["run", task, "--workspace", workspace], model=model)


if __name__ == "__main__":
    main()
