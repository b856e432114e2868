"""``python -m agentkit``: the same as the ``agentkit`` command."""

from .cli import console_main

console_main()
