"""What the benchmarks that run the command share (``bench_outputs.py --via cli``,
``bench_tool_search.py``): ``agentkit ...`` in a subprocess, in a temporary workspace, with
this checkout's ``agentkit``; and what its ``--json`` lines say of the run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REFUSED = re.compile(r"request \((\d+) tokens\) exceeds")
"""The embedded server's refusal of a request larger than its window, with the tokens asked."""


def run_command(command: list[str], timeout: float) -> tuple[str, int | None, float]:
    """Run ``command`` in a fresh temporary folder with this checkout first on the path; its
    standard output (what came before a timeout), its exit code (``None`` on a timeout) and
    the seconds it took."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as workspace:
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, cwd=workspace,
                                  env=env, timeout=timeout)  # fmt: skip
            out, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            raw = exc.stdout or ""
            out, code = raw.decode() if isinstance(raw, bytes) else raw, None
        return out, code, time.monotonic() - started


@dataclass
class Replies:
    """The model's replies of a run, from its ``agent_end`` line (none: the run never ended)."""

    ended: bool = False
    replies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, Any]:
        return self.replies[-1] if self.replies else {}

    @property
    def answer(self) -> str:
        """The last reply's text."""
        blocks = self.last.get("content") or []
        return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")

    @property
    def error(self) -> str:
        """The last error a reply carries ("" when none did)."""
        found = (m.get("error_message") for m in reversed(self.replies) if m.get("error_message"))
        return next(found, "")

    @property
    def refused_tokens(self) -> int | None:
        """The tokens a request the server refused as too large asked for, if one was."""
        refused = REFUSED.search(self.error)
        return int(refused.group(1)) if refused else None

    def tokens(self, *kinds: str) -> list[int]:
        """Each reply's tokens of these kinds of its usage (``input``, ``cache_read``, ...),
        added up (0 where it says none)."""
        return [sum((m.get("usage") or {}).get(k) or 0 for k in kinds) for m in self.replies]

    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of every reply, in order."""
        return [b for m in self.replies for b in m.get("content") or []
                if b.get("type") in ("toolCall", "tool_call")]  # fmt: skip


def read_replies(jsonl: str) -> Replies:
    """The replies of the run whose ``--json`` lines are ``jsonl``."""
    found = Replies()
    for line in jsonl.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("type") == "agent_end":
            messages = event.get("messages") or []
            found = Replies(True, [m for m in messages if m.get("role") == "assistant"])
    return found
